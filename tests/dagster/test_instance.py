"""AACO's Dagster instance config: persistent home and one run per device."""

from __future__ import annotations

import logging
import queue
import sqlite3
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV, event_log, prepare_dagster_home
from aaco_pipelines.instance.event_log import ENGINES_KEPT, SqliteEventLog
from tests import models
from tests.helpers import add_model


def test_instance_limits_runs_to_one_per_device_and_pools_to_one(tmp_path):
    home = prepare_dagster_home(tmp_path / "dagster")
    (home / "dagster.yaml").write_text((home / "dagster.yaml").read_text())  # user edits survive:
    custom = (home / "dagster.yaml").read_text() + "\n# edited\n"
    (home / "dagster.yaml").write_text(custom)
    prepare_dagster_home(home)
    assert (home / "dagster.yaml").read_text() == custom

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        queue = instance.get_concurrency_config().run_queue_config
        limits = [
            (limit["key"], limit["limit"], limit["value"]) for limit in queue.tag_concurrency_limits
        ]
        per_value = {"applyLimitPerUniqueValue": True}  # a run from the UI has only the second
        assert limits == [("aaco/device", 1, per_value), ("dagster/partition/target", 1, per_value)]
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    finally:
        instance.dispose()


def test_routing_without_a_shared_instance_is_refused(tmp_path, monkeypatch):
    """Device workers on other hosts can only take runs from an instance they share."""
    monkeypatch.delenv(POSTGRES_ENV, raising=False)
    monkeypatch.setenv(BROKER_ENV, "redis://127.0.0.1:1/0")
    with pytest.raises(AacoInputError, match=f"{BROKER_ENV} is set without {POSTGRES_ENV}"):
        prepare_dagster_home(tmp_path / "dagster")
    assert not (tmp_path / "dagster" / "dagster.yaml").exists()


def test_a_worker_without_the_shared_instance_and_broker_is_one_line(
    aaco_paths, monkeypatch, capsys
):
    monkeypatch.delenv(POSTGRES_ENV, raising=False)
    monkeypatch.delenv(BROKER_ENV, raising=False)
    assert main(["worker", "--target", "gpu0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and POSTGRES_ENV in err[0] and BROKER_ENV in err[0]


def test_an_embedded_sweep_measures_only_this_hosts_target(aaco_paths, monkeypatch, capsys):
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    monkeypatch.setenv("DAGSTER_HOME", str(aaco_paths.dagster_home))
    assert main(["sweep", "--targets", "gpu3"]) == 2
    err = capsys.readouterr().err
    assert "this host measures on cpu" in err and "AACO_CELERY_BROKER" in err
    assert not aaco_paths.tracelake.exists()


@dg.asset(partitions_def=dg.DynamicPartitionsDefinition(name="things"))
def thing(context) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"key": context.partition_key})


def test_the_embedded_event_log_is_dagsters_own_files_read_by_either(tmp_path):
    """The embedded home's event log is SqliteEventLog, in Dagster's own place: what it records,
    Dagster's default SQLite event log reads, and the other way round."""
    home = prepare_dagster_home(tmp_path / "dagster")
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    assert settings["concurrency"]["pools"]["default_limit"] == 1  # the template kept
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage) is SqliteEventLog
        instance.add_dynamic_partitions("things", ["a"])
        assert dg.materialize([thing], instance=instance, partition_key="a").success
    del settings["event_log_storage"]  # Dagster's default: DAGSTER_HOME/history/runs
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage) is SqliteEventLogStorage
        assert instance.get_dynamic_partitions("things") == ["a"]
        event = instance.get_latest_materialization_event(dg.AssetKey("thing"))
        assert event.asset_materialization.metadata["key"].value == "a"
        instance.add_dynamic_partitions("things", ["b"])
        assert dg.materialize([thing], instance=instance, partition_key="b").success
    (home / "dagster.yaml").unlink()
    prepare_dagster_home(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage) is SqliteEventLog
        records = instance.fetch_materializations(dg.AssetKey("thing"), limit=10).records
        assert sorted(r.partition_key for r in records) == ["a", "b"]


def test_the_event_log_keeps_one_connection_per_database_and_its_writes_reach_a_watcher(
    tmp_path, monkeypatch
):
    """Engines and connections are kept (Dagster opened both for every use: 4,400 times in a zoo
    sweep); each write is still checkpointed into the run's file as it lands, which is what the
    webserver's watcher sees to show a run's logs live."""
    created, opened = [], []
    real_create_engine = event_log.create_engine
    monkeypatch.setattr(
        event_log,
        "create_engine",
        lambda *a, **k: created.append(a[0]) or real_create_engine(*a, **k),
    )
    real_connect = sqlite3.connect
    monkeypatch.setattr(
        sqlite3, "connect", lambda *a, **k: opened.append(a) or real_connect(*a, **k)
    )
    storage = SqliteEventLog(str(tmp_path / "runs"))
    seen = queue.Queue()
    storage.watch("run1", None, lambda entry, cursor: seen.put(entry.user_message))
    try:
        opened.clear()
        for i in range(30):
            storage.store_event(_log_entry("run1", f"line {i}"))
            assert seen.get(timeout=10) == f"line {i}"  # live: before the next write
            assert storage.has_table("dynamic_partitions")
        # the index (made at start), run1's file and the schema-only shard run1 copied
        assert [Path(c.removeprefix("sqlite:///")).stem for c in created] == [
            "index",
            "run1",
            "empty",
        ]
        # the schema-only shard's connection, run1's and the index's: once each, not per event
        assert len(opened) <= 3, opened
        for shard in range(ENGINES_KEPT + 4):  # older engines are let go
            storage.store_event(_log_entry(f"run{shard + 2}", "x"))
        created.clear()
        storage.store_event(_log_entry(f"run{ENGINES_KEPT + 5}", "y"))  # the latest: kept
        storage.store_event(_log_entry("run1", "z"))  # long unused: opened again
        assert [Path(c.removeprefix("sqlite:///")).stem for c in created] == ["run1"]
        assert [
            r.event_log_entry.user_message for r in storage.get_records_for_run("run1").records
        ][-1] == "z"
    finally:
        storage.end_watch("run1", next(iter(storage._watchers["run1"])))
        storage.dispose()


def test_a_copied_run_shard_is_the_one_dagster_builds_and_wipe_leaves_no_open_file(tmp_path):
    """A new run's shard is a copy of a schema-only one: the same tables, indexes, WAL mode and
    Alembic revision as Dagster's own _initdb makes; wiping (which deletes run shards) closes
    the kept connections first, so later events land in new files, not in deleted ones."""
    ours = SqliteEventLog(str(tmp_path / "ours"))
    dagsters = SqliteEventLogStorage(str(tmp_path / "dagster"))
    try:
        for storage in (ours, dagsters):
            storage.store_event(_log_entry("run1", "first"))
        assert _shape(tmp_path / "ours" / "run1.db") == _shape(tmp_path / "dagster" / "run1.db")
        ours.wipe()
        assert not (tmp_path / "ours" / "run1.db").exists()
        ours.store_event(_log_entry("run1", "after the wipe"))
        messages = [
            r.event_log_entry.user_message for r in ours.get_records_for_run("run1").records
        ]
        assert messages == ["after the wipe"]
        assert (tmp_path / "ours" / "run1.db").exists()
    finally:
        ours.dispose()
        dagsters.dispose()
    with sqlite3.connect(tmp_path / "ours" / "run1.db") as db:  # closed: all in the file
        assert db.execute("SELECT count(*) FROM event_logs").fetchone() == (1,)


def test_dynamic_partitions_are_read_once_until_anyone_changes_them(tmp_path, monkeypatch):
    """Partition lookups (about 100 a run) are answered from what was read, until the index
    changes: keys another process adds or deletes are seen at the next lookup, as are this
    storage's own."""
    reads = []
    real_read = SqliteEventLogStorage.get_dynamic_partitions
    monkeypatch.setattr(
        SqliteEventLogStorage,
        "get_dynamic_partitions",
        lambda self, name: reads.append(name) or real_read(self, name),
    )
    ours = SqliteEventLog(str(tmp_path / "runs"))
    other_process = SqliteEventLog(str(tmp_path / "runs"))  # its own connections
    try:
        ours.add_dynamic_partitions("models", ["a", "b"])
        assert all(ours.has_dynamic_partition("models", "a") for _ in range(50))
        assert not ours.has_dynamic_partition("models", "c")
        assert ours.get_dynamic_partitions("models") == ["a", "b"]
        assert reads == ["models"]
        ours.store_event(_log_entry("run1", "an event"))  # its own writes change nothing
        assert ours.has_dynamic_partition("models", "b") and reads == ["models"]
        other_process.add_dynamic_partitions("models", ["c"])
        assert ours.has_dynamic_partition("models", "c")
        other_process.delete_dynamic_partition("models", "a")
        assert ours.get_dynamic_partitions("models") == ["b", "c"]
        ours.add_dynamic_partitions("models", ["d"])
        assert ours.has_dynamic_partition("models", "d")
        assert len(reads) == 4  # once at first, then once after each of the three changes
    finally:
        ours.dispose()
        other_process.dispose()


def _shape(path: Path) -> tuple:
    with sqlite3.connect(path) as db:
        return (
            db.execute("PRAGMA journal_mode").fetchone(),
            db.execute("SELECT version_num FROM alembic_version").fetchall(),
            sorted(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall(), key=str),
        )


def _log_entry(run_id: str, message: str) -> EventLogEntry:
    return EventLogEntry(
        error_info=None,
        level=logging.INFO,
        user_message=message,
        run_id=run_id,
        timestamp=time.time(),
    )


def test_a_moved_dagster_home_is_told_where_its_event_log_went(tmp_path):
    """dagster.yaml names the event log's folder in full: after the home moves, Dagster would
    start an empty history at the old path; the move is named instead, with the line to fix."""
    home = prepare_dagster_home(tmp_path / "dagster")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("things", ["a"])
    moved = tmp_path / "elsewhere"
    home.rename(moved)
    with pytest.raises(AacoInputError, match="was the folder moved") as info:
        prepare_dagster_home(moved)
    assert str(moved / "dagster.yaml") in str(info.value)
    assert str(moved / "history" / "runs") in str(info.value)
    settings = yaml.safe_load((moved / "dagster.yaml").read_text())
    settings["event_log_storage"]["config"]["base_dir"] = str(moved / "history" / "runs")
    (moved / "dagster.yaml").write_text(yaml.safe_dump(settings))  # the fix it names
    with dg.DagsterInstance.from_config(str(prepare_dagster_home(moved))) as instance:
        assert instance.get_dynamic_partitions("things") == ["a"]

"""AACO's Dagster instance config: persistent home and one run per device."""

from __future__ import annotations

import dagster as dg
import models
import pytest
from conftest import add_model

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV, prepare_dagster_home


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

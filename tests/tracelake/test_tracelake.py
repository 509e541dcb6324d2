"""The TraceLake: one transaction per session, idempotent, versioned, serialized writers."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import duckdb
import pyarrow.compute as pc
import pytest

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.stages.collect import collect
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.queries import session_quality
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED, as_one_kernel_events_table, stamp_schema_version


def _counts(lake: TraceLake, session_id: str) -> dict:
    return {
        t: lake.query(f"SELECT count(*) AS n FROM {t} WHERE session_id = ?", [session_id])["n"][
            0
        ].as_py()
        for t in ("session_records", "iterations", "kernel_events", "telemetry")
    }


def test_session_lands_whole(measured_mlp_template):
    paths, bundle = measured_mlp_template
    lake = TraceLake(paths.tracelake)
    quality = session_quality(lake, bundle.session_id)
    assert quality["session_rows"] == 1
    assert quality["measured_rows"] == quality["measured_requested"] == 20
    # at least the sidecar's 5 (more for a noisy measured pass), each with its node events
    assert quality["profiled_rows"] == quality["profiled_requested"] >= 5
    assert quality["iterations_with_node_events"] == quality["profiled_rows"]
    assert quality["telemetry_hz"] >= 10
    graph = lake.query("SELECT node_count, parameter_count FROM models").to_pylist()
    assert graph == [{"node_count": 4, "parameter_count": 16 * 32 + 32 + 32 * 8}]
    assert lake.schema_version() == SCHEMA_VERSION


def test_reingesting_replaces_never_doubles(measured_mlp_home):
    paths, bundle = measured_mlp_home
    lake = TraceLake(paths.tracelake)
    before = _counts(lake, bundle.session_id)
    collect(bundle)
    load_session(lake, bundle)
    assert _counts(lake, bundle.session_id) == before
    assert lake.query("SELECT count(*) AS n FROM graph_nodes")["n"][0].as_py() == 4
    # Loaded again, it is hidden until analysed again: its old analysis no longer matches.
    assert lake.session_states()[bundle.session_id] is False
    visible = "SELECT count(*) AS n FROM sessions WHERE session_id = ?"
    assert lake.query(visible, [bundle.session_id])["n"][0].as_py() == 0
    load_session(lake, bundle, complete=True)
    assert lake.query(visible, [bundle.session_id])["n"][0].as_py() == 1


def test_failed_ingest_leaves_nothing_half_written(measured_mlp_template, tmp_path):
    paths, bundle = measured_mlp_template
    lake = TraceLake(tmp_path / "other.duckdb")
    # Break one table of a copy of the bundle: the transaction must roll back as a whole.
    import shutil

    copy = SessionBundle(tmp_path / bundle.session_id)
    shutil.copytree(bundle.path, copy.path)
    copy.table_path("telemetry").write_bytes(b"not parquet")
    with pytest.raises(duckdb.Error):  # verify=False: past the manifest, which refuses it first
        load_session(lake, copy, verify=False)
    assert _counts(lake, bundle.session_id) == dict.fromkeys(_counts(lake, bundle.session_id), 0)
    assert lake.query("SELECT count(*) AS n FROM models")["n"][0].as_py() == 0


def test_bundle_without_tables_is_refused(measured_mlp_template, tmp_path):
    paths, bundle = measured_mlp_template
    import shutil

    copy = SessionBundle(tmp_path / bundle.session_id)
    shutil.copytree(bundle.path, copy.path)
    shutil.rmtree(copy.tables_dir)
    with pytest.raises(AacoInputError, match="collected_traces"):
        load_session(TraceLake(tmp_path / "x.duckdb"), copy)


def test_newer_schema_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "future.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE schema_info (version INTEGER, applied_at TIMESTAMPTZ)")
        con.execute("INSERT INTO schema_info VALUES (?, now())", [SCHEMA_VERSION + 1])
    with pytest.raises(AacoInputError, match="upgrade aaco"):
        with TraceLake(path).connect(write=True):
            pass


def _ingest_in_process(args):
    lake_path, bundle_path = args
    load_session(TraceLake(lake_path), SessionBundle(bundle_path))
    return True


def test_concurrent_writers_from_processes_do_not_fail_on_the_file_lock(
    measured_mlp_template, tmp_path
):
    _paths, bundle = measured_mlp_template
    lake_path = tmp_path / "shared.duckdb"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_ingest_in_process, [(lake_path, bundle.path)] * 8)
    assert all(results)
    assert _counts(TraceLake(lake_path), bundle.session_id)["session_records"] == 1


def test_a_v5_lake_migrates_with_every_stored_session_visible(measured_mlp_template, tmp_path):
    """Before v6 every session row was visible: after the migration each one still is, now as
    a completed session, and new loads start invisible."""
    paths, bundle = measured_mlp_template
    old = tmp_path / "v5.duckdb"
    lake = TraceLake(old)
    load_session(lake, bundle, complete=True)
    with duckdb.connect(str(old)) as con:  # back to v5's shape: a plain sessions table
        as_one_kernel_events_table(con)
        con.execute("DROP VIEW sessions")
        con.execute("DROP TABLE completed_sessions")
        con.execute("ALTER TABLE session_records RENAME TO sessions")
        stamp_schema_version(con, 5)
    with lake.connect(write=True):
        pass  # the next write migrates
    assert lake.schema_version() == SCHEMA_VERSION
    assert lake.session_states() == {bundle.session_id: True}
    assert lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist() == [
        bundle.session_id
    ]


def test_a_v9_lake_keeps_its_kernels_and_loads_device_traces_apart(aaco_paths):
    """v10 stores a device trace's kernels without the columns no device trace has: a lake of
    v9 keeps every row it had, readable as before, and its sessions are still replaced and
    deleted whole."""
    trace = SHARED / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
    lake = TraceLake(aaco_paths.tracelake)
    first = ingest_trace(trace, aaco_paths, name="v9", complete=True)
    everything = "SELECT * FROM kernel_events ORDER BY session_id, start_ns, kernel_name"
    before = lake.query(everything)
    with duckdb.connect(str(aaco_paths.tracelake)) as con:
        as_one_kernel_events_table(con)
        stamp_schema_version(con, 9)
    second = ingest_trace(trace, aaco_paths, name="v10", complete=True)  # migrates first
    assert lake.schema_version() == SCHEMA_VERSION
    after = lake.query(everything)
    assert after.filter(pc.equal(after["session_id"], first.session_id)).equals(before)
    stored = lake.query(
        "SELECT (SELECT count(*) FROM kernel_events_profile WHERE session_id = $old) AS old_kept, "
        "(SELECT count(*) FROM kernel_events_trace WHERE session_id = $new) AS new_apart, "
        "(SELECT count(*) FROM kernel_events_trace WHERE session_id = $old) AS old_moved",
        {"old": first.session_id, "new": second.session_id},
    ).to_pylist()[0]
    kernels = before.num_rows - 1  # and the span standing for the one iteration
    assert stored == {"old_kept": before.num_rows, "new_apart": kernels, "old_moved": 0}
    new_rows = after.filter(pc.equal(after["session_id"], second.session_id))
    assert new_rows.drop_columns("session_id").equals(before.drop_columns("session_id"))
    load_session(lake, SessionBundle(second.path), complete=True)  # replaced, not doubled
    lake.delete_sessions([first.session_id])
    assert lake.query(
        "SELECT session_id, count(*) AS n FROM kernel_events GROUP BY 1"
    ).to_pylist() == [{"session_id": second.session_id, "n": before.num_rows}]


def test_reads_inside_reading_share_one_connection_and_writes_still_land(
    measured_mlp_template, tmp_path, monkeypatch
):
    """One open for a stage's reads; a write inside closes it first and the next read sees the
    write; after the block another process may write again."""
    import aaco_pipelines.tracelake.store as store

    _paths, bundle = measured_mlp_template
    lake = TraceLake(tmp_path / "lake.duckdb")
    load_session(lake, bundle, complete=True)
    opens = []
    original = store.open_duckdb
    monkeypatch.setattr(store, "open_duckdb", lambda *a, **k: opens.append(k) or original(*a, **k))
    count = "SELECT count(*) AS n FROM completed_sessions"
    with lake.reading():
        assert [lake.query(count)["n"][0].as_py() for _ in range(5)] == [1] * 5
        assert len(opens) == 1  # five reads, one open
        lake.delete_sessions([bundle.session_id])  # a write inside the block
        assert lake.query(count)["n"][0].as_py() == 0  # seen by the reopened reader
        assert len(opens) == 3  # the writer's open, then the reader's again
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # the block released the file
        assert pool.map(_ingest_in_process, [(lake.path, bundle.path)]) == [True]
    assert lake.query("SELECT count(*) AS n FROM session_records")["n"][0].as_py() == 1


def test_duckdb_memory_for_a_lake_file_is_bounded(tmp_path, monkeypatch):
    """A lake file's DuckDB gets AACO_DUCKDB_MEMORY_MB (1 GiB unset), not 80 % of the machine:
    its cache grew with the trace; in-memory work keeps DuckDB's own default; a bad value is
    one line naming the variable, before the lake is opened."""

    def limit(lake) -> str:
        with TraceLake(lake).connect(write=True) as con:
            return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    monkeypatch.delenv("AACO_DUCKDB_MEMORY_MB", raising=False)
    assert limit(tmp_path / "default.duckdb") == "1.0 GiB"
    monkeypatch.setenv("AACO_DUCKDB_MEMORY_MB", "300")
    assert limit(tmp_path / "set.duckdb") == "300.0 MiB"
    with engine.connect() as con:
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] != "300.0 MiB"
    for bad in ("lots", "2GB", "64"):
        monkeypatch.setenv("AACO_DUCKDB_MEMORY_MB", bad)
        with pytest.raises(AacoInputError, match=f"AACO_DUCKDB_MEMORY_MB='{bad}'.*at least 128"):
            limit(tmp_path / "bad.duckdb")
    assert not (tmp_path / "bad.duckdb").exists()


SPILLER = """
import sys
from pathlib import Path
from aaco_pipelines.tracelake.store import TraceLake
from aaco_pipelines.stages.load import load_session
sorted_rows = TraceLake(Path(sys.argv[1])).query(
    "SELECT count(*) AS n FROM (SELECT i, md5(i::VARCHAR) AS h FROM range(6000000) t(i) "
    "ORDER BY h)"
)
print(sorted_rows["n"][0].as_py())
"""


def test_two_processes_spilling_beside_one_lake_both_finish(tmp_path, monkeypatch):
    """Under its memory limit DuckDB spills a sort to `<lake>.tmp`. DuckDB 1.5 names its spill
    files alike in every process: two processes spilling there at once both died (SIGSEGV),
    so under 1.5 each process spills into a folder of its own (2.0 names them by process)."""
    monkeypatch.setenv("AACO_DUCKDB_MEMORY_MB", "128")
    lake = tmp_path / "lake.duckdb"
    with TraceLake(lake).connect(write=True):
        pass
    spillers = [
        subprocess.Popen(
            [sys.executable, "-c", SPILLER, str(lake)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [spiller.communicate(timeout=300) for spiller in spillers]
    assert [spiller.returncode for spiller in spillers] == [0, 0], results
    assert [out.split()[-1] for out, _ in results] == ["6000000", "6000000"]


def test_a_v11_lake_gains_each_ops_rank_stability_unknown(tmp_path):
    """v12 stores how often a resample of the profiled iterations ranks each op first or among
    the first three: rows attributed before keep theirs unknown (null), nothing else changes."""
    path = tmp_path / "v11.duckdb"
    lake = TraceLake(path)
    with lake.connect(write=True):
        pass  # a lake of the current schema
    with duckdb.connect(str(path)) as con:  # back to v11's shape, with a row attributed then
        for table in ("op_breakdown", "phase_breakdown"):
            for column in ("p_top", "p_top3"):
                con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute(
            "INSERT INTO op_breakdown (session_id, level, name, share) VALUES ('s', 'node', 'a', 1)"
        )
        stamp_schema_version(con, 11)
    with lake.connect(write=True):
        pass  # the next write migrates
    assert lake.schema_version() == SCHEMA_VERSION
    rows = lake.query("SELECT name, share, p_top, p_top3 FROM op_breakdown").to_pylist()
    assert rows == [{"name": "a", "share": 1.0, "p_top": None, "p_top3": None}]
    assert {"p_top", "p_top3"} <= set(lake.query("SELECT * FROM phase_breakdown").column_names)


def test_a_v12_lake_gains_the_class_close_calls_unknown(tmp_path):
    """v13 stores the classes that win with the signals moved by their run-to-run spread: a
    session classified before keeps its class and its close calls unknown (null)."""
    path = tmp_path / "v12.duckdb"
    lake = TraceLake(path)
    with lake.connect(write=True):
        pass
    with duckdb.connect(str(path)) as con:
        con.execute("ALTER TABLE bottleneck_reports DROP COLUMN close_calls_json")
        con.execute(
            "INSERT INTO bottleneck_reports (session_id, bottleneck, confidence) "
            "VALUES ('s', 'balanced', 0.8)"
        )
        stamp_schema_version(con, 12)
    with lake.connect(write=True):
        pass
    assert lake.schema_version() == SCHEMA_VERSION
    rows = lake.query(
        "SELECT bottleneck, confidence, close_calls_json FROM bottleneck_reports"
    ).to_pylist()
    assert rows == [{"bottleneck": "balanced", "confidence": 0.8, "close_calls_json": None}]

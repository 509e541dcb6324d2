"""A TraceLake file that is damaged or not DuckDB's, and a lake write the disk refuses: one line
naming the file and the fix, never a traceback, and the lake's earlier rows kept (issue #10,
item 6). Real DuckDB files and a real full tmpfs."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3

import pyarrow as pa
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.cli.doctor_checks import PROBLEM, check_tracelake
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import fill, store_sessions

SESSION = {"session_id": "s1", "model_slug": "mlp", "started_at": dt.datetime(2025, 1, 1)}


def _truncated(path) -> None:
    """A real lake, big enough that DuckDB still opens it once cut to half its size."""
    lake = TraceLake(path)
    store_sessions(lake, [SESSION])
    with lake.connect(write=True) as con:
        con.execute(
            "CREATE TABLE padding AS SELECT range AS i, md5(range::VARCHAR) AS s FROM range(20000)"
        )
    os.truncate(path, path.stat().st_size // 2)


def _sqlite(path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE sessions (session_id TEXT)")


DAMAGE = {
    "truncated": _truncated,
    "random bytes": lambda path: path.write_bytes(os.urandom(300_000)),
    "text": lambda path: path.write_text("session_id,latency\ns1,3\n" * 1000),
    "sqlite": _sqlite,
    "empty": lambda path: path.write_bytes(b""),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_lake_is_one_line_for_every_command_and_a_problem_for_the_doctor(
    damage, aaco_paths, tmp_path, capsys
):
    path = aaco_paths.tracelake
    path.parent.mkdir(parents=True, exist_ok=True)
    DAMAGE[damage](path)
    before = path.read_bytes()
    lake = TraceLake(path)

    def refused(attempt) -> str:
        with pytest.raises(AacoInputError) as raised:
            attempt()
        message = str(raised.value)
        assert "\n" not in message and message.startswith(f"{path}: ")
        assert "move it aside (with its .wal, if any) and run `aaco restore`" in message
        return message

    refused(lambda: lake.query("SELECT count(*) FROM sessions"))
    refused(lambda: lake.append_rows("completed_sessions", pa.table({"session_id": ["s2"]})))
    assert path.read_bytes() == before  # the writer left the file as it found it

    report = str(tmp_path / "report.json")
    assert main(["report", "--session", "latest", "--format", "json", "--output", report]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"aaco: error: {path}: ")

    check = check_tracelake(aaco_paths)
    assert check.status == PROBLEM and str(path) in check.detail
    assert "restore it from a backup" in check.meaning


def _telemetry(rows: int) -> pa.Table:
    return pa.table(
        {
            "session_id": ["s1"] * rows,
            "timestamp_ns": pa.array(range(rows), pa.int64()),
            "metric": ["cpu_utilization"] * rows,
            "value": [float(i % 100) for i in range(rows)],
        }
    )


@pytest.mark.parametrize("rows", [500, 300_000], ids=["COMMIT fails", "the insert fails"])
def test_a_full_disk_during_a_lake_write_is_one_line_and_keeps_the_earlier_rows(full_disk, rows):
    lake = TraceLake(full_disk / "lake.duckdb")
    store_sessions(lake, [SESSION])
    lake.replace_session_rows("s1", {"telemetry": _telemetry(10)})
    fill(full_disk, 0)

    with pytest.raises(AacoInputError) as raised:
        lake.replace_session_rows("s1", {"telemetry": _telemetry(rows)})
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{lake.path}: no space left")
    assert f"free space on {full_disk}" in message and "rollback" not in message

    (full_disk / "filler").unlink()
    count = "SELECT count(*) AS n FROM telemetry WHERE session_id = 's1'"
    assert lake.query(count)["n"].to_pylist() == [10]
    assert lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist() == ["s1"]
    lake.replace_session_rows("s1", {"telemetry": _telemetry(rows)})  # with room, it writes
    assert lake.query(count)["n"].to_pylist() == [rows]

"""A TraceLake another process holds: readers share it, every wait is bounded, says what it
waits for and ends in one line naming the holder (issue #10, item 5). Real processes, real files."""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import store_sessions

TIMEOUT_S = 2.0
# A holder of the lake in another process: a duckdb viewer (read-only or not), or an aaco
# writer inside its write connection (both locks), optionally stopped with SIGSTOP. Run with
# `python -c`: a command line of several lines, which the one-line error must flatten.
HOLDER = """
import contextlib, os, signal, sys, time
import duckdb
from aaco_pipelines.tracelake.store import TraceLake

mode, path = sys.argv[1], sys.argv[2]
with contextlib.ExitStack() as stack:
    if mode == "writer":
        stack.enter_context(TraceLake(path).connect(write=True))
    else:
        stack.enter_context(duckdb.connect(path, read_only=mode == "read_only"))
    print("ready", flush=True)
    if "--stop" in sys.argv:
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(60)
"""


@pytest.fixture
def lake(aaco_paths, monkeypatch) -> TraceLake:
    """A lake with one complete session; aaco gives up on a busy lake after TIMEOUT_S."""
    monkeypatch.setenv("AACO_LOCK_TIMEOUT_S", str(TIMEOUT_S))
    lake = TraceLake(aaco_paths.tracelake)
    started = dt.datetime.now(dt.timezone.utc)
    store_sessions(lake, [{"session_id": "s1", "model_slug": "mlp", "started_at": started}])
    return lake


@contextlib.contextmanager
def holding(path: Path, mode: str, *, stop: bool = False):
    """A process holding the lake until the block ends (killed then, stopped or not)."""
    command = [sys.executable, "-c", HOLDER, mode, str(path), *(["--stop"] if stop else [])]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def fails_within_timeout(lake: TraceLake, holder: subprocess.Popen):
    """The block must fail with one line naming the lake and the holder, in about TIMEOUT_S."""
    started = time.monotonic()
    with pytest.raises(AacoInputError) as raised:
        yield raised
    waited = time.monotonic() - started
    message = str(raised.value)
    assert TIMEOUT_S - 0.1 <= waited < TIMEOUT_S + 2, waited
    assert "\n" not in message and str(lake.path) in message
    assert f"pid {holder.pid} ({sys.executable} -c import contextlib" in message  # + command
    assert "AACO_LOCK_TIMEOUT_S" in message


def _more_rows() -> pa.Table:
    return pa.table({"session_id": ["s2"]})


@pytest.mark.timeout(30)
def test_a_read_only_viewer_blocks_no_reader(lake, tmp_path, capsys):
    with holding(lake.path, "read_only"):
        started = time.monotonic()
        assert lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist() == ["s1"]
        assert time.monotonic() - started < TIMEOUT_S
        report = tmp_path / "report.json"
        assert (
            main(["report", "--session", "latest", "--format", "json", "--output", str(report)])
            == 0
        )
        assert '"s1"' in report.read_text()
    # Nobody waited (rendering the report may itself take longer than the lock timeout).
    assert "waiting" not in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_a_writer_behind_a_read_only_viewer_names_it_and_stops_waiting(lake):
    with holding(lake.path, "read_only") as viewer:
        with fails_within_timeout(lake, viewer) as raised:
            lake.append_rows("completed_sessions", _more_rows())
        assert "-readonly" in str(raised.value)  # the likely culprit, and its fix
    lake.append_rows("completed_sessions", _more_rows())  # the viewer gone, writes go on


@pytest.mark.timeout(30)
def test_a_read_write_holder_fails_writers_and_readers_within_the_timeout(lake, capsys, tmp_path):
    with holding(lake.path, "read_write") as shell:  # e.g. `duckdb tracelake.duckdb`
        with fails_within_timeout(lake, shell):
            lake.append_rows("completed_sessions", _more_rows())
        with fails_within_timeout(lake, shell):
            lake.query("SELECT count(*) FROM sessions")
        capsys.readouterr()
        report = str(tmp_path / "report.json")
        assert main(["report", "--session", "latest", "--format", "json", "--output", report]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and str(lake.path) in errors[0] and f"pid {shell.pid}" in errors[0]


@pytest.mark.timeout(30)
def test_a_stopped_writer_fails_the_others_within_the_timeout_instead_of_hanging(lake):
    with holding(lake.path, "writer", stop=True) as writer:
        with fails_within_timeout(lake, writer) as raised:
            lake.append_rows("completed_sessions", _more_rows())
        assert "writer lock" in str(raised.value) and "stopped" in str(raised.value)
        assert f"kill -CONT {writer.pid}" in str(raised.value)
        with fails_within_timeout(lake, writer) as raised:
            lake.query("SELECT count(*) FROM sessions")
        assert "stopped" in str(raised.value)


@pytest.mark.timeout(30)
def test_a_long_wait_says_every_few_seconds_what_it_waits_for(lake, capsys):
    with holding(lake.path, "writer") as writer:
        heard: list[str] = []
        with pytest.raises(AacoInputError):
            TraceLake(lake.path, lock_timeout_s=2.5, on_wait=heard.append).append_rows(
                "completed_sessions", _more_rows()
            )
        assert heard and all(
            "waiting" in line and str(lake.path) in line and f"pid {writer.pid}" in line
            for line in heard
        )
        with pytest.raises(AacoInputError):  # by default on stderr, before the error
            lake.query("SELECT count(*) FROM sessions")
    waits = [line for line in capsys.readouterr().err.splitlines() if "waiting" in line]
    assert waits and waits[0].startswith("aaco: ") and f"pid {writer.pid}" in waits[0]


def test_reading_a_lake_not_created_yet_reads_an_empty_one_without_creating_it(tmp_path):
    lake = TraceLake(tmp_path / "absent" / "lake.duckdb")
    assert lake.query("SELECT count(*) AS n FROM sessions")["n"].to_pylist() == [0]
    assert lake.schema_version() is None
    assert not lake.path.exists() and not lake.path.parent.exists()

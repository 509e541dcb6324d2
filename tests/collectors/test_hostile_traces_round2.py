"""Hostile traces, round two: what hung, flooded, tracebacked or blamed the wrong thing.

Each hostile file is built here, in tmp_path, and given to `aaco ingest` for real (a real
TraceLake file, a real AACO_HOME): a rocpd database whose `kernels` view never yields a row or
never stops yielding them, the same read stopped by SIGTERM, a gzip bomb, a gzip database on a
small disk, a disk that fills while the trace loads, kernels with all-zero or 64-bit-overflowing
timestamps, a CSV header field over 128 KB, corrupt `.db` files, and AACO_HOME itself given as
the trace. Each must end in one line naming the real cause and the fix, leaving no session, no
rows, no scratch file and no held lock.
"""

from __future__ import annotations

import csv
import gzip
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from contextlib import closing
from pathlib import Path

import duckdb
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.collectors.bounded_reads import TraceRead
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED, error_lines, fill

SAMPLES = SHARED / "samples" / "profilers"
KERNEL_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
V1_CSV = SAMPLES / "hpctraining_mi250_laplacian_rocprofv1_results.csv"
RPD_GZ = SAMPLES / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"

# A rocpd `kernels` view over an endless recursive CTE: filtered to nothing it never yields a
# row; unfiltered it never stops yielding them.
NEVER_YIELDS = "WHERE x < 0"
ENDLESS = ""


def rocpd_with_view(path: Path, where: str) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE rocpd_info_agent (id INTEGER, type TEXT, logical_index INTEGER)")
        db.execute(
            "CREATE VIEW kernels AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
            f"FROM n) SELECT 'gemm' AS name, x AS start, x + 1 AS \"end\" FROM n {where}"
        )
        db.commit()
    return path


def rocpd_database(path: Path, kernels: int = 2_000) -> Path:
    """A small rocpd database whose kernels view is a plain table."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE rocpd_info_agent (id INTEGER, type TEXT, logical_index INTEGER)")
        db.execute('CREATE TABLE kernels (name TEXT, start INTEGER, "end" INTEGER)')
        db.executemany(
            "INSERT INTO kernels VALUES (?, ?, ?)",
            [(f"kernel_{i % 13}", 1_000 * i, 1_000 * i + 700) for i in range(kernels)],
        )
        db.commit()
    return path


def gzipped(path: Path) -> Path:
    target = path.with_name(path.name + ".gz")
    target.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return target


def one_error_line(capsys) -> str:
    """The one line aaco printed for its error (progress lines aside), checked to be one."""
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("aaco: error: "), err
    assert "Traceback" not in err and "Fix:" in lines[0], err
    return lines[0]


def assert_nothing_kept(paths: AacoPaths) -> None:
    """No session bundle, staging folder, scratch file or row; the lake's lock is free (a
    write transaction opens at once)."""
    staging = paths.sessions / ".staging"
    assert not staging.exists() or not any(staging.iterdir())
    assert not list(paths.sessions.glob("2*/*"))
    assert not paths.scratch.exists() or not any(paths.scratch.iterdir())
    if paths.tracelake.exists():
        with TraceLake(paths.tracelake).transaction() as con:
            assert con.execute("SELECT count(*) FROM session_records").fetchone() == (0,)
            assert con.execute("SELECT count(*) FROM kernel_events").fetchone() == (0,)


@pytest.fixture
def quick_lock(monkeypatch):
    monkeypatch.setenv("AACO_LOCK_TIMEOUT_S", "10")


# --- 1. rocpd reads end: a deadline, a row cap, stop signals ------------------------------------


@pytest.mark.timeout(60)
def test_a_rocpd_view_that_never_yields_stops_at_the_time_budget(
    aaco_paths, tmp_path, capsys, monkeypatch, quick_lock
):
    monkeypatch.setenv("AACO_TRACE_READ_TIMEOUT_S", "2")
    trace = rocpd_with_view(tmp_path / "4242_results.db", NEVER_YIELDS)
    started = time.monotonic()
    assert main(["ingest", str(trace)]) == 2
    assert time.monotonic() - started < 30  # 2 s of budget, and a busy machine
    line = one_error_line(capsys)
    assert str(trace) in line and "over 2 s" in line and "AACO_TRACE_READ_TIMEOUT_S" in line
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(60)
def test_a_rocpd_view_that_never_stops_yielding_is_capped_by_the_file_size(
    aaco_paths, tmp_path, capsys, quick_lock
):
    trace = rocpd_with_view(tmp_path / "4242_results.db", ENDLESS)
    assert main(["ingest", str(trace)]) == 2
    line = one_error_line(capsys)
    size = trace.stat().st_size
    assert str(trace) in line and f"over {size // 8:,}" in line and f"{size:,} bytes" in line
    assert "TransactionContext" not in line
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(120)
def test_sigterm_stops_a_never_ending_rocpd_read_and_frees_the_lake(
    aaco_paths, tmp_path, quick_lock
):
    trace = rocpd_with_view(tmp_path / "4242_results.db", NEVER_YIELDS)
    env = {**os.environ, "AACO_HOME": str(aaco_paths.home), "PYTHONUNBUFFERED": "1"}
    aaco = subprocess.Popen(
        [sys.executable, "-m", "aaco_pipelines.cli", "ingest", str(trace)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        seen = ""
        while "loading session" not in seen:
            line = aaco.stderr.readline()
            assert line, f"aaco ended before loading: {seen}"
            seen += line
        time.sleep(1.0)  # inside the SQLite read, holding the lake's write lock
        os.kill(aaco.pid, signal.SIGTERM)
        stopped = time.monotonic()
        _, err = aaco.communicate(timeout=60)
        took = time.monotonic() - stopped
    finally:
        aaco.kill()
    assert aaco.returncode == 128 + signal.SIGTERM, seen + err
    assert "stopped by SIGTERM" in err and "Traceback" not in err and took < 30, (took, err)
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(60)
def test_a_duckdb_read_is_interrupted_at_its_deadline(monkeypatch, tmp_path):
    """The CSV and JSON readers' DuckDB statements stop at the same budget."""
    monkeypatch.setenv("AACO_TRACE_READ_TIMEOUT_S", "0.5")
    read = TraceRead.of(tmp_path / "trace.csv", 1_000)
    con = duckdb.connect()
    started = time.monotonic()
    with pytest.raises(AacoInputError, match="took over 0.5 s") as err:
        with read.interrupting(con):
            con.execute("SELECT count(*) FROM range(1000000000000) a, range(1000) b").fetchall()
    assert time.monotonic() - started < 30
    assert "AACO_TRACE_READ_TIMEOUT_S" in str(err.value)
    assert con.execute("SELECT 42").fetchone() == (42,)  # the connection is usable again


# --- 3. gzip: capped, inflated in AACO_HOME's scratch, never left behind ------------------------


def gzip_bomb(path: Path, inflated_bytes: int) -> Path:
    """A SQLite header followed by zeros: a thousandfold smaller compressed."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip stream
    zeros = b"\0" * (1 << 20)
    with open(path, "wb") as out:
        out.write(compressor.compress(b"SQLite format 3\0"))
        for _ in range(inflated_bytes >> 20):
            out.write(compressor.compress(zeros))
        out.write(compressor.flush())
    return path


@pytest.mark.timeout(60)
def test_a_gzip_bomb_is_refused_before_it_is_inflated_anywhere(
    aaco_paths, tmp_path, capsys, monkeypatch
):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    bomb = gzip_bomb(tmp_path / "4242_results.db.gz", 96 << 20)
    assert bomb.stat().st_size < 1 << 20  # 96 MiB in less than 1 MiB
    assert main(["ingest", str(bomb)]) == 2
    line = one_error_line(capsys)
    assert str(bomb) in line and "inflates past 64 MiB" in line and "gunzip" in line
    assert list(temp.iterdir()) == []
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(60)
def test_a_gzip_database_is_inflated_in_aaco_home_scratch_and_removed(
    aaco_paths, tmp_path, monkeypatch
):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    aaco_paths.scratch.mkdir(parents=True)
    leftover = aaco_paths.scratch / ".inflated-killed-4242_results.db"  # a kill -9's leftover
    leftover.write_bytes(b"x" * 1000)
    os.utime(leftover, (time.time() - 60, time.time() - 60))
    trace = gzipped(rocpd_database(tmp_path / "4242_results.db"))
    assert main(["ingest", str(trace), "--name", "zipped"]) == 0
    lake = TraceLake(aaco_paths.tracelake)
    assert lake.query("SELECT count(*) AS n FROM kernel_events_trace")["n"][0].as_py() == 2_000
    assert list(aaco_paths.scratch.iterdir()) == [] and list(temp.iterdir()) == []


@pytest.mark.timeout(60)
def test_a_gzip_database_that_would_fill_aaco_home_is_refused_naming_its_scratch(
    full_disk, tmp_path, capsys, monkeypatch
):
    """AACO_HOME on a 4 MiB file system: inflating would leave less than the margin."""
    monkeypatch.setenv("AACO_HOME", str(full_disk / "aaco"))
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    paths = AacoPaths.from_env()
    trace = gzipped(rocpd_database(tmp_path / "4242_results.db", kernels=20_000))
    assert main(["ingest", str(trace)]) == 2
    line = one_error_line(capsys)
    assert str(trace) in line and f"free space of {paths.scratch}" in line and "MiB" in line
    assert_nothing_kept(paths)


# --- 6. causes, not tracebacks or wrong leads ---------------------------------------------------


def kernel_csv(folder: Path, **values: str) -> Path:
    """The real rocprofv3 kernel trace, with the given columns set in every row (or, for
    `first_row_*`, in the first row only)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "1_kernel_trace.csv"
    with open(KERNEL_CSV, newline="") as src, open(target, "w", newline="") as dst:
        reader, writer = csv.DictReader(src), None
        for i, row in enumerate(reader):
            writer = writer or csv.DictWriter(dst, reader.fieldnames)
            if i == 0:
                writer.writeheader()
            for name, value in values.items():
                if name.startswith("first_row_"):
                    if i == 0:
                        row[name.removeprefix("first_row_")] = value
                else:
                    row[name] = value
            writer.writerow(row)
    return target


@pytest.mark.timeout(60)
def test_all_zero_timestamps_say_the_trace_has_no_span(aaco_paths, tmp_path, capsys):
    trace = kernel_csv(tmp_path / "zero", Start_Timestamp="0", End_Timestamp="0")
    assert main(["ingest", str(trace)]) == 2
    line = one_error_line(capsys)
    assert str(trace) in line and "span no time" in line and "ZeroDivision" not in line
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "values",
    [
        {"first_row_End_Timestamp": str(2**63 - 1)},  # a span of 2^63 ns
        {"first_row_Start_Timestamp": str(-(2**63) + 1)},  # an end - start past 2^63
    ],
    ids=["end-at-int64-max", "start-at-int64-min"],
)
def test_a_span_overflowing_64_bits_says_the_timestamps_are_corrupt(
    aaco_paths, tmp_path, capsys, values
):
    trace = kernel_csv(tmp_path / "overflow", **values)
    assert main(["ingest", str(trace)]) == 2
    line = one_error_line(capsys)
    assert str(trace) in line and "64-bit nanoseconds" in line and "timestamps" in line
    assert "OverflowError" not in line
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_csv_header_field_over_128_kb_is_one_line(aaco_paths, tmp_path, capsys, given):
    trace = kernel_csv(tmp_path / "wide")
    header, rest = trace.read_text().split("\n", 1)
    trace.write_text(header + ',"' + "x" * (200 << 10) + '"\n' + rest)
    assert main(["ingest", str(trace if given == "file" else trace.parent)]) == 2
    line = one_error_line(capsys)
    assert str(trace) in line and "128 KB" in line
    assert_nothing_kept(aaco_paths)


def not_sqlite(path: Path) -> Path:
    path.write_bytes(b"\x07garbage, not a database" * 500)
    return path


def damaged_sqlite(path: Path) -> Path:
    """SQLite's magic, then a header and pages of junk."""
    path.write_bytes(b"SQLite format 3\0" + b"\xff" * 8192)
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("make", "given", "says"),
    [
        (not_sqlite, "file", "not a SQLite database"),
        (not_sqlite, "folder", "not a SQLite database"),
        (damaged_sqlite, "file", "corrupt SQLite database"),
        (damaged_sqlite, "folder", "corrupt SQLite database"),
    ],
    ids=["renamed-file", "renamed-in-folder", "damaged-file", "damaged-in-folder"],
)
def test_a_corrupt_db_says_it_is_corrupt(aaco_paths, tmp_path, capsys, make, given, says):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "notes.txt").write_text("a note beside the database\n")
    trace = make(folder / "4242_results.db")
    assert main(["ingest", str(trace if given == "file" else folder)]) == 2
    line = one_error_line(capsys)
    assert str(trace) in line and says in line and "no trace found" not in line
    assert_nothing_kept(aaco_paths)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("which", ["home", "sessions", "parent of home"])
def test_aaco_home_is_not_a_trace_folder(aaco_paths, capsys, which):
    assert main(["ingest", str(V1_CSV), "--name", "first"]) == 0
    capsys.readouterr()
    given = {
        "home": aaco_paths.home,
        "sessions": aaco_paths.sessions,
        "parent of home": aaco_paths.home.parent,
    }[which]
    assert main(["ingest", str(given)]) == 2
    line = one_error_line(capsys)
    assert "not a trace" in line and str(aaco_paths.home) in line and "changed" not in line
    sessions = TraceLake(aaco_paths.tracelake).query("SELECT model_slug FROM sessions")
    assert sessions["model_slug"].to_pylist() == ["first"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("when", ["while inserting", "at commit"])
def test_a_full_disk_while_loading_names_the_lakes_folder_not_the_trace(
    full_disk, tmp_path, capsys, monkeypatch, when
):
    """The TraceLake on a small file system that fills while the trace loads: the disk, and
    the variable that moves the lake, are named; the trace is not called corrupt. 300,000
    kernels are written to the lake file during their INSERT (it failed inside the trace
    reader, which blamed the trace); the RPD sample's rows wait for the commit."""
    monkeypatch.setenv("AACO_HOME", str(tmp_path / "aaco"))
    monkeypatch.setenv("AACO_TRACELAKE", str(full_disk / "lake.duckdb"))
    monkeypatch.setenv("AACO_LOCK_TIMEOUT_S", "10")
    trace = RPD_GZ
    if when == "while inserting":
        trace = rocpd_database(tmp_path / "4242_results.db", kernels=300_000)
    assert main(["ingest", str(V1_CSV), "--name", "first"]) == 0
    fill(full_disk)
    capsys.readouterr()
    assert main(["ingest", str(trace), "--name", "second"]) == 2
    line = one_error_line(capsys)
    assert "no space left" in line and str(full_disk) in line and "AACO_TRACELAKE" in line
    assert "corrupt" not in line and "re-collect" not in line
    (full_disk / "filler").unlink()
    paths = AacoPaths.from_env()
    assert not list(paths.sessions.glob("2*/*second*"))
    sessions = TraceLake(paths.tracelake).query("SELECT model_slug FROM sessions")
    assert sessions["model_slug"].to_pylist() == ["first"]

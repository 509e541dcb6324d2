"""The shared TraceLake (DuckLake: a real PostgreSQL catalog and a Parquet data folder) through
the same TraceLake interface: sessions land once each under concurrent writers from several
processes, a writer killed mid-commit leaves none or all of its rows (and no stray files after
the clean-up), a busy lake is waited for as long as AACO_LOCK_TIMEOUT_S, leftover clean-up
reaches it, and analysis gives the verdicts the file backend gives.

Runs in the DuckLake environment (DuckDB 1.5 and its extensions); skipped in the default one."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.session_folders import clean_leftovers
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.stages.pipeline import analyze_session, measure_model
from aaco_pipelines.tracelake import ducklake
from aaco_pipelines.tracelake.locking import TraceLakeBusy
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import REPO, add_model
from tests.services import delayed, postgres_server

pytest.importorskip("duckdb_extension_ducklake", reason="the DuckLake environment (DuckDB 1.5)")

INGEST = """
import sys
from pathlib import Path
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.tracelake.store import TraceLake
from aaco_pipelines.stages.load import load_session
load_session(TraceLake(Path(sys.argv[1])), SessionBundle(Path(sys.argv[2])), complete=True)
"""


@pytest.fixture(scope="module")
def catalog():
    with postgres_server() as url:
        parts = urlsplit(url)
        yield f"dbname={parts.path[1:]} host={parts.hostname} port={parts.port} user={parts.username}"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """Five measured sessions of two models (four of a, enough history for drift verdicts) in a file TraceLake (the reference), and their
    row counts there: {(session_id, table): rows}. (A TraceLake made while a test's shared lake
    is configured would open the shared lake, whatever its path.)"""
    assert ducklake.shared_lake() is None
    home = tmp_path_factory.mktemp("bundles")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "file.duckdb")
    out = []
    for name, seed in (("a", 1), ("b", 2), ("a", 1), ("a", 1), ("a", 1)):
        model = registered_model(add_model(paths, name, models.tiny_mlp(seed=seed)))
        out.append(measure_model(model, paths))
    lake = TraceLake(paths.tracelake)
    counts = {
        (b.session_id, table): _count(lake, table, b.session_id)
        for b in out
        for table in ("iterations", "kernel_events")
    }
    return paths, out, counts


@pytest.fixture
def shared(catalog, tmp_path, monkeypatch, request):
    """A TraceLake on a new catalog database of the test's PostgreSQL; parametrized with a
    latency, the catalog is reached through a proxy that holds every packet that long."""
    import psycopg2

    name = f"lake_{uuid.uuid4().hex[:8]}"
    server = psycopg2.connect(catalog)
    server.autocommit = True
    with server.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    server.close()
    latency = getattr(request, "param", 0.0)
    port = int(re.search(r"port=(\d+)", catalog)[1])
    with delayed(port, latency) if latency else contextlib.nullcontext(port) as port:
        lake_catalog = re.sub(r"port=\d+", f"port={port}", catalog)
        monkeypatch.setenv(
            ducklake.CATALOG_ENV, lake_catalog.replace("dbname=dagster", f"dbname={name}")
        )
        monkeypatch.setenv(ducklake.DATA_ENV, str(tmp_path / "data"))
        yield TraceLake(tmp_path / "unused.duckdb")


def _count(lake: TraceLake, table: str, session_id: str) -> int:
    sql = f"SELECT count(*) AS n FROM {table} WHERE session_id = $sid"
    return lake.query(sql, {"sid": session_id})["n"][0].as_py()


def _sessions(lake: TraceLake) -> dict[str, int]:
    rows = lake.query(
        "SELECT session_id, count(*) AS n FROM session_records GROUP BY 1"
    ).to_pylist()
    return {r["session_id"]: r["n"] for r in rows}


@pytest.mark.parametrize("shared", [0.001], indirect=True, ids=["1ms-catalog"])
def test_eight_concurrent_ingests_land_exactly_once_each(shared, bundles):
    """Across a network (1 ms each way to the catalog), where DuckLake's reported commit races
    appear: 8 writer processes, the same session 4 times among them."""
    _, measured, counts = bundles
    jobs = [b.path for b in measured[:3]] * 2 + [measured[0].path] * 2  # one session 4 times
    env = {**os.environ}
    processes = [
        subprocess.Popen([sys.executable, "-c", INGEST, str(shared.path), str(path)], env=env,
                         cwd=REPO, stderr=subprocess.PIPE, text=True)
        for path in jobs
    ]  # fmt: skip
    for process in processes:
        assert process.wait(timeout=240) == 0, process.stderr.read()
    assert _sessions(shared) == {b.session_id: 1 for b in measured[:3]}
    for (session_id, table), expected in counts.items():
        if session_id not in {b.session_id for b in measured[:3]}:
            continue
        assert _count(shared, table, session_id) == expected > 0, (session_id, table)


def test_a_writer_killed_mid_commit_leaves_none_or_all_of_its_rows(shared, bundles):
    """Writers killed at points across a whole ingest's duration (timed first, on a session
    already in the lake, so its replace is the step killed): every kill leaves the session
    either as it was or replaced whole."""
    _, measured, counts = bundles
    bundle = measured[1]
    expected = counts[(bundle.session_id, "kernel_events")]
    command = [sys.executable, "-c", INGEST, str(shared.path), str(bundle.path)]
    started = time.monotonic()
    subprocess.run(command, cwd=REPO, check=True)
    whole = time.monotonic() - started
    for share in (0.5, 0.7, 0.8, 0.85, 0.9, 0.95):
        process = subprocess.Popen(command, cwd=REPO)
        time.sleep(whole * share)
        process.send_signal(signal.SIGKILL)
        process.wait()
        n = _count(shared, "kernel_events", bundle.session_id)
        assert n == expected, (share, n, expected)  # a replace is atomic: never 0 in between
    # The lock died with the killed writer: the next writer goes through.
    load_session(TraceLake(shared.path), SessionBundle(bundle.path), complete=True)
    assert _sessions(shared) == {bundle.session_id: 1}
    # What the killed writers wrote but never committed is deleted; the lake's own files stay.
    data = Path(os.environ[ducklake.DATA_ENV])
    before = set(data.rglob("*.parquet"))
    removed = {Path(p) for p in shared.delete_orphaned_files()}
    assert removed <= before and not any(p.exists() for p in removed)
    assert shared.delete_orphaned_files() == []
    assert _count(shared, "kernel_events", bundle.session_id) == expected


def test_verdicts_equal_those_of_the_file_backend(shared, bundles, tmp_path, monkeypatch):
    """The same sessions, analysed in the same order in a copy of the file lake and in the
    shared lake: the same bottleneck, envelope utilization and drift verdicts."""
    paths, measured, _ = bundles
    file_paths = dataclasses.replace(paths, tracelake=tmp_path / "file.duckdb")
    shutil.copy(paths.tracelake, file_paths.tracelake)
    with monkeypatch.context() as backend:
        backend.delenv(ducklake.CATALOG_ENV)
        expected = [analyze_session(SessionBundle(b.path), file_paths) for b in measured]
    for bundle in measured:
        load_session(shared, SessionBundle(bundle.path), complete=True)
    got = [analyze_session(SessionBundle(b.path), paths) for b in measured]
    assert set(expected[-1]["verdicts"].values()) - {"insufficient_history"}  # real verdicts
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.pop("verdicts") == theirs.pop("verdicts")
        assert ours == pytest.approx(theirs)


def test_a_writer_waits_for_the_lock_at_most_the_timeout(shared, bundles):
    import psycopg2

    holder = psycopg2.connect(os.environ[ducklake.CATALOG_ENV])
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [ducklake.WRITER_LOCK_KEY])
        started = time.monotonic()
        with pytest.raises(TraceLakeBusy, match="AACO_LOCK_TIMEOUT_S"):
            load_session(
                TraceLake(shared.path, lock_timeout_s=0.5),
                SessionBundle(bundles[1][0].path),
                complete=True,
            )
        assert time.monotonic() - started < 10
    finally:
        holder.close()
    assert _sessions(shared) == {}


def test_leftover_clean_up_deletes_an_unfinished_session_from_the_shared_lake(
    shared, bundles, tmp_path, monkeypatch
):
    """A run killed between load and analysis: its rows in the shared lake go with its bundle."""
    home = tmp_path / "home"
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    source = bundles[1][1].path
    copy = paths.sessions / source.parent.name / source.name
    shutil.copytree(source, copy)
    load_session(shared, SessionBundle(copy), complete=False)
    monkeypatch.setenv("AACO_ORPHAN_GRACE_S", "0")
    found = clean_leftovers(paths)
    assert [(o.session_id, o.kind) for o in found] == [(source.name, "not_analysed")]
    assert _count(shared, "session_records", source.name) == 0
    assert not copy.exists() and any(paths.failed_sessions.rglob(source.name))

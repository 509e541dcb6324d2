"""The shared TraceLake (DuckLake: a real PostgreSQL catalog and a Parquet data folder) through
the same TraceLake interface: sessions land once each under concurrent writers from several
processes, and a writer killed mid-commit leaves none or all of its rows.

Runs in the DuckLake environment (DuckDB 1.5 and its extensions); skipped in the default one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit

import models
import pytest
from conftest import REPO, add_model
from services import postgres_server

from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.pipeline import measure_model
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.tracelake import ducklake
from aaco_pipelines.tracelake.store import TraceLake

pytest.importorskip("duckdb_extension_ducklake", reason="the DuckLake environment (DuckDB 1.5)")

INGEST = """
import sys
from pathlib import Path
from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.tracelake.store import TraceLake
TraceLake(Path(sys.argv[1])).ingest_session(SessionBundle(Path(sys.argv[2])), complete=True)
"""


@pytest.fixture(scope="module")
def catalog():
    with postgres_server() as url:
        parts = urlsplit(url)
        yield f"dbname={parts.path[1:]} host={parts.hostname} port={parts.port} user={parts.username}"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """Three measured sessions of two models, in a file TraceLake (the reference)."""
    home = tmp_path_factory.mktemp("bundles")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "file.duckdb")
    out = []
    for name, seed in (("a", 1), ("b", 2), ("a", 1)):
        model = registered_model(add_model(paths, name, models.tiny_mlp(seed=seed)))
        out.append(measure_model(model, paths))
    return paths, out


@pytest.fixture
def shared(catalog, tmp_path, monkeypatch):
    """A TraceLake on a new catalog database of the test's PostgreSQL."""
    import psycopg2

    name = f"lake_{uuid.uuid4().hex[:8]}"
    server = psycopg2.connect(catalog)
    server.autocommit = True
    with server.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    server.close()
    monkeypatch.setenv(ducklake.CATALOG_ENV, catalog.replace("dbname=dagster", f"dbname={name}"))
    monkeypatch.setenv(ducklake.DATA_ENV, str(tmp_path / "data"))
    return TraceLake(tmp_path / "unused.duckdb")


def _sessions(lake: TraceLake) -> dict[str, int]:
    rows = lake.query(
        "SELECT session_id, count(*) AS n FROM session_records GROUP BY 1"
    ).to_pylist()
    return {r["session_id"]: r["n"] for r in rows}


def test_eight_concurrent_ingests_land_exactly_once_each(shared, bundles):
    _, measured = bundles
    jobs = [b.path for b in measured] * 2 + [measured[0].path] * 2  # the same session 4 times
    env = {**os.environ}
    processes = [
        subprocess.Popen([sys.executable, "-c", INGEST, str(shared.path), str(path)], env=env,
                         cwd=REPO, stderr=subprocess.PIPE, text=True)
        for path in jobs
    ]  # fmt: skip
    for process in processes:
        assert process.wait(timeout=240) == 0, process.stderr.read()
    assert _sessions(shared) == {b.session_id: 1 for b in measured}
    file_lake = TraceLake(bundles[0].tracelake)
    for bundle in measured:
        for table in ("iterations", "kernel_events"):
            sql = f"SELECT count(*) AS n FROM {table} WHERE session_id = $sid"
            ours = shared.query(sql, {"sid": bundle.session_id})["n"][0].as_py()
            theirs = file_lake.query(sql, {"sid": bundle.session_id})["n"][0].as_py()
            assert ours == theirs > 0, (table, ours, theirs)


def test_a_writer_killed_mid_commit_leaves_none_or_all_of_its_rows(shared, bundles):
    _, measured = bundles
    bundle = measured[1]
    expected = (
        TraceLake(bundles[0].tracelake)
        .query(
            "SELECT count(*) AS n FROM kernel_events WHERE session_id = $sid",
            {"sid": bundle.session_id},
        )["n"][0]
        .as_py()
    )
    for delay in (0.3, 0.6, 0.9, 1.2, 1.5):
        process = subprocess.Popen(
            [sys.executable, "-c", INGEST, str(shared.path), str(bundle.path)], cwd=REPO
        )
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        n = shared.query(
            "SELECT count(*) AS n FROM kernel_events WHERE session_id = $sid",
            {"sid": bundle.session_id},
        )["n"][0].as_py()
        assert n in (0, expected), (delay, n, expected)
    # The lock died with the killed writer: the next writer goes through.
    TraceLake(shared.path).ingest_session(SessionBundle(bundle.path), complete=True)
    assert _sessions(shared) == {bundle.session_id: 1}

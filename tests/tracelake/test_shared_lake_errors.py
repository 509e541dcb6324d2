"""A shared TraceLake whose catalog's PostgreSQL is down: every command that opens it ends in one
line naming the catalog's server and the fix ("unreachable", never "no TraceLake"), and the
catalog's password appears in nothing aaco prints or writes.

Runs in the DuckLake environment (DuckDB 1.5 and its extensions); skipped in the default one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from aaco_pipelines.tracelake import ducklake
from tests import models
from tests.helpers import REPO, add_model, home_paths
from tests.services import postgres_server

pytest.importorskip("duckdb_extension_ducklake", reason="the DuckLake environment (DuckDB 1.5)")

SECRET = "S3ntinel-pw-91"
CREATE = """
from aaco_pipelines.tracelake.store import TraceLake
with TraceLake("unused.duckdb").connect(write=True):
    pass
"""
CLEARED = ("AACO_TRACELAKE", "AACO_REGISTRY", "DAGSTER_HOME", "AACO_DAGSTER_POSTGRES_URL",
           "AACO_CELERY_BROKER")  # fmt: skip


@pytest.fixture(scope="module")
def down_lake(tmp_path_factory):
    """A shared lake created on a real catalog (its string carries a password: the server trusts
    every connection), whose PostgreSQL was then stopped; (env for aaco, the catalog's
    host:port, AACO_HOME)."""
    base = tmp_path_factory.mktemp("down_lake")
    with postgres_server() as url:
        server = urlsplit(url)
        catalog = (
            f"dbname={server.path[1:]} host={server.hostname} port={server.port} "
            f"user={server.username} password={SECRET}"
        )
        env = {key: value for key, value in os.environ.items() if key not in CLEARED}
        env |= {
            ducklake.CATALOG_ENV: catalog,
            ducklake.DATA_ENV: str(base / "data"),
            "AACO_HOME": str(base / "home"),
        }
        subprocess.run([sys.executable, "-c", CREATE], env=env, cwd=base, check=True)
    paths = home_paths(base / "home")
    add_model(paths, "tiny", models.tiny_mlp())
    return env, f"{server.hostname}:{server.port}", base


def aaco(env: dict, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "aaco_pipelines.cli", *args]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)


def the_error(result: subprocess.CompletedProcess, server: str) -> str:
    """The command's one error line: exit 2, no traceback, naming the server and the fix."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("aaco: error:")]
    assert len(errors) == 1, result.stderr
    assert server in errors[0] and "unreachable" in errors[0] and "Fix:" in errors[0]
    assert "no TraceLake" not in errors[0] and ducklake.CATALOG_ENV in errors[0]
    return errors[0]


def no_secret_anywhere(result: subprocess.CompletedProcess, *folders: Path) -> None:
    assert SECRET not in result.stdout + result.stderr
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    "command", [["diff"], ["report", "--format", "md", "--output", "{out}"]], ids=["diff", "report"]
)
def test_a_reader_says_the_lake_is_unreachable(down_lake, command, tmp_path):
    env, server, base = down_lake
    result = aaco(env, *(arg.format(out=tmp_path / "report.md") for arg in command))
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    the_error(result, server)
    no_secret_anywhere(result, base, tmp_path)


def test_doctor_reports_the_unreachable_catalog_in_one_row(down_lake):
    env, server, base = down_lake
    result = aaco(env, "doctor")
    assert result.returncode == 0, result.stderr  # a doctor reports
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("TraceLake")]
    assert "problem" in row and server in row and "unreachable" in row and "start PostgreSQL" in row
    no_secret_anywhere(result, base)


def test_run_ends_in_one_line_and_keeps_no_password(down_lake):
    env, server, base = down_lake
    result = aaco(env, "run", "--model", "tiny")
    the_error(result, server)  # before measuring: the series' owner is read from the lake first
    no_secret_anywhere(result, base)


def test_a_catalog_that_never_answers_is_given_up_on_after_the_connect_timeout(down_lake):
    """A host that takes the connection and says nothing (down behind a firewall, a hung
    server): libpq alone would wait for ever; the command ends in one line after 10 s."""
    env, _, base = down_lake
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        catalog = f"dbname=lake host=127.0.0.1 port={port} user=aaco password={SECRET}"
        started = time.monotonic()
        result = aaco({**env, ducklake.CATALOG_ENV: catalog}, "diff")
        took = time.monotonic() - started
    line = the_error(result, f"127.0.0.1:{port}")
    assert "timeout expired" in line, line
    assert ducklake.CONNECT_TIMEOUT_S <= took < ducklake.CONNECT_TIMEOUT_S + 30, took
    no_secret_anywhere(result, base)

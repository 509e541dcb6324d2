"""The Dagster instance's PostgreSQL refusing aaco or out of reach (a wrong password, a server
down, a missing database): `aaco sweep`, `aaco worker`, `aaco ui` end in one line naming
AACO_DAGSTER_POSTGRES_URL's server and the fix, not minutes of retries and a traceback, and the
password appears in nothing aaco prints or writes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV
from tests import models
from tests.helpers import REPO, add_model, home_paths
from tests.services import away, free_port, postgres_server

SECRET = "S3ntinel-pw-91"  # a wrong password
RIGHT = "R1ght-pw-17"  # the server's


@pytest.fixture(scope="module")
def server():
    """A server that wants a password over TCP; its URL without the password."""
    with postgres_server(password=RIGHT) as url:
        yield url.replace(f":{RIGHT}@", "@")


@pytest.fixture
def home(tmp_path) -> Path:
    """An AACO_HOME with one model (so `aaco ui` builds no zoo)."""
    paths = home_paths(tmp_path / "aaco")
    add_model(paths, "tiny", models.tiny_mlp())
    return paths.home


def aaco(home: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AACO_", "DAGSTER_"))}
    env |= {"AACO_HOME": str(home), POSTGRES_ENV: url}
    if args[0] == "worker":
        env[BROKER_ENV] = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    command = [sys.executable, "-m", "aaco_pipelines.cli", *args]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)


def one_line(result: subprocess.CompletedProcess, home: Path, *words: str) -> None:
    """Exit 2, one stderr line naming the variable and what it asks for; no password anywhere."""
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("aaco: error:") and POSTGRES_ENV in line and "Fix:" in line
    assert all(word in line for word in words), line
    for secret in (SECRET, RIGHT):
        assert secret not in result.stdout + result.stderr
        for path in home.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    "command", [["sweep"], ["worker", "--target", "gpu0"], ["ui", "--port", "1"]]
)
def test_a_wrong_password_is_one_line_with_the_fix(server, home, command):
    url = server.replace("://aaco@", f"://aaco:{SECRET}@")
    host_port = url.split("@")[1].split("/")[0]
    result = aaco(home, url, *command)
    one_line(result, home, host_port, "refused the password", "PGPASSWORD or ~/.pgpass")


def test_a_server_down_is_one_line(home):
    url = f"postgresql://aaco:{SECRET}@127.0.0.1:{free_port()}/dagster"
    one_line(aaco(home, url, "sweep"), home, "unreachable", "start PostgreSQL there")


def test_a_missing_database_is_one_line(server, home):
    url = server.replace("://aaco@", f"://aaco:{RIGHT}@").replace("/dagster", "/nothing_here")
    one_line(aaco(home, url, "sweep"), home, "has no database nothing_here", "createdb")


def test_doctor_reports_a_wrong_password_in_the_instance_row(server, home):
    url = server.replace("://aaco@", f"://aaco:{SECRET}@")
    result = aaco(home, url, "doctor")
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("Dagster instance")]
    assert "problem" in row and "refused the password" in row
    assert SECRET not in result.stdout + result.stderr


def test_a_waiting_sweep_whose_database_stays_away_gives_up_in_one_line(home):
    """A routed sweep waits for its runs (no daemon here: they stay queued); its database
    stops and stays away past the patience (AACO_SERVICE_PATIENCE_S, 3 s here): one line
    naming the server, exit 2, and the password nowhere."""
    with postgres_server(password=RIGHT) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AACO_", "DAGSTER_"))}
        env |= {"AACO_HOME": str(home), POSTGRES_ENV: url, "AACO_SERVICE_PATIENCE_S": "3",
                BROKER_ENV: f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"}  # fmt: skip
        register = "from aaco_pipelines.instance import *; import pathlib; h = pathlib.Path("
        register += f"'{home}/dagster'); prepare_dagster_home(h); register_target(h, 'gpu0')"
        subprocess.run([sys.executable, "-c", register], env=env, cwd=REPO, check=True)
        log = home / "sweep.err"
        with open(log, "w") as err:
            sweep = subprocess.Popen([sys.executable, "-m", "aaco_pipelines.cli", "sweep"],
                                     env=env, cwd=REPO, stderr=err, text=True)  # fmt: skip
            try:
                deadline = time.monotonic() + 120
                while "submitted 1 runs" not in log.read_text():
                    assert sweep.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.2)
                with away(url):
                    sweep.wait(timeout=120)
            finally:
                if sweep.poll() is None:
                    sweep.kill()
                    sweep.wait()
    printed = log.read_text()
    log.unlink()
    assert sweep.returncode == 2, printed
    (line,) = [line for line in printed.splitlines() if line.startswith("aaco: error:")]
    assert line == printed.strip().splitlines()[-1] and "stopped waiting for sweep" in line
    assert "the Dagster instance's database" in line and "for over 3 s" in line, line
    assert "its runs go on in the instance" in line and "Traceback" not in printed
    for secret in (SECRET, RIGHT):
        assert secret not in printed

"""Bisection across runtime environments: one model version measured side by side under two
ONNX Runtimes at a time, each in a runtime process under its own environment's interpreter.

Two kinds of environment are made here. A real other ONNX Runtime (1.20.1 from PyPI, in an
environment of its own with nothing else but this environment's numpy linked in): the runtime
processes really run two runtimes, and the runtime process needs nothing of this project's
dependencies. And environments that share this one's ONNX Runtime, where from the third on
`InferenceSession.run` does its work twice (a runtime that got 2x slower, as a regression in a
release would): the search must pin the third.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import duckdb
import numpy
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError, MeasuringFailure
from aaco_pipelines.execution.across_runtimes import measure_across_runtimes
from aaco_pipelines.execution.environment import capture_environment
from aaco_pipelines.execution.runtime_envs import find_runtime
from aaco_pipelines.governance.alerts.lifecycle import alert_history, list_alerts
from aaco_pipelines.governance.gate.paired import session_request
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.bisect import bisection_line
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import (
    FAST_SIDECAR,
    STEADY_SIDECAR,
    add_model,
    run_bisect_job,
    stamp_schema_version,
)

OLDER_ORT = "1.20.1"  # a release with wheels for this Python that reads numpy 2
SLOWER = """
import onnxruntime

_run = onnxruntime.InferenceSession.run


def _twice(self, *args, **kwargs):
    _run(self, *args, **kwargs)
    return _run(self, *args, **kwargs)


onnxruntime.InferenceSession.run = _twice
"""


def _venv(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    [packages] = (folder / "lib").glob("python*/site-packages")
    return packages


def _sharing_this_runtime(folder: Path, slower: bool) -> Path:
    """An environment that imports this environment's ONNX Runtime; `slower`: its sessions
    run every inference twice."""
    packages = _venv(folder)
    (packages / "aaco_host.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    if slower:  # after aaco_host.pth: .pth files are read in name order
        (packages / "aaco_slower.py").write_text(SLOWER)
        (packages / "aaco_slower.pth").write_text("import aaco_slower\n")
    return folder


@pytest.fixture(scope="module")
def environments(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("runtimes")
    return [str(_sharing_this_runtime(root / f"env{i}", slower=i >= 2)) for i in range(4)]


@pytest.fixture(scope="module")
def older_runtime(tmp_path_factory) -> str:
    """An environment with ONNX Runtime OLDER_ORT from PyPI and this environment's numpy (its
    package linked in), and nothing else."""
    folder = tmp_path_factory.mktemp("older") / "ort-old"
    packages = _venv(folder)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(packages),
         f"onnxruntime=={OLDER_ORT}"],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        message = f"could not install onnxruntime=={OLDER_ORT} from PyPI: {done.stderr[-500:]}"
        if os.environ.get("AACO_OTHER_RUNTIME_REQUIRED"):
            pytest.fail(message)
        pytest.skip(message)
    ours = Path(numpy.__file__).parent
    for linked in (ours, ours.with_name("numpy.libs")):  # the wheel's bundled libraries too
        if linked.is_dir():
            (packages / linked.name).symlink_to(linked)
    return str(folder)


def _measure(paths, model, sidecar=FAST_SIDECAR, analyze=False) -> str:
    path = add_model(paths, "mlp", model, sidecar)
    return measure_model(registered_model(path), paths, analyze=analyze).session_id


def test_two_real_onnx_runtimes_run_side_by_side_each_in_its_own_environment(
    aaco_paths, older_runtime
):
    session = _measure(aaco_paths, models.tiny_mlp())
    older, current = find_runtime(older_runtime), find_runtime(sys.executable)
    assert older.onnxruntime_version == OLDER_ORT
    assert current.onnxruntime_version == version("onnxruntime") != OLDER_ORT
    host = capture_environment()
    assert older.fingerprint(host) != current.fingerprint(host)
    # the session was measured here: the current runtime's fingerprint is the session's
    stored = TraceLake(aaco_paths.tracelake).query(
        "SELECT runtime_fingerprint FROM sessions WHERE session_id = ?", [session]
    )
    assert stored["runtime_fingerprint"].to_pylist() == [current.fingerprint(host)]

    # each runtime process reports the runtime it imported (a mismatch with the probe fails the
    # measurement); the older environment holds no package of this project's but numpy
    measured = measure_across_runtimes(session_request(aaco_paths, session), older, current, 4)
    assert measured.order == "AB BA AB BA"
    assert len(measured.a) == len(measured.b) == 4
    assert {len(block) for block in measured.a + measured.b} == {measured.block_iterations}
    assert all((block > 0).all() for block in measured.a + measured.b)


def test_the_first_slower_runtime_is_pinned_and_attached_to_the_alert(
    aaco_paths, environments, capsys
):
    paths = aaco_paths
    for _ in range(3):
        _measure(paths, models.tiny_mlp(), STEADY_SIDECAR)
    slow = _measure(paths, models.slower_mlp(200), STEADY_SIDECAR, analyze=True)
    lake = TraceLake(paths.tracelake)
    [alert] = [a for a in list_alerts(lake) if a["metric"] == "latency_p50_ns"]
    assert alert["first_session_id"] == slow

    # from the alert, in Dagster: the alert's model version measured under four runtimes
    config = {"alert_id": alert["alert_id"], "runtimes": environments, "rounds": 6}
    found = run_bisect_job(paths, config)
    assert (found["dimension"], found["status"], found["bad_session"]) == (
        "runtime",
        "pinned",
        slow,
    )
    assert environments[2] in found["first_bad_runtime"]
    assert environments[1] in found["last_good_runtime"]
    assert found["versions"] == 4 and found["steps"] <= 2
    # every inference twice: about +100 % (+108 % [+97, +181] and +98 % [+46, +109] seen), a
    # regression confirmed by two measuring processes
    assert 60 < found["change_pct"] < 150 and found["change_ci_low"] > 3
    assert found["first_bad_sha256"] is None and found["good_session"] is None  # one runtime so far
    assert found["first_bad_session"] is None  # no session tells env2 from env1 (one fingerprint)
    result = json.loads(found["result_json"])
    pythons = [r["python"] for r in result["runtimes"]]
    assert all(p.startswith(e) for p, e in zip(pythons, environments, strict=True))
    assert result["model_sha256"] == session_request(paths, slow)["model_sha256"]
    [event] = [e for e in alert_history(lake, alert["alert_id"]) if e["event"] == "bisected"]
    assert "first slower runtime" in event["reason"] and environments[2] in event["reason"]

    # from the command line, the two ends alone: the whole change, no midpoint
    argv = ["bisect", "--bad", slow, "--runtime", environments[0], "--runtime", environments[3],
            "--rounds", "6", "--json"]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["status"], row["versions"], row["steps"]) == ("pinned", 2, 0)
    assert environments[3] in row["first_bad_runtime"]
    assert "2 runtimes in 0 steps" in bisection_line(row)
    assert lake.query("SELECT count(*) AS n FROM bisections")["n"].to_pylist() == [2]


def test_an_environment_that_cannot_measure_is_refused_naming_it(aaco_paths, tmp_path, capsys):
    session = _measure(aaco_paths, models.tiny_mlp())
    bare = tmp_path / "bare"
    _venv(bare)  # no ONNX Runtime in it
    with pytest.raises(AacoInputError, match="cannot import ONNX Runtime") as raised:
        find_runtime(bare)
    assert "pip install onnxruntime" in raised.value.fix and str(bare) in str(raised.value.path)
    with pytest.raises(AacoInputError, match="no Python interpreter"):
        find_runtime(tmp_path / "nowhere")
    current = find_runtime(sys.executable)
    request = session_request(aaco_paths, session)
    with pytest.raises(MeasuringFailure, match="ran past its 0 s"):  # killed, and says why
        measure_across_runtimes(request, current, current, rounds=2, timeout_s=0.01)
    assert main(["bisect", "--bad", session, "--runtime", sys.executable]) == 2
    assert "two or more different environments" in capsys.readouterr().err
    assert main(["bisect", "--good", session, "--runtime", sys.executable]) == 2
    assert "--good needs --bad" in capsys.readouterr().err
    lake = TraceLake(aaco_paths.tracelake)
    assert lake.query("SELECT count(*) AS n FROM bisections")["n"].to_pylist() == [0]


def test_a_v20_lake_gains_the_bisections_runtime_columns(aaco_paths):
    lake = TraceLake(aaco_paths.tracelake)
    with lake.transaction() as con:
        con.execute(
            "INSERT INTO bisections (bisection_id, status, versions, steps, last_good_sha256, "
            "first_bad_sha256, change_pct, change_ci_low, change_ci_high) "
            "VALUES ('b1', 'pinned', 8, 3, 'aaa', 'bbb', 90, 80, 100)"
        )
    with duckdb.connect(str(aaco_paths.tracelake)) as con:  # back to v20's shape
        for column in ("dimension", "last_good_runtime", "first_bad_runtime"):
            con.execute(f"ALTER TABLE bisections DROP COLUMN {column}")
        stamp_schema_version(con, 20)
    with lake.transaction():  # a write migrates
        pass
    assert lake.schema_version() == SCHEMA_VERSION >= 21
    [row] = lake.query("SELECT * FROM bisections").to_pylist()
    assert row["dimension"] is None and row["first_bad_runtime"] is None
    row["first_bad_session"] = None
    assert bisection_line(row).startswith("first slower version bbb")  # a v20 row: a version's

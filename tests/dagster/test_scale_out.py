"""Runs routed to their device's worker across hosts: the instance on PostgreSQL, dagster-celery's
run launcher on redis, the Dagster daemon's run queue, and one `aaco worker --target` per device,
all real processes. `aaco sweep` submits; two devices run two models at once; a second run for a
busy device waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest
import yaml

from aaco_pipelines.analysis.envelope import measure_envelope
from aaco_pipelines.analysis.envelope_choice import save_envelope
from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV, prepare_dagster_home
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import REPO, add_model
from tests.services import postgres_server, redis_server

BIN = Path(sys.executable).parent


@pytest.fixture
def cluster(aaco_paths, monkeypatch, tmp_path):
    """Head node (daemon) and two device workers, sharing PostgreSQL and redis."""
    with postgres_server() as postgres, redis_server() as broker:
        monkeypatch.setenv(POSTGRES_ENV, postgres)
        monkeypatch.setenv(BROKER_ENV, broker)
        monkeypatch.setenv("DAGSTER_HOME", str(aaco_paths.dagster_home))
        home = prepare_dagster_home(aaco_paths.dagster_home)
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        logs, processes = [], []

        def start(name: str, command: list[str], **extra: str) -> None:
            log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed below
            logs.append(log)
            processes.append(
                subprocess.Popen(command, cwd=REPO, env={**env, **extra}, stdout=log, stderr=log)
            )

        # The daemon's registry sensor watches an empty folder: it would queue runs of its own
        # for the models this test adds.
        unwatched = tmp_path / "unwatched"
        unwatched.mkdir()
        try:
            start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                  AACO_REGISTRY=str(unwatched))  # fmt: skip
            for device in ("gpu0", "gpu1"):
                start(f"worker-{device}", [str(BIN / "aaco"), "worker", "--target", device])
            yield home, env
        finally:
            killed = []
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    killed.append(process.args)
            for log in logs:
                log.close()
        assert not killed, f"SIGTERM did not stop {killed}"


def _sweep(env: dict, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "aaco"), "sweep", *options], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _wait_for_workers(home: Path, devices: set[str]) -> None:
    """Each worker registers its device as a target when it starts."""
    deadline = time.monotonic() + 60
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while set(instance.get_dynamic_partitions("targets")) != devices:
            assert time.monotonic() < deadline, instance.get_dynamic_partitions("targets")
            time.sleep(0.5)


def test_a_sweep_runs_each_device_in_parallel_and_one_run_at_a_time_per_device(aaco_paths, cluster):
    """`aaco sweep` submits every model on every registered device as one backfill; the
    launcher routes each run by its partition's target (no tag of ours), gpu0's and gpu1's
    workers run at once, and a device's second run waits for its first."""
    home, env = cluster
    for name, seed in (("a", 1), ("b", 2)):
        add_model(aaco_paths, name, models.tiny_mlp(seed=seed))
    # This host's envelope, measured once by the suite, stands for both devices': each worker
    # would otherwise spend 10 s measuring this same CPU again under its device's name.
    lake = TraceLake(aaco_paths.tracelake)
    for device in ("gpu0", "gpu1"):
        save_envelope(lake, replace(measure_envelope("cpu"), target=device))
    assert yaml.safe_load((home / "dagster.yaml").read_text())["run_launcher"]["class"] == (
        "DeviceQueueRunLauncher"
    )
    _wait_for_workers(home, {"gpu0", "gpu1"})

    refused = _sweep(env, "--targets", "gpu7")
    assert refused.returncode == 2 and "gpu7" in refused.stderr and "aaco worker" in refused.stderr

    done = _sweep(env)  # every registered target
    assert done.returncode == 0, done.stdout + done.stderr
    lines = sorted(tuple(line.split()[:2]) for line in done.stdout.splitlines() if line[:2] == "  ")
    assert lines == [("ok", f"{m}|{d}") for m in ("a", "b") for d in ("gpu0", "gpu1")]
    assert done.stdout.splitlines()[-1] == "4 runs: 0 failed, 0 regressed"

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = {r.dagster_run.tags["dagster/partition"]: r for r in instance.get_run_records()}
    assert {r.dagster_run.tags["dagster-celery/queue"] for r in runs.values()} == {"gpu0", "gpu1"}
    for device in ("gpu0", "gpu1"):  # one at a time on a device (which first is the queue's)
        first, second = sorted((runs[f"{m}|{device}"] for m in "ab"), key=lambda r: r.start_time)
        assert second.start_time >= first.end_time, f"two runs on {device} overlapped"
    gpu0, gpu1 = ([runs[f"{m}|{d}"] for m in "ab"] for d in ("gpu0", "gpu1"))
    assert any(x.start_time < y.end_time and y.start_time < x.end_time for x in gpu0 for y in gpu1)
    # Each run was measured by its device's worker, as that device.
    sessions = lake.query("SELECT model_slug, target FROM sessions ORDER BY 1, 2").to_pylist()
    assert [(r["model_slug"], r["target"]) for r in sessions] == [
        (m, d) for m in ("a", "b") for d in ("gpu0", "gpu1")
    ]

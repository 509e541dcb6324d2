"""Runs routed to their device's worker across hosts: the instance on PostgreSQL, dagster-celery's
run launcher on redis, the Dagster daemon's run queue, and one `aaco worker --target` per device,
all real processes. Two devices run two models at once; a second run for a busy device waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import dagster as dg
import models
import pytest
import yaml
from conftest import REPO, add_model
from services import postgres_server, redis_server

from aaco_pipelines.analysis import session
from aaco_pipelines.analysis.session import save_envelope
from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV, prepare_dagster_home
from aaco_pipelines.tracelake.store import TraceLake

BIN = Path(sys.executable).parent
RUNS = (("a", "gpu0"), ("b", "gpu1"), ("c", "gpu0"))  # a and c share a device
TRIGGER = "scale_out_test"


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

        # The registry sensor would queue its own runs for the models this test adds.
        stop = [str(BIN / "dagster"), "sensor", "stop", "-w", "workspace.yaml"]
        subprocess.run([*stop, "model_registry_sensor"], cwd=REPO, env=env, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        try:
            start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"])
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


def _launch(env: dict, model: str, device: str) -> None:
    """`dagster job launch` into the instance's run queue, with only the tags the UI's
    Materialize of partition `model|device` gives a run: the launcher routes it by its target."""
    tags = {
        "aaco/trigger": TRIGGER,
        "dagster/partition": f"{model}|{device}",
        "dagster/partition/model": model,
        "dagster/partition/target": device,
    }
    command = [str(BIN / "dagster"), "job", "launch", "-w", "workspace.yaml", "-j",
               "measure_model", "--tags", json.dumps(tags)]  # fmt: skip
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, timeout=120)


def test_two_devices_run_in_parallel_and_a_busy_devices_run_waits(aaco_paths, cluster):
    home, env = cluster
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        add_model(aaco_paths, name, models.tiny_mlp(seed=seed))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("models", ["a", "b", "c"])
        deadline = time.monotonic() + 60  # each worker registers its device as a target
        while set(instance.get_dynamic_partitions("targets")) != {"gpu0", "gpu1"}:
            assert time.monotonic() < deadline, instance.get_dynamic_partitions("targets")
            time.sleep(0.5)
    assert yaml.safe_load((home / "dagster.yaml").read_text())["run_launcher"]["class"] == (
        "DeviceQueueRunLauncher"
    )
    # This host's envelope, measured once by the suite, stands for both devices': each worker
    # would otherwise spend 10 s measuring this same CPU again under its device's name.
    lake = TraceLake(aaco_paths.tracelake)
    for device in ("gpu0", "gpu1"):
        save_envelope(lake, replace(session.measure_envelope("cpu"), target=device))
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda run: _launch(env, *run), RUNS))

    deadline = time.monotonic() + 240
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while True:
            records = [
                r
                for r in instance.get_run_records()
                if r.dagster_run.tags.get("aaco/trigger") == TRIGGER
            ]
            done = [r for r in records if r.dagster_run.is_finished]
            if len(done) == len(RUNS) or time.monotonic() > deadline:
                break
            time.sleep(1)
        by_model = {r.dagster_run.tags["dagster/partition/model"]: r for r in records}
        failures = {
            m: [
                str(e.dagster_event.event_specific_data)[:3000]
                for e in instance.all_logs(r.dagster_run.run_id)
                if e.dagster_event and e.dagster_event.is_failure
            ]
            for m, r in by_model.items()
            if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS
        }
    assert {m: r.dagster_run.status for m, r in by_model.items()} == {
        m: dg.DagsterRunStatus.SUCCESS for m, _ in RUNS
    }, failures
    # gpu0's two runs one after the other (which first is the run queue's choice); gpu1's run
    # beside one of them.
    first, second = sorted((by_model["a"], by_model["c"]), key=lambda r: r.start_time)
    assert second.start_time >= first.end_time, "two runs on gpu0 overlapped"
    b = by_model["b"]
    assert any(b.start_time < r.end_time and r.start_time < b.end_time for r in (first, second))
    # Each run was measured by its device's worker, as that device.
    sessions = lake.query("SELECT model_slug, target FROM sessions")
    assert dict(zip(*(sessions[k].to_pylist() for k in ("model_slug", "target")), strict=True)) == {
        "a": "gpu0",
        "b": "gpu1",
        "c": "gpu0",
    }

"""The scaled-out cluster of the scale-out tests (test_scale_out.py, test_scale_out_outage.py):
the head's daemon and two device workers as real processes on a real PostgreSQL and redis, with
the helpers both files use. Two files, so that `make test`'s two processes run their minute-long
tests side by side; the `cluster` fixture is in tests/dagster/conftest.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import dagster as dg

from aaco_pipelines.analysis.envelope.choice import save_envelope
from aaco_pipelines.analysis.envelope.measure import measure_envelope
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import REPO, add_model

BIN = Path(sys.executable).parent
# The test's instance looks at its runs every 2 s and frees a finished run's slots after 1 s;
# the dagster.yaml AACO writes says 15 s and 10 s (instance/dagster.yaml).
FAST_MONITORING = {"poll_interval_seconds": 2, "free_slots_after_run_end_seconds": 1}
WRITER_POOL = "aaco_duckdb_writer"


@dataclass
class Cluster:
    """The head (daemon) and the device workers, as processes the test can kill and restart."""

    home: Path
    env: dict
    logs_dir: Path
    postgres: str  # the instance's URL
    broker: str  # redis's URL
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: list = field(default_factory=list)

    def start(self, name: str, command: list[str], **extra: str) -> None:
        log = open(self.logs_dir / f"{name}.log", "a")  # noqa: SIM115 - closed by stop_all
        self.logs.append(log)
        self.processes[name] = subprocess.Popen(
            command, cwd=REPO, env={**self.env, **extra}, stdout=log, stderr=log,
            start_new_session=True,  # its own process group, as under systemd
        )  # fmt: skip

    def start_worker(self, device: str) -> None:
        self.start(f"worker-{device}", [str(BIN / "aaco"), "worker", "--target", device])

    def kill_worker(self, device: str) -> None:
        """`kill -9` of the worker's whole process group (celery, its heartbeat, its run)."""
        process = self.processes.pop(f"worker-{device}")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> list:
        """SIGTERM to every process still here; those that ignored it."""
        killed = []
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                killed.append(process.args)
        for log in self.logs:
            log.close()
        return killed


def sweep_of(env: dict, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "aaco"), "sweep", *options], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def two_models_two_devices(aaco_paths, names: tuple[str, ...] = ("a", "b")) -> TraceLake:
    """Models a and b; gpu0's and gpu1's envelope: this host's, measured once by the suite (each
    worker would otherwise spend 10 s measuring this same CPU again under its device's name)."""
    for seed, name in enumerate(names, start=1):
        add_model(aaco_paths, name, models.tiny_mlp(seed=seed))
    lake = TraceLake(aaco_paths.tracelake)
    for device in ("gpu0", "gpu1"):
        save_envelope(lake, replace(measure_envelope("cpu"), target=device))
    return lake


def wait_for_workers(home: Path, devices: set[str]) -> None:
    """Each worker registers its device as a target when it starts."""
    deadline = time.monotonic() + 60
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while set(instance.get_dynamic_partitions("targets")) != devices:
            assert time.monotonic() < deadline, instance.get_dynamic_partitions("targets")
            time.sleep(0.5)


def any_run_in(instance, status: dg.DagsterRunStatus) -> bool:
    return bool(instance.get_runs(filters=dg.RunsFilter(statuses=[status])))


def poll(look, timeout_s: float, what: str):
    """`look()` until it gives something, within a deadline: no sleep that assumes a quiet
    machine."""
    deadline = time.monotonic() + timeout_s
    while not (found := look()):
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.1)
    return found

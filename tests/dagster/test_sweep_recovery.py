"""A killed `aaco sweep` does not wedge the next one (issue 25), with real processes and signals.

A sweep killed with SIGKILL mid-run leaves its run STARTED, holding the device pool's one slot.
The next sweep fails that run (saying why), frees its slots and measures; while a live sweep
holds the slot, a second one says what it waits for and stops on SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from aaco_pipelines.config import AacoPaths, device_pool
from aaco_pipelines.instance import prepare_dagster_home
from aaco_pipelines.registry.sidecar import ModelSidecar
from aaco_pipelines.sensors.sweep_owner import STARTED_TAG, owner_alive, owner_tags
from tests import models
from tests.helpers import add_model

POOL = device_pool("cpu")
# Runs for minutes unless stopped: a 1024² MatMul chain, 100k measured iterations.
ENDLESS = ModelSidecar(warmup_iterations=1, measured_iterations=100_000, profiled_iterations=2)
DEADLINE_S = 120  # generous: the host may be busy; every wait polls for its state


class Sweep:
    """`aaco sweep` in its own session (a signal reaches it, not pytest), its stderr read by a
    thread so that a silent sweep never blocks the test."""

    def __init__(self, paths: AacoPaths, dagster_home: Path, *args: str):
        env = {**os.environ, "AACO_HOME": str(paths.home), "DAGSTER_HOME": str(dagster_home)}
        env |= {"AACO_TARGET": "cpu", "PYTHONUNBUFFERED": "1"}
        for name in ("AACO_DAGSTER_POSTGRES_URL", "AACO_CELERY_BROKER", "AACO_REGISTRY"):
            env.pop(name, None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "aaco_pipelines.cli", "sweep", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)

    def wait_for_line(self, pattern: str, timeout_s: float = DEADLINE_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [line for line in self.lines if re.search(pattern, line)]
            if found:
                return found[0]
            if self.process.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"no line matching {pattern!r}; stderr: {self.stderr[-3000:]}")

    def finish(self, timeout_s: float = DEADLINE_S) -> int:
        code = self.process.wait(timeout_s)
        self.reader.join(10)
        return code

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        """The sweep's whole process group (its measuring process too, should one be left)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(30)


def _poll(condition, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _slot_holder(instance: dg.DagsterInstance) -> str | None:
    claimed = instance.event_log_storage.get_concurrency_info(POOL).claimed_slots
    return claimed[0].run_id if claimed else None


def _held_slots(instance: dg.DagsterInstance) -> dict[str, list]:
    storage = instance.event_log_storage
    infos = storage.get_concurrency_infos(sorted(storage.get_concurrency_keys()))
    return {
        pool: [*info.claimed_slots, *info.pending_steps]
        for pool, info in infos.items()
        if info.claimed_slots or info.pending_steps
    }


def _failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    failures = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return failures[-1].dagster_event.message if failures else ""


@pytest.mark.timeout(420)
def test_a_sweep_after_a_killed_one_fails_its_run_frees_the_slot_and_measures(aaco_paths):
    add_model(aaco_paths, "endless", models.slow_model(), ENDLESS)
    add_model(aaco_paths, "mlp", models.tiny_mlp())
    home = prepare_dagster_home(aaco_paths.home / "dagster")
    with dg.DagsterInstance.from_config(str(home)) as instance:  # its storage made before both
        killed, waiting = Sweep(aaco_paths, home, "--models", "endless"), None
        try:
            run_id = _poll(lambda: _slot_holder(instance), f"the first sweep to hold {POOL}")

            # A live holder: the next sweep says what it waits for, and SIGTERM stops it.
            waiting = Sweep(aaco_paths, home, "--models", "mlp")
            line = waiting.wait_for_line(rf"waiting for pool {POOL}")
            assert f"held by run {run_id[:8]} of endless|cpu (sweep pid {killed.process.pid})" in (
                line
            ), line
            os.kill(waiting.process.pid, signal.SIGTERM)
            assert waiting.finish(60) == 128 + signal.SIGTERM, waiting.stderr[-3000:]
            assert "Traceback" not in waiting.stderr, waiting.stderr[-3000:]
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
            assert _slot_holder(instance) == run_id  # a live sweep's run is left alone

            os.kill(killed.process.pid, signal.SIGKILL)  # mid-run: its run stays STARTED
            killed.process.wait(30)
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
        finally:
            killed.kill()  # its measuring process too, should the lifeline not have taken it
            if waiting is not None:
                waiting.kill()

        started = time.monotonic()
        after = Sweep(aaco_paths, home, "--models", "mlp")
        try:
            assert after.finish() == 0, after.stderr[-3000:]
        finally:
            after.kill()
        took = time.monotonic() - started
        pid = killed.process.pid
        assert re.search(
            rf"run {run_id[:8]} \(endless\|cpu\) marked failed: aaco sweep process {pid} on host "
            r"\S+ is gone \(killed\?\)",
            after.stderr,
        ), after.stderr[-3000:]
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        assert f"aaco sweep process {pid} on host" in _failure_message(instance, run_id)
        (measured,) = instance.get_runs(
            filters=dg.RunsFilter(tags={"dagster/partition": "mlp|cpu"})
        )
        assert measured.status == dg.DagsterRunStatus.SUCCESS
        assert _held_slots(instance) == {}
        print(f"the sweep after a killed one measured in {took:.1f} s")


def test_an_owner_is_alive_only_while_its_own_process_runs():
    assert owner_alive(owner_tags())
    restarted = owner_tags() | {STARTED_TAG: f"{psutil.Process().create_time() - 60:.2f}"}
    assert not owner_alive(restarted)  # the same pid, another process: a reused pid
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    _poll(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, "the child to end")
    tags = owner_tags() | {"aaco/pid": str(child.pid)}
    tags[STARTED_TAG] = f"{psutil.Process(child.pid).create_time():.2f}"
    assert not owner_alive(tags)  # killed, not yet reaped
    child.wait()
    assert not owner_alive(tags)

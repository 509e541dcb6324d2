"""Runs routed to their device's worker across hosts: the instance on PostgreSQL, dagster-celery's
run launcher on redis, the Dagster daemon's run queue, and one `aaco worker --target` per device,
all real processes. `aaco sweep` submits; two devices run two models at once; a second run for a
busy device waits. A device worker killed mid-run: its run is failed, its pool slots freed, the
other device goes on, and the run is retried on the restarted worker. (A broker and a database
that restart mid-sweep: test_scale_out_outage.py; the cluster: scale_out_cluster.py.)"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import dagster as dg
import yaml
from dagster._core.instance.config import dagster_instance_config

from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV, _write_config
from tests.dagster.scale_out_cluster import (
    BIN,
    WRITER_POOL,
    poll,
    sweep_of,
    two_models_two_devices,
    wait_for_workers,
)
from tests.helpers import REPO


def test_a_killed_worker_s_run_is_failed_freed_and_retried_on_its_restarted_worker(
    aaco_paths, cluster
):
    """`kill -9` of gpu0's worker while its run holds, or waits for, the writer pool's one slot
    that every device shares: run monitoring finds the worker silent and fails the run, its
    slots are freed, gpu1's runs finish without anyone acting; once gpu0's worker is back, the
    retry Dagster queued succeeds on it, no slot is left held, and the sweep ends all ok.

    And on the way, what a good day shows (one cluster for both: each costs a minute): `aaco
    sweep` submits every model on every registered device as one backfill, refuses a device no
    worker registered, the launcher routes each run by its partition's target (no tag of ours),
    gpu0's and gpu1's workers run at once, and a device's second run waits for its first."""
    lake = two_models_two_devices(aaco_paths)
    assert yaml.safe_load((cluster.home / "dagster.yaml").read_text())["run_launcher"]["class"] == (
        "DeviceQueueRunLauncher"
    )
    wait_for_workers(cluster.home, {"gpu0", "gpu1"})
    refused = sweep_of(cluster.env, "--targets", "gpu7")
    assert refused.returncode == 2 and "gpu7" in refused.stderr and "aaco worker" in refused.stderr
    out = open(cluster.logs_dir / "sweep.out", "w+")  # noqa: SIM115 - closed below
    sweep = subprocess.Popen([str(BIN / "aaco"), "sweep"], cwd=REPO, env=cluster.env,
                             stdout=out, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        with dg.DagsterInstance.from_config(str(cluster.home)) as instance:
            victim = poll(lambda: _at_the_writer_pool(instance, "gpu0"), 240, "gpu0 run there")
            cluster.kill_worker("gpu0")
            killed_at, killed_wall = time.monotonic(), time.time()
            times = _recovery(instance, victim, killed_at)
            waited, unblocked = _gpu1_blocked(instance, killed_wall)
            times["gpu1 waiting for the writer slot"] = waited
            times["gpu1's waiting step started"] = unblocked
            cluster.start_worker("gpu0")
            restarted = time.time()
            retry = poll(lambda: _succeeded_retry(instance, victim), 200, "successful retry")
            times["killed run's retry succeeded"] = time.monotonic() - killed_at
            failure = _failure_message(instance, victim)
            swept = instance.get_run_by_id(victim).tags["aaco/sweep"]
            poll(lambda: not _slots_held(instance), 30, "release of every pool slot")
        sweep.wait(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        out.seek(0)
        printed = out.read()
        out.close()
    print("recovery after kill -9 of gpu0's worker, s:", {k: round(t, 1) for k, t in times.items()})
    assert "the worker of device gpu0" in failure and "died" in failure, failure
    assert times["killed run failed"] < 60  # heartbeat lapse (30 s) + two silent checks
    assert times["gpu1's waiting step started"] > times["killed run failed"]  # blocked till then
    assert retry.dagster_run.tags["aaco/sweep"] == swept  # the sweep waited for it
    assert retry.start_time > restarted  # taken by the restarted worker
    assert sweep.returncode == 0, printed
    lines = sorted(tuple(line.split()[:2]) for line in printed.splitlines() if line[:2] == "  ")
    assert lines == [("ok", f"{m}|{d}") for m in ("a", "b") for d in ("gpu0", "gpu1")], printed
    assert printed.splitlines()[-1] == "4 runs: 0 failed, 0 regressed"
    sessions = lake.query("SELECT model_slug, target FROM sessions ORDER BY 1, 2").to_pylist()
    assert [(r["model_slug"], r["target"]) for r in sessions] == [
        (m, d) for m in ("a", "b") for d in ("gpu0", "gpu1")
    ]  # once each, each by its device's worker: the killed run's write never committed
    _one_run_at_a_time_per_device_and_both_at_once(cluster.home)


def _one_run_at_a_time_per_device_and_both_at_once(home: Path) -> None:
    """Every run (the killed one and its retry included) went to its device's queue; a
    device's runs never overlapped; gpu0's and gpu1's did."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = [r for r in instance.get_run_records() if r.start_time is not None]
    assert {r.dagster_run.tags["dagster-celery/queue"] for r in records} == {"gpu0", "gpu1"}
    by_device = {d: [r for r in records if _device(r.dagster_run) == d] for d in ("gpu0", "gpu1")}
    for device, runs in by_device.items():
        runs.sort(key=lambda r: r.start_time)
        for first, second in zip(runs, runs[1:], strict=False):
            assert second.start_time >= first.end_time, f"two runs on {device} overlapped"
    assert any(
        x.start_time < y.end_time and y.start_time < x.end_time
        for x in by_device["gpu0"]
        for y in by_device["gpu1"]
    )


def _at_the_writer_pool(instance, device: str) -> str | None:
    """The STARTED run of `device` that holds the writer pool's slot or waits for it."""
    info = instance.event_log_storage.get_concurrency_info(WRITER_POOL)
    for run_id in {s.run_id for s in [*info.claimed_slots, *info.pending_steps]}:
        run = instance.get_run_by_id(run_id)
        if run.status == dg.DagsterRunStatus.STARTED and _device(run) == device:
            return run_id
    return None


def _device(run) -> str:
    return run.tags["dagster/partition/target"]


def _recovery(instance, victim: str, killed_at: float) -> dict[str, float]:
    """Seconds from the kill until the killed run failed, its slots were freed and gpu1's runs
    had all succeeded."""
    looks = {
        "killed run failed": lambda: instance.get_run_by_id(victim).is_finished,
        "killed run's slots freed": lambda: victim not in _slot_runs(instance),
        "gpu1's runs all succeeded": lambda: _all_succeeded(instance, "gpu1"),
    }
    times: dict[str, float] = {}
    while len(times) < len(looks):
        for name, look in looks.items():
            if name not in times and look():
                times[name] = time.monotonic() - killed_at
        assert time.monotonic() < killed_at + 240, f"after the kill, only {sorted(times)}"
        time.sleep(0.1)
    assert instance.get_run_by_id(victim).status == dg.DagsterRunStatus.FAILURE
    return times


def _gpu1_blocked(instance, killed_at: float) -> tuple[float, float]:
    """Seconds from the kill until a gpu1 step was blocked by the writer pool (the dead run held
    its slot, or was next in line for it; negative: blocked before the kill), and until that
    step started: the wait that ended last, from the events."""
    blocked = f"Step blocked by limit for pool {WRITER_POOL}"
    waits = []
    for run in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition/target": "gpu1"})):
        events = instance.all_logs(run.run_id)
        for wait in (e for e in events if e.user_message == blocked):
            starts = [e.timestamp for e in events if e.step_key == wait.step_key
                      and e.dagster_event and e.dagster_event.event_type_value == "STEP_START"]  # fmt: skip
            waits.append((wait.timestamp - killed_at, max(starts) - killed_at))
    assert waits and max(w[1] for w in waits) > 0, (
        f"no gpu1 step waited for the writer after the kill: {waits}"
    )
    return max(waits, key=lambda w: w[1])


def _slot_runs(instance) -> set[str]:
    return {line.split()[1] for line in _slots_held(instance)}


def _slots_held(instance) -> list[str]:
    """`pool run_id step` for every slot claimed or step queued, in every pool."""
    storage = instance.event_log_storage
    return [
        f"{key} {s.run_id} {s.step_key}"
        for key in storage.get_concurrency_keys()
        for info in [storage.get_concurrency_info(key)]
        for s in [*info.claimed_slots, *info.pending_steps]
    ]


def _all_succeeded(instance, device: str) -> bool:
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition/target": device}))
    return len(runs) == 2 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)


def _succeeded_retry(instance, victim: str):
    """The record of the run Dagster retried `victim` as, once it has succeeded."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={"dagster/parent_run_id": victim})
    )
    return next((r for r in records if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS), None)


def _failure_message(instance, run_id: str) -> str:
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return events[-1].dagster_event.message if events else ""


def test_both_instances_end_dead_runs_and_only_the_routed_one_retries_them(tmp_path, monkeypatch):
    """Every dagster.yaml AACO writes monitors runs and frees the slots of a finished run; the one
    that routes runs to device workers also retries a run whose worker died (an embedded sweep
    executes its runs itself, and no daemon would retry them the way it ran them)."""
    monkeypatch.setenv(POSTGRES_ENV, "postgresql+psycopg2://aaco@127.0.0.1:1/dagster")
    monkeypatch.setenv(BROKER_ENV, "redis://127.0.0.1:1/0")
    for name, routed in (("embedded", False), ("routed", True)):
        (tmp_path / name).mkdir()
        _write_config(tmp_path / name / "dagster.yaml", postgres=routed, celery=routed)
        settings, _ = dagster_instance_config(str(tmp_path / name))  # Dagster's schema accepts it
        assert settings["run_monitoring"] == {
            "enabled": True,
            "poll_interval_seconds": 15,
            "start_timeout_seconds": 300,
            "cancel_timeout_seconds": 900,
            "max_resume_run_attempts": 0,
            "free_slots_after_run_end_seconds": 10,
        }
        retries = {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False}
        assert settings.get("run_retries") == (retries if routed else None)

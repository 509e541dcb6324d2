"""Runs that nobody runs any more: failed, and their pool slots freed, before a sweep waits.

A killed `aaco sweep` (kill -9, the OOM killer, a reboot, a CI cancel) leaves the run it was
executing STARTED, holding the only slot of its device's pool (`aaco_device_<target>`, limit 1)
and counting against the run queue's one run per device: every later run on that device then
waits for ever. No daemon watches a run executed in process, so the next sweep does: this
host's sweep runs whose owner process is gone (`sweep_owner`) are marked failed through Dagster,
with the reason in the run's event log for the UI, and their slots and queued steps are freed in
every pool. A run that has finished but still holds a slot or a queued step (a process that died
between its steps and its end, a run terminated from the UI) has its slots freed too, whoever
ran it: no pool slot is held by a run that is not running. Runs of live owners are left alone.
"""

from __future__ import annotations

import os

import dagster as dg

from aaco_pipelines.sensors.sweep_owner import HOST_TAG, PID_TAG, has_owner, owner_alive, this_host

FINISHED = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
UNFINISHED = [status for status in dg.DagsterRunStatus if status not in FINISHED]


def recover_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Fail this host's sweep runs whose process is gone, free the slots of every run that is
    not running; one line for each run failed or freed."""
    return [*fail_dead_sweep_runs(instance), *free_slots_of_stopped_runs(instance)]


def fail_dead_sweep_runs(instance: dg.DagsterInstance) -> list[str]:
    """This host's unfinished runs whose owner process is gone, marked failed, slots freed."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: this_host()})
    )
    dead = [run for run in runs if has_owner(run.tags) and not owner_alive(run.tags)]
    return [line for run in dead if (line := fail_run(instance, run))]


def fail_run(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str | None:
    """Mark the dead owner's run failed, saying why, and free its slots; None when another sweep
    has just done it."""
    latest = instance.get_run_by_id(run.run_id)
    if latest is None or latest.is_finished:
        return None
    reason = (
        f"aaco sweep process {run.tags[PID_TAG]} on host {run.tags[HOST_TAG]} is gone "
        f"(killed?); marked failed by the next sweep (pid {os.getpid()})"
    )
    instance.report_run_failed(latest, message=reason)
    free_slots(instance, run.run_id)
    return f"run {run.run_id[:8]} ({_partition(run)}) marked failed: {reason}"


def free_slots_of_stopped_runs(instance: dg.DagsterInstance) -> list[str]:
    """Free the slots and queued steps, in every pool, of the runs that hold some but have
    finished (or were deleted)."""
    holding = runs_in_pools(instance)
    if not holding:
        return []
    running = {
        run.run_id
        for run in instance.get_runs(filters=dg.RunsFilter(run_ids=sorted(holding)))
        if not run.is_finished
    }
    lines = []
    for run_id, pools in sorted(holding.items()):
        if run_id not in running:
            free_slots(instance, run_id)
            lines.append(
                f"freed {', '.join(sorted(pools))} from run {run_id[:8]}, which is not running"
            )
    return lines


def runs_in_pools(instance: dg.DagsterInstance) -> dict[str, set[str]]:
    """Every run holding a slot or queued for one, with those pools."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return {}
    holding: dict[str, set[str]] = {}
    for pool, info in storage.get_concurrency_infos(sorted(storage.get_concurrency_keys())).items():
        for claim in [*info.claimed_slots, *info.pending_steps]:
            holding.setdefault(claim.run_id, set()).add(pool)
    return holding


def free_slots(instance: dg.DagsterInstance, run_id: str) -> None:
    """The run's slots and queued steps in every pool; the next queued step gets the slot."""
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)


def _partition(run: dg.DagsterRun) -> str:
    return run.tags.get("dagster/partition", run.job_name)

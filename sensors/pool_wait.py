"""A sweep's wait for its job's pools, before each run: said aloud, and stopped by a signal.

Dagster's own wait for a pool slot, inside `execute_in_process`, says nothing on the terminal,
cannot be stopped and keeps a core busy (Dagster 1.13): its loop asks for the slot again and
again without sleeping (`InstanceConcurrencyContext.interval_to_next_pending_claim_check`
returns at most 0), and it runs under Dagster's `capture_interrupts`, whose SIGTERM and SIGINT
handler only sets a flag that is read when a step starts, which a step waiting for its slot
never does. So the sweep waits here first, until every pool of the job has a free slot: with
aaco's own stop handlers in place (SIGTERM, SIGINT and SIGHUP end it with 128 + the signal),
sleeping between looks, saying at once and then every 30 s which run holds which pool, and
recovering at every look the runs whose owner died meanwhile (`dead_runs`). Another process
can still take a slot between this look and the run's claim; the run then waits in Dagster for
that live run's step, and a stop signal received meanwhile ends the run when its step starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import dagster as dg

from aaco_pipelines.errors import Interrupted
from aaco_pipelines.foundation.stopping import stop_requested
from aaco_pipelines.sensors.dead_runs import recover_dead_runs
from aaco_pipelines.sensors.sweep_owner import describe_owner, has_owner

POLL_S = 1.0
NOTICE_EVERY_S = 30.0
UNOWNED_FIX = (
    "; a run with no owner process recorded that nothing runs any more: terminate it in the UI "
    "(Runs), and the sweep frees its slot"
)


def wait_for_pools(
    instance: dg.DagsterInstance,
    pools: Iterable[str],
    notice: Callable[[str], None],
    poll_s: float = POLL_S,
    notice_every_s: float = NOTICE_EVERY_S,
) -> None:
    """Return once every pool has a free slot, after recovering the runs of dead sweeps."""
    pools = sorted(pools)
    next_notice = time.monotonic()
    while True:
        for line in recover_dead_runs(instance):
            notice(line)
        full = full_pools(instance, pools)
        if not full:
            return
        if time.monotonic() >= next_notice:
            notice(waiting_line(instance, full))
            next_notice = time.monotonic() + notice_every_s
        if stopped := stop_requested():
            raise Interrupted(stopped)
        time.sleep(
            poll_s
        )  # a stop signal raises Interrupted here (aaco_pipelines.foundation.stopping)


def full_pools(instance: dg.DagsterInstance, pools: list[str]) -> dict[str, list[str]]:
    """The pools whose every slot is taken by a step holding one or queued for one (a queued
    step comes before a new claim), each with the runs holding its slots."""
    storage = instance.event_log_storage
    if not pools or not storage.supports_global_concurrency_limits:
        return {}
    full = {}
    for pool, info in storage.get_concurrency_infos(pools).items():
        claims = [*info.claimed_slots, *info.pending_steps]
        if info.slot_count and len({(c.run_id, c.step_key) for c in claims}) >= info.slot_count:
            holders = info.claimed_slots or info.pending_steps
            full[pool] = list(dict.fromkeys(c.run_id for c in holders))
    return full


def waiting_line(instance: dg.DagsterInstance, full: dict[str, list[str]]) -> str:
    """'waiting for pool aaco_device_cpu, held by run 1a2b3c4d of mlp|cpu (sweep pid 4321)'."""
    parts, unowned = [], False
    for pool, run_ids in full.items():
        runs = [instance.get_run_by_id(run_id) for run_id in run_ids]
        unowned |= any(run is not None and not has_owner(run.tags) for run in runs)
        held = ", ".join(_holder(run_id, run) for run_id, run in zip(run_ids, runs, strict=True))
        parts.append(f"pool {pool}, held by {held}")
    return "waiting for " + "; ".join(parts) + (UNOWNED_FIX if unowned else "")


def _holder(run_id: str, run: dg.DagsterRun | None) -> str:
    if run is None:
        return f"run {run_id[:8]} (deleted)"
    partition = run.tags.get("dagster/partition")
    of = f" of {partition}" if partition else ""
    return f"run {run_id[:8]}{of} ({describe_owner(run.tags)})"

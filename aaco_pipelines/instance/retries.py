"""Runs retried by the instance (dagster.yaml's run_retries), as a sweep that waits sees them.

A run whose device worker died is failed by run monitoring and retried by the daemon as a new
run, with its parent's tags (the sweep's among them) and `dagster/parent_run_id`. A sweep waits
for each partition's last attempt, and takes a failure as final only when no retry will follow.

`dagster job backfill`, how `aaco sweep` submits its runs, records its backfill as COMPLETED
the moment the runs are submitted, and Dagster retries no run of a finished backfill: reopened,
with every partition marked submitted, the daemon closes it only once its runs, retries
included, have ended. Not quite: the backfill daemon closes it as soon as no run is unfinished,
which may fall between a run's failure and the retry daemon's look at it (the sweep's last run
killed). That retry is refused for good ("Not retrying run since it is part of a backfill that
is in a terminal state"), so the sweep submits the partition again itself (refused_retry),
within the same bound of attempts.

The same where the retry daemon tried and failed: a run that failed while the instance's
database was away is retried once the database is back, by a daemon whose code location may have
failed to load in the outage; Dagster then records "Failed to retry run" and tags the run
`dagster/will_retry=false` for good (auto_run_reexecution: "we may want to ... be more resilient
to transient errors"). Seen on CI in tests/dagster/test_scale_out_outage.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES, BulkActionStatus
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, BACKFILL_ID_TAG, WILL_RETRY_TAG

PARTITION_TAG = "dagster/partition"
# The failing process tags a failure `dagster/will_retry` right after recording it, or, where
# its own dagster.yaml has no run_retries, the daemon does within seconds: a failure untagged
# this long after its end will not be retried.
UNTAGGED_FINAL_S = 30.0


def keep_backfill_open(instance: dg.DagsterInstance, tags: dict[str, str]) -> None:
    """Reopen the backfill of the runs tagged `tags`, so that Dagster retries them."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags=tags), limit=1)
    backfill_id = runs[0].tags.get(BACKFILL_ID_TAG) if runs else None
    backfill = instance.get_backfill(backfill_id) if backfill_id else None
    if backfill is None or backfill.status != BulkActionStatus.COMPLETED:
        return
    last = backfill.partition_names[-1] if backfill.partition_names else None
    instance.update_backfill(
        backfill.with_status(BulkActionStatus.REQUESTED).with_partition_checkpoint(last)
    )


def attempts_by_partition(runs: Iterable[dg.DagsterRun]) -> dict[str, list[dg.DagsterRun]]:
    """Each partition's runs, oldest attempt first (`instance.get_runs` lists newest first)."""
    attempts: dict[str, list[dg.DagsterRun]] = {}
    for run in runs:
        attempts.setdefault(run.tags.get(PARTITION_TAG, run.run_id), []).insert(0, run)
    return attempts


def settled(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether a partition's latest run has the last word: finished, and not a failure the
    daemon is about to retry."""
    if not run.is_finished:
        return False
    if run.status != dg.DagsterRunStatus.FAILURE or not instance.run_retries_enabled:
        return True
    will_retry = run.tags.get(WILL_RETRY_TAG)
    if will_retry is None:
        record = instance.get_run_record_by_id(run.run_id)
        ended = record.end_time if record and record.end_time else time.time()
        return time.time() - ended > UNTAGGED_FINAL_S
    if will_retry != "true":
        return True
    if run.tags.get(AUTO_RETRY_RUN_ID_TAG):
        return False  # retried: its retry, tagged like it, is the partition's latest attempt
    return _retry_refused(instance, run)


def refused_retry(instance: dg.DagsterInstance, tries: list[dg.DagsterRun]) -> str | None:
    """Why a partition's latest attempt is a failure the instance meant to retry but will not,
    with attempts left (run_retries' max_retries): its backfill ended first, or the retry daemon
    failed to create the retry. None when it is not."""
    run = tries[-1]
    if not (
        run.status == dg.DagsterRunStatus.FAILURE
        and instance.run_retries_enabled
        and not run.tags.get(AUTO_RETRY_RUN_ID_TAG)
        and len(tries) <= instance.run_retries_max_retries
    ):
        return None
    will_retry = run.tags.get(WILL_RETRY_TAG)
    if will_retry == "true" and _retry_refused(instance, run):
        return "after its backfill had ended, so the instance will not retry it"
    if will_retry == "false" and _retry_failed(instance, run):
        return "and the instance failed to retry it"
    return None


def _retry_refused(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Dagster does not retry a run of a backfill that has ended (nor of one deleted)."""
    backfill_id = run.tags.get(BACKFILL_ID_TAG)
    if backfill_id is None:
        return False
    backfill = instance.get_backfill(backfill_id)
    return backfill is None or backfill.status in BULK_ACTION_TERMINAL_STATUSES


RETRY_FAILED = "Failed to retry run"  # the retry daemon's engine event (auto_run_reexecution)


def _retry_failed(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """The retry daemon tried to retry the run and failed (and tagged it will_retry=false)."""
    events = instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)
    return any(e.dagster_event and e.dagster_event.message == RETRY_FAILED for e in events)

"""A routed sweep's last run, failed by its dead worker: Dagster's backfill daemon may close the
sweep's backfill between the failure and the retry daemon's look at it, which then refuses the
retry for good. The sweep submits that partition again itself, within run_retries' bound, and
reports the new attempt's result; a refused retry with no attempts left is the failure.

The instance is a real one (instance_for_test, run_retries on); the runs and the backfill are
written as Dagster's daemons leave them at that moment, and the sweep's submission (a `dagster
job backfill` subprocess needing a daemon and a worker) is replaced by the attempt it makes."""

from __future__ import annotations

import time
import uuid

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.storage.tags import BACKFILL_ID_TAG, WILL_RETRY_TAG

from aaco_pipelines.instance.retries import RETRY_FAILED
from aaco_pipelines.sensors import sweep as sweep_module

RETRIES = {"run_retries": {"enabled": True, "max_retries": 2}}


def _backfill(instance, status: BulkActionStatus) -> str:
    backfill_id = uuid.uuid4().hex[:8]
    instance.add_backfill(
        PartitionBackfill(backfill_id, status, False, {}, time.time(), partition_names=["a|gpu0"])
    )
    return backfill_id


def _run(instance, sweep_id: str, status: dg.DagsterRunStatus, backfill_id: str, **tags) -> str:
    run = DagsterRun(
        job_name="measure_model",
        run_id=uuid.uuid4().hex,
        status=status,
        tags={sweep_module.SWEEP_TAG: sweep_id, "dagster/partition": "a|gpu0",
              BACKFILL_ID_TAG: backfill_id, **tags},
    )  # fmt: skip
    instance.add_run(run)
    return run.run_id


def test_a_retry_refused_for_an_ended_backfill_is_submitted_again_by_the_sweep(monkeypatch):
    said, submitted = [], []
    with dg.instance_for_test(overrides=RETRIES) as instance:
        sweep_id = "s1"
        ended = _backfill(instance, BulkActionStatus.COMPLETED_FAILED)
        killed = _run(instance, sweep_id, dg.DagsterRunStatus.FAILURE, ended,
                      **{WILL_RETRY_TAG: "true"})  # fmt: skip

        def submit(instance_, keys, sweep_id_):  # the new attempt, as its worker ends it
            submitted.append((keys, sweep_id_))
            _run(instance_, sweep_id_, dg.DagsterRunStatus.SUCCESS,
                 _backfill(instance_, BulkActionStatus.REQUESTED))  # fmt: skip

        monkeypatch.setattr(sweep_module, "submit_backfill", submit)
        (result,) = sweep_module.wait_for_runs(instance, sweep_id, 1, None, said.append, 0.01)
    assert submitted == [(["a|gpu0"], sweep_id)]
    assert result.status == "ok" and result.run_id != killed
    assert said[0] == (
        f"a|gpu0: run {killed[:8]} failed after its backfill had ended, so the instance will not "
        "retry it; submitting it again (attempt 2)"
    )


def test_a_retry_the_daemon_failed_to_create_is_submitted_again_by_the_sweep(monkeypatch):
    """A run failed while the database was away; once it was back, the retry daemon's code
    location had not loaded, so Dagster recorded "Failed to retry run" and tagged the run
    will_retry=false for good (seen on CI). The sweep submits it again; a failure that was
    simply not to be retried (will_retry=false, no such event) is final."""
    said, submitted = [], []
    with dg.instance_for_test(overrides=RETRIES) as instance:
        backfill = _backfill(instance, BulkActionStatus.REQUESTED)
        lost = _run(instance, "s4", dg.DagsterRunStatus.FAILURE, backfill,
                    **{WILL_RETRY_TAG: "false"})  # fmt: skip
        instance.report_engine_event(RETRY_FAILED, instance.get_run_by_id(lost))
        final = _run(instance, "s5", dg.DagsterRunStatus.FAILURE, backfill,
                     **{WILL_RETRY_TAG: "false"})  # fmt: skip

        def submit(instance_, keys, sweep_id_):
            submitted.append((keys, sweep_id_))
            _run(instance_, sweep_id_, dg.DagsterRunStatus.SUCCESS, backfill)

        monkeypatch.setattr(sweep_module, "submit_backfill", submit)
        (result,) = sweep_module.wait_for_runs(instance, "s4", 1, None, said.append, 0.01)
        (unretried,) = sweep_module.wait_for_runs(instance, "s5", 1, None, said.append, 0.01)
    assert submitted == [(["a|gpu0"], "s4")] and result.status == "ok"
    assert said == [
        f"a|gpu0: run {lost[:8]} failed and the instance failed to retry it; submitting it again "
        "(attempt 2)"
    ]
    assert unretried.status == "failed" and unretried.run_id == final


def test_a_refused_retry_with_no_attempts_left_is_the_failure(monkeypatch):
    """Three attempts (max_retries 2) have run: the last one's failure is final."""
    with dg.instance_for_test(overrides=RETRIES) as instance:
        ended = _backfill(instance, BulkActionStatus.COMPLETED_FAILED)
        for _ in range(3):
            last = _run(instance, "s2", dg.DagsterRunStatus.FAILURE, ended,
                        **{WILL_RETRY_TAG: "true"})  # fmt: skip
        monkeypatch.setattr(sweep_module, "submit_backfill", _never_submitted)
        (result,) = sweep_module.wait_for_runs(instance, "s2", 1, None, None, 0.01)
    assert result.status == "failed" and result.run_id == last


def _never_submitted(*args) -> None:
    raise AssertionError("a partition with no attempts left was submitted again")


def test_the_sweep_says_nothing_is_waited_for_once_every_result_is_in():
    """The fresh-clone walk-through printed 'waiting for 0 runs: not created yet' after the
    sweep's last result: the periodic line comes only while a result is missing."""
    said = []
    with dg.instance_for_test(overrides=RETRIES) as instance:
        _run(
            instance,
            "s3",
            dg.DagsterRunStatus.SUCCESS,
            _backfill(instance, BulkActionStatus.REQUESTED),
        )
        (result,) = sweep_module.wait_for_runs(
            instance, "s3", 1, None, said.append, 0.01, report_every_s=0.0
        )
    assert result.status == "ok" and said == []

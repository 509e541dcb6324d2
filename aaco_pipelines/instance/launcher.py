"""The run launcher of a scaled-out instance: dagster-celery's, each run on its device's queue,
and a health check that notices a device worker that died mid-run.

dagster-celery picks the queue from the run's `dagster-celery/queue` tag. No trigger sets it
(on a single host the tag would only suggest that Celery must run), and a run launched from the
UI's Materialize for a `model|gpu3` partition carries only the partition's own tags: this
launcher tags every run with the queue of the target it measures as it sends it, so only a
routed instance's runs carry the tag. A run of no target (the envelope's calibration) goes to
the default queue, the head's.

The daemon's run monitoring asks the launcher, for every STARTED run, whether its worker still
runs it. dagster-celery answers from the Celery task's state alone, which stays STARTED for ever
after its worker was killed: the run stayed STARTED, kept its device busy and its pool slots
held. This launcher also reads the worker's heartbeat (heartbeat.py): a run whose worker has
written none for `heartbeat.ALIVE_FOR_S` seconds, on two checks at least `SILENT_FOR_S` apart,
is reported FAILED; monitoring then marks it failed, its slots are freed and Dagster retries it
on the same device's queue (dagster.yaml's run_monitoring and run_retries, README "Scaling out").

A broker away for a moment (a redis restart, a failover) is waited for: a run the daemon
dequeues then is sent once the broker is back (within AACO_SERVICE_PATIENCE_S; Dagster would fail
it at the first error, for good), and a health check that cannot reach it calls the run
running: nothing says its worker died.
"""

from __future__ import annotations

import time

import kombu.exceptions
import redis.exceptions
from celery.backends.redis import RedisBackend
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

from aaco_pipelines.foundation.patience import patiently, service_patience_s
from aaco_pipelines.instance.heartbeat import ALIVE_FOR_S, BEAT_S, alive_key

QUEUE_TAG = "dagster-celery/queue"
PARTITION_TARGET_TAG = "dagster/partition/target"  # Dagster's tag for a multi-partition dimension
# A heartbeat missing at one check may be a broker that just restarted empty: the worker writes
# it again within a beat. Missing on a later check too, this long after, it is a death.
SILENT_FOR_S = 2 * BEAT_S
FINAL = (WorkerStatus.SUCCESS, WorkerStatus.FAILED)
# A broker that refuses or drops connections: redis's own errors (the result backend's), and
# kombu's wrapping of them (sending the task).
BROKER_AWAY = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    kombu.exceptions.OperationalError,
)


class DeviceQueueRunLauncher(CeleryRunLauncher):
    """A run of a model x target partition goes to its target's queue, whatever else it says;
    a run whose device worker died is reported failed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._silent_since: dict[str, float] = {}  # run id -> when its heartbeat was first missed

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        target = run.tags.get(PARTITION_TARGET_TAG)
        if target and run.tags.get(QUEUE_TAG) != target:
            self._instance.add_run_tags(run.run_id, {QUEUE_TAG: target})
            run = self._instance.get_run_by_id(run.run_id)
            context = LaunchRunContext(dagster_run=run, workspace=context.workspace)
        # Nothing is sent before the backend subscribes to the task's result (where a broker
        # away fails first): trying again sends the task once.
        patiently(
            lambda: CeleryRunLauncher.launch_run(self, context),
            lambda exc: isinstance(exc, BROKER_AWAY),
            patience_s=service_patience_s(),
            what=f"the Celery broker (run {run.run_id})",
        )

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        """The task's state when it has ended; else RUNNING while its worker beats, FAILED once
        the worker has been silent on two checks (the state read again after the heartbeat, so
        a run that just finished is not called dead). With the broker away, nothing is known:
        RUNNING, for run monitoring fails a run on any other answer."""
        try:
            return self._health(run)
        except BROKER_AWAY as exc:
            self._silent_since.pop(run.run_id, None)
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"broker unreachable: {exc}")

    def _health(self, run) -> CheckRunHealthResult:
        health = super().check_run_worker_health(run)
        task_id = run.tags.get(DAGSTER_CELERY_TASK_ID_TAG)
        if health.status in FINAL or task_id is None or not self._beats_readable():
            return health
        if self.celery.backend.client.exists(alive_key(task_id)):
            self._silent_since.pop(run.run_id, None)
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        health = super().check_run_worker_health(run)
        if health.status in FINAL:
            self._silent_since.pop(run.run_id, None)
            return health
        silent_since = self._silent_since.setdefault(run.run_id, time.monotonic())
        if time.monotonic() - silent_since < SILENT_FOR_S:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no heartbeat at the last check")
        del self._silent_since[run.run_id]
        return CheckRunHealthResult(WorkerStatus.FAILED, self._death(run, task_id))

    def _beats_readable(self) -> bool:
        """Heartbeats live in a redis result backend (the only kind `aaco worker` writes to)."""
        return isinstance(self.celery.backend, RedisBackend)

    def _death(self, run, task_id: str) -> str:
        info = self.celery.AsyncResult(task_id).info
        worker = info.get("hostname") if isinstance(info, dict) else None
        device = run.tags.get(QUEUE_TAG, self.default_queue)
        return (
            f"the worker of device {device} ({worker or 'unknown'}) died: no heartbeat for "
            f"over {ALIVE_FOR_S} s while its Celery task {task_id} was not finished"
        )

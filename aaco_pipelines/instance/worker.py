"""The Celery app a device worker runs (`aaco worker`: `celery -A aaco_pipelines.instance.worker`).

dagster-celery's own app (the tasks that execute and resume Dagster runs), plus a heartbeat for
each run the worker executes (heartbeat.py): what lets the head node tell a run whose worker was
killed from one that is still measuring.
"""

from __future__ import annotations

from celery import signals
from celery.backends.redis import RedisBackend
from dagster_celery.app import app

from aaco_pipelines.instance import heartbeat

__all__ = ["app"]

_beating: dict[str, object] = {}  # task id -> its beating process


@signals.task_prerun.connect
def start_heartbeat(task_id: str, task, **_) -> None:
    """Before the task is marked STARTED, so a started run always has its heartbeat."""
    if isinstance(task.backend, RedisBackend):
        _beating[task_id] = heartbeat.start(task.backend.url, task_id)


@signals.task_postrun.connect
def stop_heartbeat(task_id: str, task, **_) -> None:
    beating = _beating.pop(task_id, None)
    if beating is not None:
        heartbeat.stop(beating, task.backend.client, task_id)

"""The run launcher of a scaled-out instance: dagster-celery's, each run on its device's queue.

dagster-celery picks the queue from the run's `dagster-celery/queue` tag. The sensors, the
schedule and `aaco sweep` set it (`sensors.jobs.run_tags`), but a run launched from the UI's
Materialize for a `model|gpu3` partition carries only the partition's own tags, and would land on
the head's queue. This launcher puts every run on the queue of the target it measures.
"""

from __future__ import annotations

from dagster._core.launcher import LaunchRunContext
from dagster_celery.launcher import CeleryRunLauncher

QUEUE_TAG = "dagster-celery/queue"
PARTITION_TARGET_TAG = "dagster/partition/target"  # Dagster's tag for a multi-partition dimension


class DeviceQueueRunLauncher(CeleryRunLauncher):
    """A run of a model x target partition goes to its target's queue, whatever else it says."""

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        target = run.tags.get(PARTITION_TARGET_TAG)
        if target and run.tags.get(QUEUE_TAG) != target:
            self._instance.add_run_tags(run.run_id, {QUEUE_TAG: target})
            run = self._instance.get_run_by_id(run.run_id)
            context = LaunchRunContext(dagster_run=run, workspace=context.workspace)
        super().launch_run(context)

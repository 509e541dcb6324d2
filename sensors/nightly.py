"""nightly_regression_sweep: measure every model partition once a night.

`build_schedule_from_partitioned_job` rejects dynamic partitions, so this schedule reads the
models and targets from the instance and yields one run request per model on every target.
"""

import os

import dagster as dg

from aaco_pipelines.assets.partitions import (
    NIGHT_TAG,
    NIGHT_TIMEZONE,
    models_partitions,
    nights_partitions,
    targets_partitions,
)
from aaco_pipelines.sensors.jobs import measure_model_job, measure_request

NIGHTLY_CRON = os.environ.get("AACO_NIGHTLY_CRON", "0 2 * * *")


@dg.schedule(
    job=measure_model_job,
    cron_schedule=NIGHTLY_CRON,
    execution_timezone=NIGHT_TIMEZONE,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly regression sweep over all models (AACO_NIGHTLY_CRON, default 02:00).",
)
def nightly_regression_sweep(context: dg.ScheduleEvaluationContext):
    night = context.scheduled_execution_time.strftime("%Y-%m-%d")
    slugs = context.instance.get_dynamic_partitions(models_partitions.name)
    targets = context.instance.get_dynamic_partitions(targets_partitions.name)
    if not (slugs and targets):
        return dg.SkipReason("no models or no targets registered yet")
    # A schedule cannot request partitions as a sensor does: the night is added here, so its
    # review partition exists from the moment its runs do.
    context.instance.add_dynamic_partitions(nights_partitions.name, [night])
    return [
        measure_request(
            f"nightly:{night}:{slug}@{target}", slug, target, "nightly", **{NIGHT_TAG: night}
        )
        for slug in slugs
        for target in targets
    ]

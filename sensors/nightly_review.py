"""nightly_review_sensor: once every run of a night's sweep has finished, review the night.

The review (asset `nightly_review`) judges all of the night's drift series together, so it must
wait for the last model. The run key `review:<night>` makes each night reviewed once; the
cursor (the newest night reviewed) keeps older nights from being looked at again.
"""

import dagster as dg

from aaco_pipelines.assets.partitions import NIGHT_TAG, nights_partitions
from aaco_pipelines.sensors.jobs import review_night_job

FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
RECENT_RUNS = 1000  # nightly runs looked at per evaluation: more than a night of any registry


@dg.sensor(
    job=review_night_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests the review of a night (false discovery rate across every model's "
    "drift series) once all of that night's measurement runs have finished.",
)
def nightly_review_sensor(context: dg.SensorEvaluationContext):
    runs = context.instance.get_runs(
        filters=dg.RunsFilter(tags={"aaco/trigger": "nightly"}),
        limit=RECENT_RUNS,
    )
    nights: dict[str, list[dg.DagsterRun]] = {}
    for run in runs:
        if NIGHT_TAG in run.tags:
            nights.setdefault(run.tags[NIGHT_TAG], []).append(run)
    reviewed = context.cursor or ""
    ready = sorted(
        night
        for night, night_runs in nights.items()
        if night > reviewed and all(run.status in FINISHED for run in night_runs)
    )
    if not ready:
        pending = sorted(n for n in nights if n > reviewed)
        return dg.SkipReason(f"nights still running: {pending}" if pending else "no new night")
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=f"review:{night}", partition_key=night) for night in ready
        ],
        # the schedule adds its night; a night tagged by hand (or before v24) is added here
        dynamic_partitions_requests=[nights_partitions.build_add_request(ready)],
        cursor=ready[-1],
    )

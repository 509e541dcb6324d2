"""nightly_review: one night's sweep judged as a whole, with the false discovery rate controlled
(stages.review_night). Which sessions a night measured is read from the Dagster instance: the
runs the nightly schedule tagged with the night."""

import dagster as dg

from aaco_pipelines.assets.partitions import NIGHT_TAG, nights_partitions
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.governance.alerts.lifecycle import list_alerts, sync_alerts
from aaco_pipelines.governance.drift.fdr import CHANGES
from aaco_pipelines.report.alerts_text import MAX_ALERT_ROWS, alert_events_table, alerts_table
from aaco_pipelines.report.night_text import night_changes_table
from aaco_pipelines.resources import TraceLakeResource
from aaco_pipelines.stages.review_night import review_night

DRIFT_ASSET = dg.AssetKey("performance_drift")


def judged_session(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """The session whose drift the run judged, from its performance_drift materialization."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    for record in records:
        materialization = record.event_log_entry.asset_materialization
        if materialization.asset_key == DRIFT_ASSET:
            return materialization.metadata["session_id"].value
    return None


def night_sessions(instance: dg.DagsterInstance, night: str) -> tuple[dict[str, str], list[str]]:
    """({model: session its newest judging run of the night judged}, [models none of whose runs
    judged one]): a retry that succeeds replaces a failure, a cancelled re-run does not."""
    sessions: dict[str, str] = {}
    models: set[str] = set()
    for run in instance.get_runs(filters=dg.RunsFilter(tags={NIGHT_TAG: night})):  # newest first
        slug = run.tags.get("dagster/partition", run.run_id)
        models.add(slug)
        if slug not in sessions and (sid := judged_session(instance, run.run_id)):
            sessions[slug] = sid
    return sessions, sorted(models - set(sessions))


@dg.asset(
    partitions_def=nights_partitions,
    # Lineage: a night reads the verdicts of every model's performance_drift.
    deps=[dg.AssetDep("performance_drift", partition_mapping=dg.AllPartitionMapping())],
    group_name="governance",
    kinds={"duckdb"},
    pool=TRACELAKE_WRITER_POOL,
    check_specs=[
        dg.AssetCheckSpec(
            "no_regression_after_fdr",
            asset="nightly_review",
            description="Fails when any model's p50, p99 or throughput regression of the night "
            "survives Benjamini-Hochberg across every series the night judged.",
        )
    ],
    description="After a nightly sweep: every drift series the night judged, as one family, "
    "with the false discovery rate controlled (Benjamini-Hochberg, q = 0.05); the regressions "
    "that survive, and the models whose measurement failed.",
)
def nightly_review(context: dg.AssetExecutionContext, tracelake: TraceLakeResource):
    night = context.partition_key
    sessions, failed = night_sessions(context.instance, night)
    if not sessions and not failed:
        raise dg.Failure(
            description=f"night {night}: no measurement runs tagged {NIGHT_TAG}={night}; "
            "review a night the nightly_regression_sweep schedule ran (its runs carry the tag)",
            metadata={"night": night, "tag": f"{NIGHT_TAG}={night}"},
            allow_retries=False,
        )
    review = review_night(tracelake.lake, list(sessions.values()))
    # the night's verdicts are final now: its alerts open, update or close (governance.alerts.lifecycle)
    alert_events = sync_alerts(tracelake.lake, list(sessions.values()))
    active = list_alerts(tracelake.lake, active=True)  # every model's, as people left them
    changes, surviving = review.changes, review.surviving
    context.log.info(
        f"night {night}: {len(sessions)} models judged, {len(failed)} failed, "
        f"{len(surviving)} gated regressions survive FDR"
    )
    yield dg.Output(
        {
            "night": night,
            "sessions": sessions,
            "failed": failed,
            "regressions": [{"model": v["model_slug"], "metric": v["metric"]} for v in surviving],
        },
        metadata={
            "models_judged": len(sessions),
            "models_failed": dg.MetadataValue.md(", ".join(failed) or "none"),
            "series_judged": review.series_judged,
            "changes_before_fdr": sum(v["before"] in CHANGES for v in review.verdicts),
            "changes_after_fdr": sum(v["verdict"] in CHANGES for v in review.verdicts),
            "changes": dg.MetadataValue.md(night_changes_table(changes) if changes else "none"),
            "alerts": dg.MetadataValue.md(
                alert_events_table(alert_events) if alert_events else "none opened or changed"
            ),
            "active_alerts": dg.MetadataValue.md(
                alerts_table(active[:MAX_ALERT_ROWS]) if active else "none"
            ),
        },
    )
    yield dg.AssetCheckResult(
        check_name="no_regression_after_fdr",
        passed=not surviving,
        metadata={
            "regressions": dg.MetadataValue.md(
                night_changes_table(surviving) if surviving else "none"
            )
        },
    )

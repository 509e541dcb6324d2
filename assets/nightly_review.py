"""nightly_review: one night's sweep judged as a whole, with the false discovery rate controlled.

Each model's run judges its own series; a night judges hundreds at once, and at a per-series
level a few of them are noise every night. After the last run of a night, its drift verdicts go
through Benjamini-Hochberg (q = 0.05, `governance.fdr.control_sweep`): a regression whose
adjusted p-value is above q becomes no_change ("fdr_controlled") in the TraceLake, and the
night's check fails only on the regressions that remain.
"""

import json

import dagster as dg

from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.governance.fdr import CHANGES, control_sweep
from aaco_pipelines.governance.series import GATED_METRICS
from aaco_pipelines.report.markdown_tables import markdown_table
from assets.partitions import NIGHT_TAG, nights_partitions
from resources import TraceLakeResource

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
            f"no measurement runs tagged {NIGHT_TAG}={night}",
            description="review a night the nightly_regression_sweep schedule ran",
        )
    verdicts = _with_fdr(control_sweep(tracelake.lake, list(sessions.values())).to_pylist())
    changes = [v for v in verdicts if v["before"] in CHANGES or v["verdict"] in CHANGES]
    surviving = [
        v for v in changes if v["verdict"] == "regression" and v["metric"] in GATED_METRICS
    ]
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
            "series_judged": max((v["family_size"] for v in verdicts), default=0),
            "changes_before_fdr": sum(v["before"] in CHANGES for v in verdicts),
            "changes_after_fdr": sum(v["verdict"] in CHANGES for v in verdicts),
            "changes": dg.MetadataValue.md(_changes_table(changes) if changes else "none"),
        },
    )
    yield dg.AssetCheckResult(
        check_name="no_regression_after_fdr",
        passed=not surviving,
        metadata={
            "regressions": dg.MetadataValue.md(_changes_table(surviving) if surviving else "none")
        },
    )


def _with_fdr(verdicts: list[dict]) -> list[dict]:
    """Drift verdict rows with what each was before FDR, its p-values and the family size."""
    for v in verdicts:
        fdr = json.loads(v["parameters_json"]).get("fdr", {})
        v["before"] = (fdr.get("over") or {}).get("verdict", v["verdict"])
        v["p_value"], v["p_adjusted"] = fdr.get("p_value"), fdr.get("p_adjusted")
        v["family_size"] = fdr.get("family_size", 0)
    return verdicts


def _changes_table(rows: list[dict]) -> str:
    return markdown_table(
        rows,
        [
            ("model_slug", "model", None),
            ("metric", "metric", None),
            ("before", "before FDR", None),
            ("verdict", "after FDR", None),
            ("effect_pct", "effect %", lambda v: f"{v:+.2f}"),
            ("p_value", "p", lambda v: f"{v:.2g}"),
            ("p_adjusted", "BH-adjusted p", lambda v: f"{v:.2g}"),
        ],
    )

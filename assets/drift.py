"""performance_drift: each metric's history for the model, and the verdict on the new session.

The session's run ends here: its HTML report and Perfetto trace are written now, from the lake
that holds all of it, for every per-session asset page to point at (assets/session_page.py).
"""

import json
from pathlib import Path

import dagster as dg
from dagster import get_dagster_logger

from aaco_pipelines.assets.partitions import NIGHT_TAG, model_target_partitions
from aaco_pipelines.assets.session_page import as_text, session_page
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.governance.alerts.lifecycle import list_alerts
from aaco_pipelines.governance.drift.series import CONFIRM_SESSIONS, DEFAULT_POLICY
from aaco_pipelines.report.alerts_text import MAX_ALERT_ROWS, alert_events_table, alerts_table
from aaco_pipelines.report.objectives_text import objectives_table
from aaco_pipelines.report.verdict_text import paired_text
from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource
from aaco_pipelines.stages.judge_drift import judge_drift
from aaco_pipelines.stages.publish import publish


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="governance",
    kinds={"duckdb"},
    pool=TRACELAKE_WRITER_POOL,
    check_specs=[
        dg.AssetCheckSpec(
            "no_performance_regression",
            asset="performance_drift",
            blocking=True,
            description="Fails when p50, p99 or throughput of the new session is a confirmed "
            "regression against the model's history (robust baseline, EWMA/CUSUM, practical "
            "effect and bootstrap CI).",
        ),
        dg.AssetCheckSpec(
            "objectives_met",
            asset="performance_drift",
            description="Fails when a figure breaches an objective (SLO) of the model: its 95 % "
            "interval, widened by the session-to-session spread, lies beyond the limit. A breach "
            "measured on a host the quality check suspects only warns.",
        ),
    ],
    description="Builds each metric's series for the model (one point per session, with model "
    "version and runtime change markers) and judges the newest session: regression, "
    "improvement, no change or insufficient history, with effect size and confidence interval.",
)
def performance_drift(
    context: dg.AssetExecutionContext,
    bottleneck_report: dict,
    tracelake: TraceLakeResource,
    registry: ModelRegistryResource,
):
    # The series is the session's model on the session's target (this partition's). A sweep's
    # run leaves its alerts to the sweep's review, once its false discoveries are controlled.
    tags = context.run.tags
    in_sweep = NIGHT_TAG in tags or tags.get("aaco/trigger") == "sweep"
    bundle = SessionBundle(Path(bottleneck_report["bundle_path"]))
    judged = judge_drift(tracelake.lake, bundle, alerts=not in_sweep, paths=registry.paths)
    model, target = bundle.session["model_slug"], bundle.request.get("target")
    home, lake = registry.paths.home, tracelake.lake
    with lake.reading():  # the report's files and the page's sections: one open of the lake
        files = publish(lake, judged.session_id, home)
        page = session_page(
            home, lake, judged.session_id, ("drift", "structure"), plots=("drift-latency_p50_ns",)
        )
    p50_row = next(v for v in judged.verdicts if v["metric"] == "latency_p50_ns")
    yield dg.Output(
        {"session_id": judged.session_id, "verdicts": judged.by_metric},
        metadata=as_text(
            {
                **page,
                **_unwritten_trace(files, judged.session_id),
                **_no_structure(page),
                "verdict_needs": verdict_needs(p50_row),
                "history_points": judged.verdicts[0]["history_points"],
                "alerts": dg.MetadataValue.md(_alerts_text(judged, in_sweep)),
                "model_alerts": dg.MetadataValue.md(_model_alerts(lake, model, target)),
            }
        ),
    )
    regressions = judged.regressions
    yield dg.AssetCheckResult(
        check_name="no_performance_regression",
        passed=not regressions,
        metadata={
            "regressions": ", ".join(f"{v['metric']} {v['effect_pct']:+.2f}%" for v in regressions)
            or "none",
            "verdicts": dg.MetadataValue.json(judged.gated),
            **_gate_metadata(judged.gate),
        },
    )
    yield _objectives_check(judged)


def _alerts_text(judged, in_sweep: bool) -> str:
    """What the session did to its model's alerts (governance.alerts.lifecycle)."""
    if judged.alerts_error:
        get_dagster_logger().warning(f"alerts not updated: {judged.alerts_error}")
        return f"not updated: {judged.alerts_error}"
    if judged.alerts:
        return alert_events_table(judged.alerts)
    return "left to the sweep's review" if in_sweep else "none opened, updated or fixed"


def _model_alerts(lake, model: str, target: str) -> str:
    """The model's alerts on this target as they stand (people's acknowledgements included),
    the ones waiting for someone first."""
    alerts = list_alerts(lake, model=model, target=target)
    return alerts_table(alerts[:MAX_ALERT_ROWS]) if alerts else "none"


def _objectives_check(judged) -> dg.AssetCheckResult:
    """Fails (error) on a confirmed breach; warns on one measured on a suspect host."""
    breaches, suspect = judged.breaches, judged.suspect_breaches
    return dg.AssetCheckResult(
        check_name="objectives_met",
        passed=not (breaches or suspect),
        severity=dg.AssetCheckSeverity.ERROR if breaches else dg.AssetCheckSeverity.WARN,
        metadata={
            "objectives": dg.MetadataValue.md(
                objectives_table(judged.objectives) if judged.objectives else "none set"
            ),
            "breached": ", ".join(o["objective"] for o in breaches) or "none",
            "breached_on_a_suspect_measurement": ", ".join(o["objective"] for o in suspect)
            or "none",
        },
    )


def _unwritten_trace(files, session_id: str) -> dict:
    """A session too big for a trace with every run: its page says which command writes it."""
    if files.trace_written:
        return {}
    return {"perfetto_trace (ui.perfetto.dev)": files.trace_note(session_id)}


def _no_structure(page: dict) -> dict:
    """The page says so where the model has no previous session on this target to compare."""
    if "nodes_moved" in page:
        return {}
    return {"structure_since_previous": "no previous session of this model and target"}


def _gate_metadata(gate: dict | None) -> dict:
    if gate is None:
        return {}
    cause = gate["suspected_cause"] or {}
    decided = paired_text(gate["paired"]) if gate.get("paired") else "the stored sessions"
    return {
        # the gate's one side-by-side policy (governance.gate.paired.settle), as aaco diff's
        "decided_on": "; ".join(
            [
                f"side by side: {decided}" if gate.get("paired") else decided,
                *gate.get("side_by_side_notes", []),
            ]
        ),
        "suspected_cause": f"{cause.get('kind')}: {cause.get('name')} "
        f"({cause.get('before')} -> {cause.get('after')}), posterior {cause.get('posterior', 0):.2f}",
        "recommendation": gate["recommendation"],
        "gate": dg.MetadataValue.json(gate),
    }


def verdict_needs(row: dict) -> str:
    """How many sessions a verdict needs, from the policy the row was judged by, and how many
    this series has: one session alone is "insufficient history", not a finding."""
    parameters = json.loads(row.get("parameters_json") or "{}")
    needed = parameters.get("min_history", DEFAULT_POLICY.min_history)
    return (
        f"{needed} earlier sessions of this model on this target ({row['history_points']} so "
        f"far); a regression or improvement then stands once {CONFIRM_SESSIONS} sessions in a "
        "row show it (at once after a model or runtime change)"
    )

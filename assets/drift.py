"""performance_drift: each metric's history for the model, and the verdict on the new session.

The session's run ends here: its HTML report and Perfetto trace are written now, from the lake
that holds all of it, for every per-session asset page to point at (assets/session_page.py).
"""

import json
from pathlib import Path

import dagster as dg
from dagster import get_dagster_logger

from aaco_pipelines.assets.partitions import NIGHT_TAG, model_target_partitions
from aaco_pipelines.assets.session_page import as_text, session_links
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.governance.alerts.lifecycle import list_alerts
from aaco_pipelines.governance.drift.series import CONFIRM_SESSIONS, DEFAULT_POLICY
from aaco_pipelines.report.alerts_text import MAX_ALERT_ROWS, alert_events_table, alerts_table
from aaco_pipelines.report.drift_plots import drift_row_plot
from aaco_pipelines.report.markdown_tables import markdown_table
from aaco_pipelines.report.objectives_text import objectives_table
from aaco_pipelines.report.plot_canvas import markdown_image
from aaco_pipelines.report.structure_text import structure_headline, structure_tables
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
    home = registry.paths.home
    files = publish(tracelake.lake, judged.session_id, home)
    p50_row = next(v for v in judged.verdicts if v["metric"] == "latency_p50_ns")
    yield dg.Output(
        {"session_id": judged.session_id, "verdicts": judged.by_metric},
        metadata=as_text(
            {
                "session_id": judged.session_id,
                "p50_drift_plot": dg.MetadataValue.md(
                    markdown_image(drift_row_plot(p50_row), "p50 drift history")
                ),
                **session_links(home, judged.session_id),
                **_unwritten_trace(files, judged.session_id),
                "verdict_needs": verdict_needs(p50_row),
                "verdicts": dg.MetadataValue.md(_verdict_table(judged.verdicts)),
                "p50_last_points_ms": dg.MetadataValue.md(
                    _last_points(judged.series("latency_p50_ns"))
                ),
                "history_points": judged.verdicts[0]["history_points"],
                "alerts": dg.MetadataValue.md(_alerts_text(judged, in_sweep)),
                "model_alerts": dg.MetadataValue.md(_model_alerts(tracelake.lake, model, target)),
                **_structure_metadata(judged.structure),
            }
        ),
    )
    regressions = judged.regressions
    yield dg.AssetCheckResult(
        check_name="no_performance_regression",
        passed=not regressions,
        metadata={
            "regressions": dg.MetadataValue.md(
                _verdict_table(regressions) if regressions else "none"
            ),
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


def _structure_metadata(structure) -> dict:
    """What changed in the compiled graph since the model's previous session (aaco diff
    --structure): its headline and its fusion changes."""
    if structure is None:
        return {"structure_since_previous": "no previous session of this model and target"}
    tables = dict(structure_tables(structure))
    fusions = [row for title, row in tables.items() if title.startswith("fusion changes")]
    return {
        "structure_since_previous": structure_headline(structure).replace("\n", " "),
        "fusion_changes": dg.MetadataValue.md(
            _rows_table(fusions[0]) if fusions else "none since the previous session"
        ),
    }


def _rows_table(rows: list[tuple[str, ...]]) -> str:
    """A text table (its header first) as Markdown."""
    header, *body = rows
    columns = [(str(i), title, None) for i, title in enumerate(header)]
    return markdown_table([{str(i): v for i, v in enumerate(row)} for row in body], columns)


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


def _verdict_table(verdicts: list[dict]) -> str:
    """Six columns: z and the parameters are in the HTML report."""
    rows = [
        {**v, "ci": f"{v['ci_low']:+.2f} – {v['ci_high']:+.2f}"}
        if v.get("ci_low") is not None
        else v
        for v in verdicts
    ]
    return markdown_table(
        rows,
        [
            ("metric", "metric", None),
            ("verdict", "verdict", None),
            ("effect_pct", "effect %", lambda v: f"{v:+.2f}"),
            ("ci", "CI %", None),
            ("decided_by", "decided by", None),
            ("history_points", "history", None),
        ],
    )


def _last_points(series: dict, count: int = 8) -> str:
    rows = [
        {
            "session": sid,
            "p50_ms": value / 1e6 if value is not None else None,
            "changed": ", ".join(m),
        }
        for sid, value, m in zip(
            series["session_ids"], series["values"], series["markers"], strict=True
        )
    ][-count:]
    return markdown_table(
        rows,
        [
            ("session", "session", None),
            ("p50_ms", "p50 ms", lambda v: f"{v:.4f}"),
            ("changed", "changed", None),
        ],
    )

"""performance_drift: each metric's history for the model, and the verdict on the new session."""

from pathlib import Path

import dagster as dg

from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.report.markdown_tables import markdown_table, num
from aaco_pipelines.report.plots import drift_row_plot, markdown_image
from aaco_pipelines.stages.judge_drift import judge_drift
from assets.partitions import model_target_partitions
from resources import TraceLakeResource


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
        )
    ],
    description="Builds each metric's series for the model (one point per session, with model "
    "version and runtime change markers) and judges the newest session: regression, "
    "improvement, no change or insufficient history, with effect size and confidence interval.",
)
def performance_drift(
    context: dg.AssetExecutionContext, bottleneck_report: dict, tracelake: TraceLakeResource
):
    # The series is the session's model on the session's target (this partition's).
    judged = judge_drift(tracelake.lake, SessionBundle(Path(bottleneck_report["bundle_path"])))
    p50_row = next(v for v in judged.verdicts if v["metric"] == "latency_p50_ns")
    yield dg.Output(
        {"session_id": judged.session_id, "verdicts": judged.by_metric},
        metadata={
            "session_id": judged.session_id,
            "verdicts": dg.MetadataValue.md(_verdict_table(judged.verdicts)),
            "p50_history": dg.MetadataValue.md(
                markdown_image(drift_row_plot(p50_row), "p50 drift history")
            ),
            "p50_last_points_ms": dg.MetadataValue.md(
                _last_points(judged.series("latency_p50_ns"))
            ),
            "history_points": judged.verdicts[0]["history_points"],
        },
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


def _gate_metadata(gate: dict | None) -> dict:
    if gate is None:
        return {}
    cause = gate["suspected_cause"] or {}
    return {
        "suspected_cause": f"{cause.get('kind')}: {cause.get('name')} "
        f"({cause.get('before')} -> {cause.get('after')}), posterior {cause.get('posterior', 0):.2f}",
        "recommendation": gate["recommendation"],
        "gate": dg.MetadataValue.json(gate),
    }


def _verdict_table(verdicts: list[dict]) -> str:
    return markdown_table(
        verdicts,
        [
            ("metric", "metric", None),
            ("verdict", "verdict", None),
            ("effect_pct", "effect %", lambda v: f"{v:+.2f}"),
            ("ci_low", "CI low %", lambda v: f"{v:+.2f}"),
            ("ci_high", "CI high %", lambda v: f"{v:+.2f}"),
            ("z", "z", num),
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

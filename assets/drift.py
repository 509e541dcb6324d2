"""performance_drift: each metric's history for the model, and the verdict on the new session."""

import json

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.gate import gate_verdict
from aaco_pipelines.governance.series import GATED_METRICS, drift_rows
from aaco_pipelines.report.markdown_tables import markdown_table, num
from aaco_pipelines.report.plots import drift_row_plot, markdown_image
from aaco_pipelines.session_folders import release_session_folder
from assets.partitions import model_and_target, model_target_partitions
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
    lake, session_id = tracelake.lake, bottleneck_report["session_id"]
    slug, _target = model_and_target(context.partition_key)  # the series is the session's target's
    rows = drift_rows(lake, slug, session_id)
    # The last stage: its verdicts and the session's completion commit together.
    lake.replace_session_rows(session_id, {"drift_verdicts": rows}, complete=True)
    release_session_folder(session_id)
    verdicts = rows.to_pylist()
    p50_row = next(v for v in verdicts if v["metric"] == "latency_p50_ns")
    gated = rows.filter(pc.is_in(rows["metric"], value_set=pa.array(GATED_METRICS)))
    regressions = [v for v in gated.to_pylist() if v["verdict"] == "regression"]
    gate = _gate(lake, session_id) if regressions else None
    yield dg.Output(
        {"session_id": session_id, "verdicts": {v["metric"]: v["verdict"] for v in verdicts}},
        metadata={
            "session_id": session_id,
            "verdicts": dg.MetadataValue.md(_verdict_table(verdicts)),
            "p50_history": dg.MetadataValue.md(
                markdown_image(drift_row_plot(p50_row), "p50 drift history")
            ),
            "p50_last_points_ms": dg.MetadataValue.md(
                _last_points(json.loads(p50_row["series_json"]))
            ),
            "history_points": verdicts[0]["history_points"],
        },
    )
    yield dg.AssetCheckResult(
        check_name="no_performance_regression",
        passed=not regressions,
        metadata={
            "regressions": dg.MetadataValue.md(
                _verdict_table(regressions) if regressions else "none"
            ),
            "verdicts": dg.MetadataValue.json(
                {v["metric"]: v["verdict"] for v in gated.to_pylist()}
            ),
            **_gate_metadata(gate),
        },
    )


def _gate(lake, session_id: str) -> dict | None:
    """What changed, for a regression: the CI gate's verdict against the model's pinned
    baseline or its previous sessions, with the ranked suspects and a recommendation."""
    try:
        return gate_verdict(lake, session_id).to_dict()
    except AacoInputError:
        return None  # no earlier session of this model and target to compare with


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

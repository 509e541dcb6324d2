"""kernel_attribution: where the time went, per ONNX node and op type, and the derived metrics."""

from pathlib import Path

import dagster as dg
import pyarrow.compute as pc

from aaco_pipelines.analysis.metrics.derived import UNITS
from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import session_links
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.report.breakdown_plots import op_breakdown
from aaco_pipelines.report.markdown_tables import markdown_table, ms, num, pct
from aaco_pipelines.report.plot_canvas import markdown_image
from aaco_pipelines.report.units import by_unit, duration
from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource
from aaco_pipelines.stages.attribute import Attribution, attribute

CHECKS = [
    dg.AssetCheckSpec(
        "kernel_events_present",
        asset="kernel_attribution",
        blocking=True,
        description="The session has kernel events in every profiled iteration.",
    ),
    dg.AssetCheckSpec(
        "kernel_time_within_wall",
        asset="kernel_attribution",
        description="No iteration's union of kernel intervals is longer than the iteration.",
    ),
]


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="analysis",
    kinds={"duckdb"},
    pool=TRACELAKE_WRITER_POOL,
    check_specs=CHECKS,
    description="Maps every kernel to the ONNX node(s) it executes (fused kernels split by FLOP "
    "share, unmatched kernels reported), breaks time down per node and op type, and derives "
    "launch tax, device active ratio, kernel amplification, fragmentation and microkernel share.",
)
def kernel_attribution(
    context: dg.AssetExecutionContext,
    tracelake_session: dict,
    tracelake: TraceLakeResource,
    registry: ModelRegistryResource,
):
    attribution = attribute(tracelake.lake, SessionBundle(Path(tracelake_session["bundle_path"])))
    metrics = attribution.metrics
    metadata = _metadata(attribution, registry.paths.home)
    yield dg.Output({**tracelake_session, "metrics": metrics}, metadata=metadata)
    yield dg.AssetCheckResult(
        check_name="kernel_events_present",
        passed=metrics["wall_ns_per_iteration"] > 0 and metrics["busy_ns_per_iteration"] > 0,
        # a model's own magnitude: text (assets/session_page.py)
        metadata={"busy_per_iteration": duration(metrics["busy_ns_per_iteration"])},
    )
    yield dg.AssetCheckResult(
        check_name="kernel_time_within_wall",
        passed=metrics["max_busy_over_wall"] <= 1.001,
        metadata={"max_busy_over_wall": metrics["max_busy_over_wall"]},
    )


def _metadata(attribution: Attribution, home) -> dict:
    metrics, unmatched = attribution.metrics, attribution.unmatched
    mapping, breakdown = attribution.tables["node_attribution"], attribution.tables["op_breakdown"]
    unmatched_share = float(pc.sum(unmatched["share"]).as_py() or 0.0)
    return {
        "session_id": attribution.session_id,
        "time_per_op_plot": dg.MetadataValue.md(
            markdown_image(
                op_breakdown(breakdown.filter(pc.equal(breakdown["level"], "node"))),
                "time per op",
            )
        ),
        **session_links(home, attribution.session_id),
        "top_ops": dg.MetadataValue.md(_top_table(breakdown, "node", 10)),
        "top_op_types": dg.MetadataValue.md(_top_table(breakdown, "op_type", 8)),
        "derived_metrics": dg.MetadataValue.md(_metrics_table(metrics)),
        "attribution_methods": dg.MetadataValue.json(
            {row["values"]: row["counts"] for row in pc.value_counts(mapping["method"]).to_pylist()}
        ),
        "unmatched_kernels": dg.MetadataValue.md(_top_table(unmatched, "node", 10)),
        "unmatched_time_share": by_unit(unmatched_share, "fraction"),
        # text with its unit, not a number Dagster would chart across models
        **{name: by_unit(value, UNITS[name]) for name, value in metrics.items()},
    }


def _top_table(breakdown, level: str, limit: int) -> str:
    """The top nodes (with their op type) or op types by median time, in six columns at most:
    the means and P(top 3) are in the HTML report."""
    rows = breakdown.filter(pc.equal(breakdown["level"], level)).sort_by(
        [("p50_ns", "descending"), ("mean_ns", "descending")]
    )  # ranked by median: one preempted iteration reorders nothing
    named = (
        [("name", "node", None), ("op_type", "op", None)]
        if level == "node"
        else [("name", "op type", None)]
    )
    return markdown_table(
        rows.slice(0, limit).to_pylist(),
        [
            *named,
            ("p50_ns", "p50 ms", ms),
            ("share", "share", pct),
            ("p_top", "P(first)", pct),  # of bootstrap resamples of the profiled iterations
            ("kernels_per_iteration", "kernels/iter", num),
        ],
    )


def _metrics_table(metrics: dict) -> str:
    rows = [{"metric": k, "value": v, "unit": UNITS[k]} for k, v in metrics.items()]
    return markdown_table(
        rows, [("metric", "metric", None), ("value", "value", num), ("unit", "unit", None)]
    )

"""kernel_attribution: where the time went, per ONNX node and op type, and the derived metrics."""

from pathlib import Path

import dagster as dg
import pyarrow.compute as pc

from aaco_pipelines.analysis.metrics.derived import UNITS
from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import session_page
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
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
    lake = tracelake.lake
    attribution = attribute(lake, SessionBundle(Path(tracelake_session["bundle_path"])))
    metrics = attribution.metrics
    page = session_page(
        registry.paths.home,
        lake,
        attribution.session_id,
        sections=("time", "derived-metrics"),
        plots=("op-breakdown",),
    )
    yield dg.Output(
        {**tracelake_session, "metrics": metrics}, metadata={**page, **_figures(attribution)}
    )
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


def _figures(attribution: Attribution) -> dict:
    """How the kernels were mapped, and each derived metric as text with its unit (not a
    number Dagster would chart across models)."""
    mapping = attribution.tables["node_attribution"]
    return {
        "attribution_methods": dg.MetadataValue.json(
            {row["values"]: row["counts"] for row in pc.value_counts(mapping["method"]).to_pylist()}
        ),
        **{name: by_unit(value, UNITS[name]) for name, value in attribution.metrics.items()},
    }

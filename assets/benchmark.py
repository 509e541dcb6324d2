"""benchmark_run: one isolated, measured session of the model: the raw evidence bundle."""

import dagster as dg

from aaco_pipelines.assets.partitions import model_and_target, model_target_partitions
from aaco_pipelines.assets.session_page import as_text, early_summary, session_links
from aaco_pipelines.config import device_pool
from aaco_pipelines.graph.store import ModelVersion
from aaco_pipelines.resources import BenchmarkRunnerResource, ModelRegistryResource
from aaco_pipelines.stages.measure import MeasuredSession, check_target, measure


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="measurement",
    kinds={"onnxruntime"},
    pool=device_pool(),  # one benchmark per device at a time
    description="Runs the model in an isolated measuring process: warm-up, measured iterations "
    "with profiling off, then a separate profiled pass; host telemetry sampled throughout. Writes "
    "an immutable session bundle (raw profile, latencies, telemetry, environment).",
)
def benchmark_run(
    context: dg.AssetExecutionContext,
    onnx_graph: dict,
    registry: ModelRegistryResource,
    runner: BenchmarkRunnerResource,
) -> dict:
    options = runner.options()
    check_target(model_and_target(context.partition_key)[1], options)
    measured = measure(
        ModelVersion.from_record(onnx_graph), registry.paths, options, context.log.info
    )
    context.add_output_metadata(_metadata(measured, registry.paths.home))
    return {"session_id": measured.bundle.session_id, "bundle_path": str(measured.bundle.path)}


def _metadata(measured: MeasuredSession, home) -> dict:
    bundle, figures = measured.bundle, measured.figures
    session = bundle.session
    metadata = {
        "summary": early_summary(
            f"Measured: p50 {figures['latency_p50_ns'] / 1e6:.4g} ms, p99 "
            f"{figures['latency_p99_ns'] / 1e6:.4g} ms over {measured.requests} iterations."
        ),
        "session_id": bundle.session_id,
        **session_links(home, bundle.session_id),
        "bundle": dg.MetadataValue.path(str(bundle.path)),
        "providers_used": ", ".join(session["providers_used"]),
        "latency_p50_ms": round(figures["latency_p50_ns"] / 1e6, 4),
        "latency_p99_ms": round(figures["latency_p99_ns"] / 1e6, 4),
        "latency_mean_ms": round(figures["latency_mean_ns"] / 1e6, 4),
        "throughput_per_s": round(figures["throughput_per_s"], 2),
        "profiling_overhead_pct": round(figures["profiling_overhead_pct"], 2),
        "measured_iterations": measured.requests,
        "worker_peak_rss_mib": round(session["worker_peak_rss_bytes"] / 2**20, 1),
        "worker_wall_s": session["worker_wall_s"],
        "laboratory": bool(bundle.request["laboratory"]),
    }
    if measured.generation:
        # The measured pass is the headline scenario's requests, end to end; throughput and
        # profiling overhead mean something else for them (tracelake_session shows the figures).
        for key in ("throughput_per_s", "profiling_overhead_pct", "measured_iterations"):
            metadata.pop(key)
        metadata["requests"] = measured.requests
        metadata["scenarios"] = ", ".join(measured.generation["workload"]["scenarios"])
    return as_text(metadata)

"""benchmark_run: one isolated, measured session of the model: the raw evidence bundle."""

import dagster as dg
import numpy as np

from aaco_pipelines.collectors.bundle_tables import measured_latency_figures
from aaco_pipelines.config import device_pool
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.graph.store import ModelVersion
from aaco_pipelines.pipeline import benchmark_version
from assets.partitions import model_and_target, model_target_partitions
from resources import BenchmarkRunnerResource, ModelRegistryResource


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="ingest",
    kinds={"onnxruntime"},
    pool=device_pool(),  # one benchmark per device at a time
    description="Runs the model in an isolated worker process: warm-up, measured iterations with "
    "profiling off, then a separate profiled pass; host telemetry sampled throughout. Writes an "
    "immutable session bundle (raw profile, latencies, telemetry, environment).",
)
def benchmark_run(
    context: dg.AssetExecutionContext,
    onnx_graph: dict,
    registry: ModelRegistryResource,
    runner: BenchmarkRunnerResource,
) -> dict:
    _slug, target = model_and_target(context.partition_key)
    if target != runner.target:
        raise AacoInputError(
            f"this run is for target {target}, and this process measures on {runner.target} "
            "(AACO_TARGET): it would record another device's numbers as this one's",
            fix=f"let the host that owns {target} measure it: 'aaco worker --target {target}' "
            "there, with runs routed (README, 'Scaling out')",
        )
    version = ModelVersion.from_record(onnx_graph)
    bundle = benchmark_version(
        version, registry.paths, runner.options(), on_progress=context.log.info
    )
    session, latencies = bundle.session, bundle.read_json("latencies.json")
    summary = measured_latency_figures(
        np.asarray(latencies["measured"]["latency_ns"], dtype=np.float64),
        np.asarray(latencies["profiled"]["latency_ns"], dtype=np.float64),
    )
    metadata = {
        "session_id": bundle.session_id,
        "bundle": dg.MetadataValue.path(str(bundle.path)),
        "providers_used": ", ".join(session["providers_used"]),
        "latency_p50_ms": round(summary["latency_p50_ns"] / 1e6, 4),
        "latency_p99_ms": round(summary["latency_p99_ns"] / 1e6, 4),
        "latency_mean_ms": round(summary["latency_mean_ns"] / 1e6, 4),
        "throughput_per_s": round(summary["throughput_per_s"], 2),
        "profiling_overhead_pct": round(summary["profiling_overhead_pct"], 2),
        "measured_iterations": len(latencies["measured"]["latency_ns"]),
        "worker_peak_rss_mib": round(session["worker_peak_rss_bytes"] / 2**20, 1),
        "worker_wall_s": session["worker_wall_s"],
        "laboratory": bool(bundle.request["laboratory"]),
    }
    generation = bundle.request.get("generation")
    if generation:
        # The measured pass is the headline scenario's requests, end to end; throughput and
        # profiling overhead mean something else for them (tracelake_session shows the figures).
        for key in ("throughput_per_s", "profiling_overhead_pct", "measured_iterations"):
            metadata.pop(key)
        metadata["requests"] = len(latencies["measured"]["latency_ns"])
        metadata["scenarios"] = ", ".join(generation["workload"]["scenarios"])
    context.add_output_metadata(metadata)
    return {"session_id": bundle.session_id, "bundle_path": str(bundle.path)}

"""collected_traces: the session's raw evidence parsed into normalized TraceLake tables."""

from pathlib import Path

import dagster as dg

from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import as_text, early_summary, session_links
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.resources import ModelRegistryResource
from aaco_pipelines.stages.collect import collect


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="measurement",
    kinds={"parquet"},
    description="Parses the session's ONNX Runtime profile, latencies and host telemetry into "
    "Arrow tables of the TraceLake schema, written as Parquet into the bundle's tables/ folder.",
)
def collected_traces(
    context: dg.AssetExecutionContext, benchmark_run: dict, registry: ModelRegistryResource
) -> dict:
    bundle = SessionBundle(Path(benchmark_run["bundle_path"]))
    collected = collect(bundle)
    context.add_output_metadata(
        as_text(
            {
                "summary": early_summary(
                    f"Collected {collected.node_events} node events and "
                    f"{collected.device_kernels} device kernels ({bundle.session['trace_source']})."
                ),
                "session_id": bundle.session_id,
                **session_links(registry.paths.home, bundle.session_id),
                "tables": dg.MetadataValue.path(str(bundle.tables_dir)),
                "trace_source": bundle.session["trace_source"],
                **{f"rows_{name}": n for name, n in collected.row_counts.items()},
                "node_events": collected.node_events,
                "device_kernels": collected.device_kernels,
                "distinct_ops": collected.distinct_ops,
            }
        )
    )
    return {**benchmark_run, "row_counts": collected.row_counts}

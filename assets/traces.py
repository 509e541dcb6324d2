"""collected_traces: the session's raw evidence parsed into normalized TraceLake tables."""

from pathlib import Path

import dagster as dg

from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.pipeline import collect_bundle
from aaco_pipelines.tracelake import engine
from assets.partitions import model_target_partitions


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="ingest",
    kinds={"parquet"},
    description="Parses the session's ONNX Runtime profile, latencies and host telemetry into "
    "Arrow tables of the TraceLake schema, written as Parquet into the bundle's tables/ folder.",
)
def collected_traces(context: dg.AssetExecutionContext, benchmark_run: dict) -> dict:
    bundle = SessionBundle(Path(benchmark_run["bundle_path"]))
    counts = collect_bundle(bundle)
    context.add_output_metadata(
        {
            "session_id": bundle.session_id,
            "tables": dg.MetadataValue.path(str(bundle.tables_dir)),
            "trace_source": bundle.session["trace_source"],
            **{f"rows_{name}": n for name, n in counts.items()},
            **event_counts(bundle.table_path("kernel_events")),
        }
    )
    return {**benchmark_run, "row_counts": counts}


def event_counts(kernel_events: Path) -> dict:
    """Host node events, device kernels and distinct ops, counted by DuckDB from the Parquet."""
    with engine.connect() as con:
        row = con.sql(
            "SELECT count(*) FILTER (WHERE category = 'Node') AS node_events, "
            "count(*) FILTER (WHERE category = 'Kernel') AS device_kernels, "
            "count(DISTINCT op_type) AS distinct_ops FROM read_parquet($file)",
            params={"file": str(kernel_events)},
        ).fetchall()[0]
    return dict(zip(("node_events", "device_kernels", "distinct_ops"), row, strict=True))

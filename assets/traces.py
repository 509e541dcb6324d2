"""collected_traces: the session's raw evidence parsed into normalized TraceLake tables."""

from pathlib import Path

import dagster as dg
import pyarrow.compute as pc

from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.pipeline import collect_bundle
from assets.partitions import models_partitions


@dg.asset(
    partitions_def=models_partitions,
    group_name="ingest",
    kinds={"parquet"},
    description="Parses the session's ONNX Runtime profile, latencies and host telemetry into "
    "Arrow tables of the TraceLake schema, written as Parquet into the bundle's tables/ folder.",
)
def collected_traces(context: dg.AssetExecutionContext, benchmark_run: dict) -> dict:
    bundle = SessionBundle(Path(benchmark_run["bundle_path"]))
    counts = collect_bundle(bundle)
    events = bundle.read_table("kernel_events")
    node_events = events.filter(pc.equal(events["category"], "Node"))
    context.add_output_metadata(
        {
            "session_id": bundle.session_id,
            "tables": dg.MetadataValue.path(str(bundle.tables_dir)),
            **{f"rows_{name}": n for name, n in counts.items()},
            "node_events": node_events.num_rows,
            "distinct_ops": pc.count_distinct(node_events["op_type"]).as_py(),
        }
    )
    return {**benchmark_run, "row_counts": counts}

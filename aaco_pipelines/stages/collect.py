"""Collect (collected_traces): the bundle's raw evidence parsed into its TraceLake tables.

ONNX Runtime's profile, latencies, host (and GPU) telemetry and, for an LLM session, its
requests and steps, written as Parquet into the bundle's tables/ (collectors.bundle_tables).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.parquet as pq

from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.collectors.bundle_tables import collect_session
from aaco_pipelines.session_folders import session_folder_held


@dataclass(frozen=True)
class CollectedTables:
    row_counts: dict[str, int]  # rows per table written
    node_events: int  # ONNX Runtime's host node events
    device_kernels: int  # kernels the device ran (GPU providers)
    distinct_ops: int


def collect(bundle: SessionBundle) -> CollectedTables:
    """Write the session's tables into its bundle; what was written."""
    with session_folder_held(bundle.path, bundle.session_id):
        counts = collect_session(bundle)
    # Counted from the Parquet's two columns by Arrow (an in-memory DuckDB here cost a 20-40 ms
    # open a run).
    table = pq.read_table(bundle.table_path("kernel_events"), columns=["category", "op_type"])
    category = table["category"]
    return CollectedTables(
        row_counts=counts,
        node_events=pc.sum(pc.equal(category, "Node")).as_py() or 0,
        device_kernels=pc.sum(pc.equal(category, "Kernel")).as_py() or 0,
        distinct_ops=pc.count_distinct(table["op_type"]).as_py(),
    )

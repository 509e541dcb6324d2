"""Collect (collected_traces): the bundle's raw evidence parsed into its TraceLake tables.

ONNX Runtime's profile, latencies, host (and GPU) telemetry and, for an LLM session, its
requests and steps, written as Parquet into the bundle's tables/ (collectors.bundle_tables).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.collectors.bundle_tables import collect_session
from aaco_pipelines.execution.session_folders import session_folder_held


@dataclass(frozen=True)
class CollectedTables:
    row_counts: dict[str, int]  # rows per table written
    node_events: int  # ONNX Runtime's host node events
    device_kernels: int  # kernels the device ran (GPU providers)
    distinct_ops: int


def collect(bundle: SessionBundle) -> CollectedTables:
    """Write the session's tables into its bundle; what was written."""
    with session_folder_held(bundle.path, bundle.session_id):
        tables = collect_session(bundle)
    events = tables["kernel_events"]  # counted in memory by Arrow, as written
    category = events["category"]
    return CollectedTables(
        row_counts={name: table.num_rows for name, table in tables.items()},
        node_events=pc.sum(pc.equal(category, "Node")).as_py() or 0,
        device_kernels=pc.sum(pc.equal(category, "Kernel")).as_py() or 0,
        distinct_ops=pc.count_distinct(events["op_type"]).as_py(),
    )

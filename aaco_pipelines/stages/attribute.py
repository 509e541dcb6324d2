"""Attribute (kernel_attribution): where a session's kernel time went.

Every kernel mapped to the ONNX node(s) it executes (fused kernels split by FLOP share,
unmatched kernels reported), time broken down per node and op type with how stable each one's
rank is over the profiled iterations, and the derived metrics (launch tax, device active ratio,
kernel amplification, fragmentation, microkernel share, the top op's stability).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from aaco_pipelines.analysis.attribution.session import attribute_session
from aaco_pipelines.analysis.metrics.derived import session_metrics
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.execution.session_folders import session_folder_held
from aaco_pipelines.tracelake.store import TraceLake


@dataclass(frozen=True)
class Attribution:
    session_id: str
    tables: dict[str, pa.Table]  # node_attribution, op_breakdown, derived_metrics (as stored)
    metrics: dict[str, float]  # derived metric -> value


def attribute(lake: TraceLake, bundle: SessionBundle) -> Attribution:
    """Attribute the session's kernels to ONNX nodes and derive its metrics; stored."""
    with session_folder_held(bundle.path, bundle.session_id), lake.reading():
        tables = attribute_session(lake, bundle.session_id, bundle.optimized_model())
        kernels, ranking = tables.pop("kernels"), tables.pop("ranking")
        tables["derived_metrics"] = session_metrics(lake, bundle.session_id, kernels, ranking)
        lake.replace_session_rows(bundle.session_id, tables)
    derived = tables["derived_metrics"]
    metrics = dict(zip(derived["metric"].to_pylist(), derived["value"].to_pylist(), strict=True))
    return Attribution(bundle.session_id, tables, metrics)

"""Critical path (critical_path): which nodes the iteration waits for, and what making one
faster would gain end to end.

Runs after the attribution (it spreads runtime nodes over the ONNX nodes they execute) and
before the diagnosis (whose recommendations rank by the gains found here).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from aaco_pipelines.analysis.critical_path.session_path import critical_path
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.execution.session_folders import session_folder_held
from aaco_pipelines.tracelake.store import TraceLake


@dataclass(frozen=True)
class CriticalPath:
    session_id: str
    summary: dict | None  # the CRITICAL_PATHS row; None: nothing to re-time (no iterations)
    nodes: pa.Table  # CRITICAL_PATH_NODES rows, best 2x gain first


def find_critical_path(lake: TraceLake, bundle: SessionBundle) -> CriticalPath:
    """The session's critical path, slack and 2x gains per node; stored."""
    with session_folder_held(bundle.path, bundle.session_id), lake.reading():
        tables = critical_path(lake, bundle.session_id, bundle.optimized_model())
        lake.replace_session_rows(bundle.session_id, tables)
    rows = tables["critical_paths"].to_pylist()
    return CriticalPath(bundle.session_id, rows[0] if rows else None, tables["critical_path_nodes"])

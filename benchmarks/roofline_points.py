"""Points above their roof: `.venv/bin/python benchmarks/roofline_points.py`.

One bare zoo sweep in a temporary AACO_HOME (its envelope measured on the way), then per model
the share of roofline points whose utilization exceeds 1 under the measured envelope: as the
roofline was before issue 24 (one point per ONNX node, DRAM slope only), with fusion groups and
cache ceilings (before any roof is lifted), and as stored (roofs an op beat lifted: the goal is
0). Prints the lifts the bottleneck reports name. Not a timed test.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path


def above_roof(lake, session_id: str, level: str, envelope) -> tuple[int, int, float]:
    """(points above their roof, points judged, largest utilization) at one op_breakdown level."""
    from aaco_pipelines.analysis.bottleneck.roofline import dtype_roofline, node_dtypes
    from aaco_pipelines.tracelake.queries import ROOFLINE_NODES_SQL

    sql = ROOFLINE_NODES_SQL.split("WHERE o.session_id")[0]
    nodes = lake.query(sql + "WHERE o.session_id = $sid AND o.level = $level",
                       {"sid": session_id, "level": level})  # fmt: skip
    nodes = nodes.append_column("dtype", node_dtypes(nodes))
    nodes = nodes.drop_columns(["graph_op_type", "dtypes", "runtime_ops"])
    judged = [
        u for u in dtype_roofline(nodes, envelope)["utilization"].to_pylist() if u is not None
    ]
    return sum(u > 1 for u in judged), len(judged), max(judged, default=0.0)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import bare_sweep, fresh_paths

    from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
    from aaco_pipelines.tracelake.store import TraceLake

    totals = {"node, DRAM only": [0, 0], "fused, cache ceilings": [0, 0], "stored": [0, 0]}
    with tempfile.TemporaryDirectory(prefix="aaco-roofline-") as tmp:
        paths = fresh_paths(Path(tmp), "home")
        sessions = bare_sweep(paths)
        lake = TraceLake(paths.tracelake)
        [row] = lake.query("SELECT envelope_json FROM hardware_envelopes").to_pylist()
        envelope = HardwareEnvelope.from_dict(json.loads(row["envelope_json"]))
        flat = dataclasses.replace(envelope, cache_bandwidth={})  # the DRAM slope alone
        print(envelope.describe())
        for slug, session_id in sessions.items():
            cells = []
            for name, level, roofs in (
                ("node, DRAM only", "node", flat),
                ("fused, cache ceilings", "fused", envelope),
            ):
                above, judged, largest = above_roof(lake, session_id, level, roofs)
                totals[name][0] += above
                totals[name][1] += judged
                cells.append(f"{name}: {above}/{judged} (max {largest:.2f}x)")
            stored = lake.query(
                "SELECT utilization FROM roofline_points WHERE session_id = ? "
                "AND utilization IS NOT NULL",
                [session_id],
            )["utilization"].to_pylist()
            totals["stored"][0] += sum(u > 1 + 1e-9 for u in stored)
            totals["stored"][1] += len(stored)
            note = (
                lake.query(
                    "SELECT envelope_note FROM bottleneck_reports WHERE session_id = ?",
                    [session_id],
                )["envelope_note"][0].as_py()
                or ""
            )
            lifts = note.split("busier): ")[1] if "busier): " in note else "none"
            print(f"{slug:14} " + "; ".join(cells) + f"; lifted: {lifts}")
    print("totals (above / judged): " + ", ".join(f"{k} {a}/{n}" for k, (a, n) in totals.items()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())

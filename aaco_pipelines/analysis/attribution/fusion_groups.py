"""Fusion groups: the graph nodes ONNX Runtime ran as one, placed on the roofline as one point.

Attribution splits a fused kernel's time across the original nodes it covers (by FLOP share), so
that op shares add up. On the roofline that split is wrong: a Relu absorbed into its Conv gets a
~190 ns slice of the Conv's time but keeps its own input and output bytes, and sits 70-150x
above the DRAM slope; the bytes between fused nodes never leave the core. A fusion group is one
point with the group's FLOPs, the bytes that cross its boundary and the time of every runtime
node that serves it (the fused kernel, its layout helpers, its copies).

Groups are the connected parts of the runtime-node <-> original-node mapping (scipy's
connected_components): a runtime node joins the originals it covers, and an original served by
two runtime nodes joins them. The group is named after its anchor (the member with the most
FLOPs, then the one the runtime node was named after) and typed by its members' op types in
graph order ("Conv+Relu"). Its FLOPs are the members' (unknown when any member's is); its bytes are the
members' (the cost model's, which knows a Gather reads rows, not the table) less what stays
inside: every read of a tensor a member produced, and the write of a tensor no node outside the
group and no graph output reads.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ANCHOR_METHODS = ("exact_name", "fused_anchor", "runtime_copy")
GROUPS = pa.schema(
    [("runtime_node", pa.string()), ("group_name", pa.string()), ("group_op_type", pa.string())]
)
MEMBERS = pa.schema([("group_name", pa.string()), ("onnx_node", pa.string())])


def fusion_groups(mapping: pa.Table, graph_nodes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(runtime node -> its group's name and op type, group name -> its original nodes) from a
    NODE_MAPPING table and the model's GRAPH_NODES rows."""
    rows = [
        r
        for r in mapping.select(["runtime_node", "onnx_node", "method"]).to_pylist()
        if r["runtime_node"] is not None and r["onnx_node"] is not None
    ]
    if not rows:
        return GROUPS.empty_table(), MEMBERS.empty_table()
    runtime = list(dict.fromkeys(r["runtime_node"] for r in rows))
    original = list(dict.fromkeys(r["onnx_node"] for r in rows))
    r_index = {name: i for i, name in enumerate(runtime)}
    o_index = {name: len(runtime) + i for i, name in enumerate(original)}
    size = len(runtime) + len(original)
    edges = coo_matrix(
        (
            np.ones(len(rows)),
            ([r_index[r["runtime_node"]] for r in rows], [o_index[r["onnx_node"]] for r in rows]),
        ),
        shape=(size, size),
    )
    _, label = connected_components(edges, directed=False)
    info = {
        r["node_name"]: r
        for r in graph_nodes.select(["node_name", "node_index", "op_type", "flops"]).to_pylist()
    }
    anchors = {r["onnx_node"] for r in rows if r["method"] in ANCHOR_METHODS}
    members: dict[int, list[str]] = {}
    for name in original:
        members.setdefault(label[o_index[name]], []).append(name)
    named = {part: _group_name(names, anchors, info) for part, names in members.items()}
    groups = pa.Table.from_pylist(
        [
            {
                "runtime_node": name,
                "group_name": named[label[i]][0],
                "group_op_type": named[label[i]][1],
            }
            for name, i in r_index.items()
        ],
        schema=GROUPS,
    )
    member_rows = [
        {"group_name": named[part][0], "onnx_node": name}
        for part, names in members.items()
        for name in names
    ]
    return groups, pa.Table.from_pylist(member_rows, schema=MEMBERS)


def _group_name(names: list[str], anchors: set[str], info: dict) -> tuple[str, str]:
    """(anchor's name, member op types in graph order joined by '+')."""
    in_order = sorted(names, key=lambda n: (info.get(n) or {}).get("node_index") or 0)
    anchor = max(
        in_order,
        key=lambda n: ((info.get(n) or {}).get("flops") or 0, n in anchors),
    )
    op_types = dict.fromkeys((info.get(n) or {}).get("op_type") or "?" for n in in_order)
    return anchor, "+".join(op_types)


# One 'fused' op_breakdown row per group (and per unmatched runtime node, as at the node level):
# the group's whole time per iteration, its FLOPs and the bytes crossing its boundary.
FUSED_SQL = """
WITH attributed AS (
    SELECT k.iteration,
           coalesce(g.group_name, '(unmatched) ' || coalesce(k.node_name, k.kernel_name)) AS name,
           coalesce(g.group_op_type, k.kernel_family, 'unmatched') AS op_type,
           k.duration_ns AS ns
    FROM {kernels} k LEFT JOIN groups g ON g.runtime_node = k.node_name
),
iterations AS (SELECT DISTINCT iteration FROM {kernels}),
per_group AS (SELECT name, op_type, iteration, sum(ns) AS ns, count(*) AS n FROM attributed GROUP BY ALL),
grid AS (
    SELECT names.name, names.op_type, it.iteration, coalesce(p.ns, 0) AS ns, coalesce(p.n, 0) AS n
    FROM (SELECT DISTINCT name, op_type FROM per_group) names CROSS JOIN iterations it
    LEFT JOIN per_group p ON p.name = names.name AND p.iteration = it.iteration
),
total AS (SELECT nullif(sum(ns), 0) AS ns FROM grid),
nodes AS (SELECT node_name, flops, bytes_moved FROM graph_nodes WHERE model_sha256 = $sha),
edges AS (SELECT tensor_name, src_node, dst_node, bytes FROM graph_edges WHERE model_sha256 = $sha),
cost AS (
    SELECT m.group_name AS name,
           CASE WHEN count(n.flops) = count(*) THEN sum(n.flops) END AS flops,
           CASE WHEN count(n.bytes_moved) = count(*) THEN sum(n.bytes_moved) END AS bytes_moved
    FROM members m LEFT JOIN nodes n ON n.node_name = m.onnx_node GROUP BY 1
),
internal_reads AS (  -- a member reading what a member wrote: it never left the group
    SELECT src.group_name AS name, sum(e.bytes) AS bytes
    FROM edges e
    JOIN members src ON src.onnx_node = e.src_node
    JOIN members dst ON dst.onnx_node = e.dst_node AND dst.group_name = src.group_name
    GROUP BY 1
),
tensor_readers AS (
    SELECT src.group_name AS name, e.tensor_name, any_value(e.bytes) AS bytes,
           bool_and(e.dst_node IS NOT NULL AND dst.onnx_node IS NOT NULL) AS inside
    FROM edges e
    JOIN members src ON src.onnx_node = e.src_node
    LEFT JOIN members dst ON dst.onnx_node = e.dst_node AND dst.group_name = src.group_name
    GROUP BY 1, 2
),
internal_writes AS (  -- written and read only inside the group: never written out
    SELECT name, sum(bytes) AS bytes FROM tensor_readers WHERE inside GROUP BY 1
),
per_name AS (
    SELECT name, op_type, avg(ns) AS mean_ns, median(ns) AS p50_ns, sum(ns) AS sum_ns,
           avg(n) AS kernels_per_iteration
    FROM grid GROUP BY name, op_type
),
medians AS (SELECT nullif(sum(p50_ns), 0) AS ns FROM per_name)
SELECT $sid AS session_id, 'fused' AS level, g.name, g.op_type, g.mean_ns, g.p50_ns,
       g.p50_ns / medians.ns AS share, g.kernels_per_iteration, c.flops,
       (c.bytes_moved - coalesce(r.bytes, 0) - coalesce(w.bytes, 0))::BIGINT AS bytes_moved,
       g.sum_ns / total.ns AS mean_share
FROM per_name g CROSS JOIN total CROSS JOIN medians
LEFT JOIN cost c ON c.name = g.name
LEFT JOIN internal_reads r ON r.name = g.name
LEFT JOIN internal_writes w ON w.name = g.name
ORDER BY p50_ns DESC, mean_ns DESC
"""

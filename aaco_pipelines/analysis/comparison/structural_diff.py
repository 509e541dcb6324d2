"""Structural diff: what two sessions of one model ran differently, original node by node.

A new ONNX Runtime, other provider options, another optimisation level or a re-exported model
changes the graph the runtime compiles: a LayerNorm that ran as one LayerNormalization kernel
may run as nine elementwise nodes. `aaco diff` compares latencies and kernel names; this module
aligns the two sessions through the chain every analysed session stores (original ONNX node ->
runtime nodes -> kernels), by the original node's name, and reports the fusions lost, gained,
reshaped or retyped, the kernel counts that changed, the kernels only one side ran, and each
node's time with a bootstrap CI of the difference.

Entry point: `structural_diff` (its records: structure_records.StructuralDiff).

Concepts: docs/concepts/structural-diff.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from os.path import commonprefix

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from aaco_pipelines.analysis.attribution.fusion_groups import fusion_groups
from aaco_pipelines.analysis.attribution.ranking_stability import (
    MIN_ITERATIONS,
    RESAMPLES,
    per_iteration_times,
    resampled_medians,
)
from aaco_pipelines.analysis.attribution.session import PER_ITERATION_SQL, session_kernels
from aaco_pipelines.analysis.comparison.structure_records import (
    FusionChange,
    FusionTotal,
    KernelPresence,
    NodeTime,
    StructuralDiff,
)
from aaco_pipelines.analysis.metrics.derived import kernel_source
from aaco_pipelines.errors import AacoInputError

CONFIDENCE = 0.95
# Least change of a node's kernels per iteration to report: half a kernel, as root cause's
# kernel_count suspects (RootCauseParams.min_kernel_count_change).
MIN_KERNEL_CHANGE = 0.5
SCOPE_SEPARATOR = "/"

SESSIONS_SQL = """
SELECT s.session_id, s.model_slug, s.model_sha256,
       (SELECT count(*) FROM node_attribution n WHERE n.session_id = s.session_id) AS attributed
FROM sessions s WHERE s.session_id IN (SELECT unnest($ids))
"""
# Each runtime node's kernels, by kernel: its name on a GPU, its runtime op type on the CPU
# provider (whose profile names no kernel).
RUNTIME_KERNELS_SQL = """
WITH ops AS (
    SELECT runtime_node, any_value(runtime_op_type) AS op_type FROM mapping
    WHERE runtime_node IS NOT NULL GROUP BY runtime_node
)
SELECT k.node_name AS runtime_node,
       coalesce(k.kernel_name, o.op_type, k.node_name, 'unknown') AS kernel,
       count(*) AS kernels, sum(k.duration_ns)::DOUBLE AS ns
FROM {kernels} k LEFT JOIN ops o ON o.runtime_node = k.node_name
GROUP BY ALL
"""
# Each original node's fusion group with the runtime op that executes it (the group's runtime
# node covering most originals, its own rather than a layout helper or a copy), its runtime
# nodes and their kernels per iteration.
PLACEMENT_SQL = """
WITH runtime AS (
    SELECT runtime_node, any_value(runtime_op_type) AS op_type,
           count(DISTINCT onnx_node) AS originals,
           bool_or(method NOT IN ('inserted_helper', 'runtime_copy')) AS own
    FROM mapping WHERE runtime_node IS NOT NULL AND onnx_node IS NOT NULL GROUP BY runtime_node
),
launched AS (SELECT runtime_node, sum(kernels) AS kernels FROM runtime_kernels GROUP BY ALL),
per_group AS (
    SELECT g.group_name, arg_max(r.op_type, r.own::INT * 1000000 + r.originals) AS fused_op,
           list(g.runtime_node ORDER BY g.runtime_node) AS runtime_nodes,
           coalesce(sum(l.kernels), 0) / $iterations AS kernels_per_iteration
    FROM groups g JOIN runtime r USING (runtime_node)
    LEFT JOIN launched l USING (runtime_node)
    GROUP BY g.group_name
)
SELECT m.onnx_node, m.group_name, p.fused_op, p.runtime_nodes, p.kernels_per_iteration
FROM members m JOIN per_group p USING (group_name)
"""


@dataclass(frozen=True)
class _Side:
    """One session as the diff reads it."""

    session_id: str
    model_sha256: str | None
    graph: dict[str, int]  # original node -> its index in the graph (order for listings)
    names: list[str]  # columns of `times`
    times: np.ndarray  # profiled iterations x names: attributed ns
    node_kernels: dict[str, float]  # name -> kernels per iteration
    op_types: dict[str, str]  # name -> op type
    placement: dict[str, dict]  # original node -> its fusion group's PLACEMENT_SQL row
    runtime_kernels: pa.Table  # RUNTIME_KERNELS_SQL

    @property
    def iterations(self) -> int:
        return int(self.times.shape[0])


def structural_diff(
    lake, session_a: str, session_b: str, resamples: int = RESAMPLES, seed: int = 0
) -> StructuralDiff:
    """The structural diff of two analysed sessions of one model (A before, B after)."""
    with lake.reading():
        rows = _sessions(lake, session_a, session_b)
        a, b = (_side(lake, rows[s]) for s in (session_a, session_b))
    common = a.graph.keys() & b.graph.keys()
    changes = _fusion_changes(a, b, common)
    names = list(dict.fromkeys([*a.names, *b.names]))
    units = [[n] for n in names] + [c["members"] for c in changes]
    totals = _totals(changes)
    units += [sorted({m for i in t["changes"] for m in changes[i]["members"]}) for t in totals]
    stats = _unit_stats(a, b, units, resamples, seed)

    nodes = [_node_time(name, a, b, stats[i]) for i, name in enumerate(names)]
    fusions = [FusionChange(**c, **stats[len(names) + i]) for i, c in enumerate(changes)]
    offset = len(names) + len(changes)
    fusion_totals = [_total(t, fusions, stats[offset + i]) for i, t in enumerate(totals)]
    nodes.sort(key=lambda n: -abs(n.delta_ms))
    fusions.sort(key=lambda f: -abs(f.delta_ms))
    fusion_totals.sort(key=lambda t: -abs(t.delta_ms))
    fused = {m for c in changes for m in c["members"]}  # reported with their fusion change
    return StructuralDiff(
        session_a=session_a,
        session_b=session_b,
        model_slug=rows[session_a]["model_slug"],
        model_sha256_a=a.model_sha256,
        model_sha256_b=b.model_sha256,
        iterations_a=a.iterations,
        iterations_b=b.iterations,
        confidence=CONFIDENCE,
        resamples=resamples,
        fusions=fusions,
        fusion_totals=fusion_totals,
        kernel_count_changes=[n for n in nodes if _kernel_count_changed(n, fused)],
        kernels=_kernel_presence(a, b),
        nodes=nodes,
        only_in_a=sorted(a.graph.keys() - common, key=a.graph.__getitem__),
        only_in_b=sorted(b.graph.keys() - common, key=b.graph.__getitem__),
        critical_paths=_critical_paths(lake, session_a, session_b),
    )


CRITICAL_PATHS_SQL = """
SELECT c.session_id, c.path_p50_ns, c.host_share, c.parallelism,
       (SELECT n.onnx_node FROM critical_path_nodes n WHERE n.session_id = c.session_id
        AND n.gain_2x_ns IS NOT NULL ORDER BY n.gain_2x_ns DESC, n.share DESC LIMIT 1)
           AS fix_first,
       (SELECT max(n.gain_2x_ns) FROM critical_path_nodes n WHERE n.session_id = c.session_id)
           AS fix_first_gain_ns
FROM critical_paths c WHERE c.session_id IN ($a, $b)
"""


def _critical_paths(lake, session_a: str, session_b: str) -> dict[str, dict | None]:
    """Each side's critical path row (None: the session has none stored)."""
    rows = {
        r["session_id"]: r
        for r in lake.query(CRITICAL_PATHS_SQL, {"a": session_a, "b": session_b}).to_pylist()
    }
    return {"a": rows.get(session_a), "b": rows.get(session_b)}


def _kernel_count_changed(node: NodeTime, fused: set[str]) -> bool:
    """An aligned node, outside every fusion change, whose kernels per iteration moved."""
    moved = abs(node.kernels_b - node.kernels_a) >= MIN_KERNEL_CHANGE
    return node.in_a and node.in_b and node.node not in fused and moved


# --- reading one side ----------------------------------------------------------------------


def _sessions(lake, session_a: str, session_b: str) -> dict[str, dict]:
    """Both sessions' rows; one line naming the fix when they cannot be compared."""
    found = {
        r["session_id"]: r
        for r in lake.query(SESSIONS_SQL, {"ids": [session_a, session_b]}).to_pylist()
    }
    for sid in (session_a, session_b):
        if sid not in found:
            raise AacoInputError(
                f"no session {sid!r} in the TraceLake",
                path=lake.path,
                fix="pass two session ids of this TraceLake (or latest)",
            )
    slugs = [found[s]["model_slug"] for s in (session_a, session_b)]
    if slugs[0] != slugs[1]:
        raise AacoInputError(
            f"sessions {session_a} and {session_b} are of different models ({slugs[0]} and "
            f"{slugs[1]})",
            fix="compare two sessions of one model: its graphs are aligned by node name",
        )
    for sid in (session_a, session_b):
        if not found[sid]["attributed"]:
            raise AacoInputError(
                f"session {sid} has not been analysed (it has no node attribution)",
                fix="compare analysed sessions: aaco run analyses what it measures, and "
                "aaco ingest the traces it loads",
            )
    return found


def _side(lake, row: dict) -> _Side:
    sid, sha = row["session_id"], row["model_sha256"]
    mapping = lake.query("SELECT * FROM node_attribution WHERE session_id = ?", [sid])
    graph_nodes = lake.query(
        "SELECT node_name, node_index, op_type, flops FROM graph_nodes WHERE model_sha256 = ? "
        "ORDER BY node_index",
        [sha],
    )
    kernels = session_kernels(lake, sid)
    source, tables = kernel_source(kernels)
    params = None if tables else {"sid": sid}  # SQL over the TraceLake names the session
    per_node = lake.query(
        PER_ITERATION_SQL.format(kernels=source), params, tables={"mapping": mapping, **tables}
    )
    if per_node.num_rows == 0:
        raise AacoInputError(
            f"session {sid} has no profiled iterations with kernels to compare",
            fix="measure it with profiled_iterations of 1 or more",
        )
    runtime_kernels = lake.query(
        RUNTIME_KERNELS_SQL.format(kernels=source), params, tables={"mapping": mapping, **tables}
    )
    names, times = per_iteration_times(per_node, "name")
    iterations = times.shape[0]
    groups, members = fusion_groups(mapping, graph_nodes)
    placement = lake.query(
        PLACEMENT_SQL,
        {"iterations": iterations},
        tables={"mapping": mapping, "groups": groups, "members": members,
                "runtime_kernels": runtime_kernels},
    )  # fmt: skip
    counts = per_node.group_by("name").aggregate([("n", "sum"), ("op_type", "max")])
    named = counts["name"].to_pylist()
    per_iteration = pc.divide(counts["n_sum"].cast(pa.float64()), iterations).to_pylist()
    graph = dict.fromkeys(
        [*graph_nodes["node_name"].to_pylist(), *pc.drop_null(mapping["onnx_node"]).to_pylist()]
    )
    return _Side(
        session_id=sid,
        model_sha256=sha,
        graph={name: i for i, name in enumerate(graph)},
        names=names,
        times=times,
        node_kernels=dict(zip(named, per_iteration, strict=True)),
        op_types=dict(zip(named, counts["op_type_max"].to_pylist(), strict=True)),
        placement={r["onnx_node"]: r for r in placement.to_pylist()},
        runtime_kernels=runtime_kernels,
    )


# --- fusion changes ------------------------------------------------------------------------


def _fusion_changes(a: _Side, b: _Side, common: set[str]) -> list[dict]:
    """The fusion changes (FusionChange fields but the times): A's and B's fusion groups joined
    where they share an original node that ran on both sides, each joined part judged on the
    nodes both graphs have."""
    groups = list(
        dict.fromkeys(
            (side, row["group_name"])
            for side, s in (("a", a), ("b", b))
            for row in s.placement.values()
        )
    )
    index = {g: i for i, g in enumerate(groups)}
    linked = [n for n in common if n in a.placement and n in b.placement]
    edges = coo_matrix(
        (
            np.ones(len(linked)),
            (
                [index[("a", a.placement[n]["group_name"])] for n in linked],
                [index[("b", b.placement[n]["group_name"])] for n in linked],
            ),
        ),
        shape=(len(groups), len(groups)),
    )
    _, label = connected_components(edges, directed=False)
    parts: dict[int, list[tuple[str, str]]] = {}
    for group, part in zip(groups, label, strict=True):
        parts.setdefault(int(part), []).append(group)
    members = {"a": _members(a), "b": _members(b)}  # group -> its original nodes, in order
    changes = []
    for part in parts.values():
        change = _judge(part, members, common, a, b)
        if change is not None:
            changes.append(change)
    return changes


def _members(side: _Side) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for node, row in side.placement.items():
        found.setdefault(row["group_name"], []).append(node)
    return {
        g: sorted(nodes, key=lambda n: side.graph.get(n, len(side.graph)))
        for g, nodes in found.items()
    }


def _judge(part, members: dict, common: set[str], a: _Side, b: _Side) -> dict | None:
    """One joined part of A's and B's groups as a fusion change, or None when nothing changed
    on the nodes both graphs have."""
    sides = {"a": a, "b": b}
    fused = {
        side: [g for s, g in part if s == side and len(common.intersection(members[s][g])) >= 2]
        for side in ("a", "b")
    }
    if not fused["a"] and not fused["b"]:
        return None
    shared, ops = {}, {}
    for side in ("a", "b"):
        shared[side] = sorted(sorted(common.intersection(members[side][g])) for g in fused[side])
        ops[side] = sorted(
            sides[side].placement[members[side][g][0]]["fused_op"] for g in fused[side]
        )
    if not fused["b"]:
        change = "lost"
    elif not fused["a"]:
        change = "gained"
    elif shared["a"] != shared["b"]:
        change = "reshaped"
    elif ops["a"] != ops["b"]:
        change = "retyped"
    else:
        return None
    involved = {n for s, g in part for n in members[s][g]} & common
    order = a.graph | {n: len(a.graph) + i for n, i in b.graph.items() if n not in a.graph}
    involved = sorted(involved, key=order.__getitem__)
    main_side = "b" if change == "gained" else "a"
    main = max(fused[main_side], key=lambda g: len(members[main_side][g]))
    return {
        "change": change,
        "fused_a": ops["a"],
        "fused_b": ops["b"],
        "anchor": main,
        "where": scope(involved) or main,
        "members": involved,
        "groups_a": [_group(a, members["a"][g], g) for g in fused["a"]],
        "groups_b": [_group(b, members["b"][g], g) for g in fused["b"]],
        "kernels_a": _kernels(a, {g for s, g in part if s == "a"}),
        "kernels_b": _kernels(b, {g for s, g in part if s == "b"}),
    }


def _group(side: _Side, members: list[str], name: str) -> dict:
    row = side.placement[members[0]]
    return {
        "fused_op": row["fused_op"],
        "anchor": name,
        "members": members,
        "runtime_nodes": row["runtime_nodes"],
    }


def _kernels(side: _Side, groups: set[str]) -> float:
    per_group = {r["group_name"]: r["kernels_per_iteration"] for r in side.placement.values()}
    return float(sum(per_group[g] or 0.0 for g in groups))


def scope(names: list[str]) -> str:
    """The common name scope of nodes: '/encoder/layer.3/LayerNorm' of its Sub, Pow, ...
    ('' when they share none)."""
    if len(names) < 2:
        return ""
    prefix = commonprefix(names)
    if not all(n == prefix or n[len(prefix) :].startswith(SCOPE_SEPARATOR) for n in names):
        prefix = prefix[: prefix.rfind(SCOPE_SEPARATOR) + 1]  # cut back to a whole scope
    return prefix.rstrip(SCOPE_SEPARATOR)


def _totals(changes: list[dict]) -> list[dict]:
    """The changes of each (change, fused op) together."""
    found: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(changes):
        found.setdefault((c["change"], _label(c)), []).append(i)
    return [{"change": k[0], "label": k[1], "changes": v} for k, v in found.items()]


def _label(change: dict) -> str:
    a, b = "+".join(change["fused_a"]), "+".join(change["fused_b"])
    return {"lost": a, "gained": b}.get(change["change"], f"{a} -> {b}")


def _total(total: dict, fusions: list[FusionChange], stats: dict) -> FusionTotal:
    mine = [fusions[i] for i in total["changes"]]
    return FusionTotal(
        change=total["change"],
        label=total["label"],
        count=len(mine),
        where=max(mine, key=lambda f: abs(f.delta_ms)).where,
        kernels_a=sum(f.kernels_a for f in mine),
        kernels_b=sum(f.kernels_b for f in mine),
        **stats,
    )


# --- times ---------------------------------------------------------------------------------


def _unit_stats(
    a: _Side, b: _Side, units: list[list[str]], resamples: int, seed: int
) -> list[dict]:
    """Per unit (a set of node names), both sides' median summed time per profiled iteration,
    in ms, and the CONFIDENCE bootstrap interval of their difference (None below
    MIN_ITERATIONS iterations on either side)."""
    per_side = [_unit_times(side, units) for side in (a, b)]
    medians = [np.median(t, axis=0) for t in per_side]
    delta = medians[1] - medians[0]
    low = high = [None] * len(units)
    if min(a.iterations, b.iterations) >= MIN_ITERATIONS:
        drawn = [resampled_medians(t, resamples, seed + i) for i, t in enumerate(per_side)]
        tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
        low, high = np.percentile(drawn[1] - drawn[0], [tail, 100.0 - tail], axis=0) / 1e6
    return [
        {
            "a_ms": float(ma) / 1e6,
            "b_ms": float(mb) / 1e6,
            "delta_ms": float(d) / 1e6,
            "ci_low_ms": None if lo is None else float(lo),
            "ci_high_ms": None if hi is None else float(hi),
        }
        for ma, mb, d, lo, hi in zip(medians[0], medians[1], delta, low, high, strict=True)
    ]


def _unit_times(side: _Side, units: list[list[str]]) -> np.ndarray:
    """Iterations x units: each unit's summed time, through a sparse names x units matrix."""
    flat = pa.array([n for unit in units for n in unit], pa.string())
    unit_of = np.repeat(np.arange(len(units)), [len(unit) for unit in units])
    column = pc.index_in(flat, value_set=pa.array(side.names, pa.string()))
    found = pc.is_valid(column).to_numpy(zero_copy_only=False)  # a name this side never ran
    rows = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
    matrix = coo_matrix(
        (np.ones(found.sum()), (rows[found], unit_of[found])),
        shape=(len(side.names), len(units)),
    ).tocsr()
    return np.asarray((matrix.T @ side.times.T).T)


def _node_time(name: str, a: _Side, b: _Side, stats: dict) -> NodeTime:
    return NodeTime(
        node=name,
        op_type=a.op_types.get(name) or b.op_types.get(name),
        in_a=name in a.graph or name in a.op_types,
        in_b=name in b.graph or name in b.op_types,
        kernels_a=a.node_kernels.get(name, 0.0),
        kernels_b=b.node_kernels.get(name, 0.0),
        **stats,
    )


def _kernel_presence(a: _Side, b: _Side) -> list[KernelPresence]:
    """Kernels only one side ran, per profiled iteration of that side: appeared, then
    vanished, each by time."""
    per_side = []
    for side in (a, b):
        totals = side.runtime_kernels.group_by("kernel").aggregate(
            [("kernels", "sum"), ("ns", "sum")]
        )
        per_side.append({r["kernel"]: r for r in totals.to_pylist()})
    found = []
    appeared = ("appeared", per_side[1], per_side[0], b)
    vanished = ("vanished", per_side[0], per_side[1], a)
    for change, mine, other, side in (appeared, vanished):
        rows = [
            KernelPresence(
                k, change, r["kernels_sum"] / side.iterations, r["ns_sum"] / side.iterations / 1e6
            )
            for k, r in mine.items()
            if k not in other
        ]
        found += sorted(rows, key=lambda p: -p.ms_per_iteration)
    return found

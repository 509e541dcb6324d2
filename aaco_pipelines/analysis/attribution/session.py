"""A session's attribution, read from and stored in the TraceLake.

Its kernels (`session_kernels`: device kernels, attributed to their launching node through
`gpu_kernels` when they do not name it; else the host node executions), the runtime graph as
its profile names it, that graph mapped to the original nodes (`mapping`), and the time per
node, op type, fusion group and phase (`attribute_session`).
"""

from __future__ import annotations

import onnx
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.attribution.fusion_groups import FUSED_SQL, fusion_groups
from aaco_pipelines.analysis.attribution.gpu_kernels import (
    attribute_gpu_kernels,
    clock_alignment_of,
)
from aaco_pipelines.analysis.attribution.mapping import (
    as_profiled,
    graph_from_nodes,
    map_runtime_nodes,
    original_nodes,
)
from aaco_pipelines.analysis.attribution.ranking_stability import (
    RANKS,
    RankingStability,
    session_ranking,
    stability_metrics,
)
from aaco_pipelines.analysis.metrics.derived import kernel_source
from aaco_pipelines.tracelake.schema import (
    KERNEL_PLACES,
    OP_BREAKDOWN,
    PHASE_BREAKDOWN,
    conform,
    empty_table,
)

# --- Time breakdown of one session ----------------------------------------------------------

# The kernels of a session: device kernels when a GPU profiler traced them, else the host-side
# node executions (on the CPU provider those are the kernels).
KERNEL_COLUMNS = "iteration, node_name, provider, start_ns, duration_ns, kernel_name, kernel_family"
# A control-flow node's profiled time includes the nodes of its subgraph, which the profile also
# lists (on the same thread, inside its span): it keeps only its own time, its span less that of
# the nodes directly inside it (one level deeper), so nothing is counted twice.
CONTROL_FLOW_OPS = ("If", "Loop", "Scan")
HOST_KERNELS_SQL = f"""
WITH nodes AS (
    SELECT {KERNEL_COLUMNS}, thread_id, op_type, row_number() OVER () AS event_id
    FROM kernel_events_with_family
    WHERE session_id = $sid AND iteration >= 0 AND category = 'Node'
),
holders AS (
    SELECT event_id, thread_id, start_ns, start_ns + duration_ns AS end_ns FROM nodes
    WHERE op_type IN {CONTROL_FLOW_OPS}
),
inside AS (
    SELECT h.event_id AS holder_id, n.event_id, n.duration_ns
    FROM holders h JOIN nodes n
      ON n.thread_id = h.thread_id AND n.event_id <> h.event_id
     AND n.start_ns >= h.start_ns AND n.start_ns < h.end_ns
     AND n.start_ns + n.duration_ns <= h.end_ns + 1000  -- the profile's 1 us resolution
),
depth AS (SELECT event_id, count(*) AS depth FROM inside GROUP BY event_id),
nested AS (
    SELECT i.holder_id AS event_id, sum(i.duration_ns) AS ns
    FROM inside i
    LEFT JOIN depth holder_depth ON holder_depth.event_id = i.holder_id
    LEFT JOIN depth child_depth ON child_depth.event_id = i.event_id
    WHERE coalesce(child_depth.depth, 0) = coalesce(holder_depth.depth, 0) + 1
    GROUP BY i.holder_id
)
SELECT {KERNEL_COLUMNS.replace("duration_ns", "greatest(duration_ns - coalesce(nested.ns, 0), 0)::BIGINT AS duration_ns")}
FROM nodes LEFT JOIN nested USING (event_id)
"""
# What places a device kernel on its queue after its launch call (analysis.critical_path.device_chains): its
# queue and stream, its correlation id, and its start on the profiler's clock, which the API
# calls share (`start_ns` of an attributed kernel is moved onto the profile's clock).
DEVICE_COLUMNS = "queue_id, stream_id, correlation_id, start_ns AS trace_start_ns"
DEVICE_KERNELS_SQL = """
SELECT * FROM kernel_events_with_family WHERE session_id = $sid AND category = 'Kernel'
"""
# Device kernels that name their node, or that have no launch evidence to be attributed by:
# taken as stored, read by the breakdown and the metrics in DuckDB (exporting 10^7 kernels to
# Arrow cost 1 s per 2M kernels and held them all in memory).
NAMED_KERNELS_SQL = f"""
SELECT {KERNEL_COLUMNS}, {DEVICE_COLUMNS} FROM kernel_events_with_family
WHERE session_id = $sid AND category = 'Kernel' AND iteration >= 0
"""


def session_kernels(lake, session_id: str) -> pa.Table | str:
    """The session's kernels with the runtime node and iteration each belongs to: an Arrow
    table, or, for kernels taken as stored, SQL over the TraceLake (`$sid` bound by the reader)
    that the breakdown and metrics run in DuckDB.

    Device kernels that do not name their node (rocprofv3) are attributed through their launch
    calls (`gpu_attribution`), and their times moved onto the profile's clock by the estimated
    offset so they compare with the iteration spans; the raw times stay in the TraceLake."""
    params = {"sid": session_id}
    evidence = _kernel_evidence(lake, session_id)
    if evidence["kernels"] == 0:
        return lake.query(HOST_KERNELS_SQL, params)
    if evidence["unnamed"] == 0 or not (evidence["calls"] and evidence["nodes"]):
        return NAMED_KERNELS_SQL  # streamed by the breakdown and metrics, never held whole
    device = lake.query(DEVICE_KERNELS_SQL, params)
    attribution = attribute_gpu_kernels(
        device,
        lake.query("SELECT * FROM api_calls WHERE session_id = $sid", params),
        lake.query(
            "SELECT * FROM kernel_events WHERE session_id = $sid AND category = 'Node'", params
        ),
    )
    offset = clock_alignment_of(attribution).offset_ns
    named = device["node_name"].is_valid()
    kernels = pa.table(
        {
            "iteration": attribution["iteration"],
            "node_name": pc.if_else(
                named, device["node_name"], attribution["runtime_node"].cast(pa.string())
            ),
            "provider": device["provider"],
            "start_ns": pc.if_else(named, device["start_ns"], pc.add(device["start_ns"], offset)),
            "duration_ns": device["duration_ns"],
            "kernel_name": device["kernel_name"],
            "kernel_family": device["kernel_family"],
            "attribution_method": attribution["method"].cast(pa.string()),
            "queue_id": device["queue_id"],
            "stream_id": device["stream_id"],
            "correlation_id": device["correlation_id"],
            "trace_start_ns": device["start_ns"],
        }
    )
    return kernels.filter(pc.fill_null(pc.greater_equal(kernels["iteration"], 0), False))


def _kernel_evidence(lake, session_id: str) -> dict[str, int]:
    """The session's device kernels, how many name no node, and the launch evidence there is
    to attribute those by (API calls, profiled node windows)."""
    return lake.query(
        "SELECT count(*) FILTER (WHERE category = 'Kernel') AS kernels, "
        "count(*) FILTER (WHERE category = 'Kernel' AND node_name IS NULL) AS unnamed, "
        "count(*) FILTER (WHERE category = 'Node') AS nodes, "
        "(SELECT count(*) FROM api_calls WHERE session_id = $sid) AS calls "
        "FROM kernel_events WHERE session_id = $sid",
        {"sid": session_id},
    ).to_pylist()[0]


# Each name's attributed time and kernel count in each profiled iteration it ran in: the one
# pass over the kernels that the breakdown (every level's statistics) and the ranking's
# bootstrap (ranking_stability) both read.
PER_ITERATION_SQL = """
WITH attributed AS (
    SELECT k.iteration,
           coalesce(m.onnx_node, '(unmatched) ' || coalesce(k.node_name, k.kernel_name)) AS name,
           coalesce(m.onnx_op_type, m.runtime_op_type, k.kernel_family, 'unmatched') AS op_type,
           k.duration_ns * coalesce(m.share, 1.0) AS ns
    FROM {kernels} k LEFT JOIN mapping m ON m.runtime_node = k.node_name
)
SELECT name, op_type, iteration, sum(ns) AS ns, count(*) AS n FROM attributed GROUP BY ALL
"""

# Over PER_ITERATION_SQL's rows (per_node) and the ranking's p_top / p_top3 (ranks).
BREAKDOWN_SQL = """
WITH iterations AS (SELECT DISTINCT iteration FROM per_node),
node_grid AS (
    SELECT names.name, names.op_type, it.iteration, coalesce(p.ns, 0) AS ns, coalesce(p.n, 0) AS n
    FROM (SELECT DISTINCT name, op_type FROM per_node) names CROSS JOIN iterations it
    LEFT JOIN per_node p ON p.name = names.name AND p.iteration = it.iteration
),
op_grid AS (SELECT op_type, iteration, sum(ns) AS ns, sum(n) AS n FROM node_grid GROUP BY ALL),
total AS (SELECT nullif(sum(ns), 0) AS ns FROM node_grid),
nodes AS (
    SELECT name, op_type, avg(ns) AS mean_ns, median(ns) AS p50_ns, sum(ns) AS sum_ns,
           avg(n) AS kernels_per_iteration
    FROM node_grid GROUP BY name, op_type
),
ops AS (
    SELECT op_type, avg(ns) AS mean_ns, median(ns) AS p50_ns, sum(ns) AS sum_ns,
           avg(n) AS kernels_per_iteration
    FROM op_grid GROUP BY op_type
),
medians AS (
    SELECT (SELECT nullif(sum(p50_ns), 0) FROM nodes) AS nodes,
           (SELECT nullif(sum(p50_ns), 0) FROM ops) AS ops
)
SELECT $sid AS session_id, 'node' AS level, g.name, g.op_type, g.mean_ns, g.p50_ns,
       g.p50_ns / medians.nodes AS share, g.kernels_per_iteration,
       gn.flops, gn.bytes_moved, g.sum_ns / total.ns AS mean_share, r.p_top, r.p_top3
FROM nodes g CROSS JOIN total CROSS JOIN medians
LEFT JOIN (
    SELECT node_name, any_value(flops) AS flops, any_value(bytes_moved) AS bytes_moved
    FROM graph_nodes WHERE model_sha256 = $sha GROUP BY node_name
) gn ON gn.node_name = g.name
LEFT JOIN ranks r ON r.level = 'node' AND r.name = g.name
UNION ALL
SELECT $sid, 'op_type', g.op_type, g.op_type, g.mean_ns, g.p50_ns, g.p50_ns / medians.ops,
       g.kernels_per_iteration, NULL, NULL, g.sum_ns / total.ns, r.p_top, r.p_top3
FROM ops g CROSS JOIN total CROSS JOIN medians
LEFT JOIN ranks r ON r.level = 'op_type' AND r.name = g.op_type
ORDER BY level, p50_ns DESC, mean_ns DESC
"""


def session_model_sha(lake, session_id: str) -> str | None:
    """The measured model's content hash (None for a trace ingested without its model)."""
    rows = lake.query("SELECT model_sha256 FROM session_records WHERE session_id = ?", [session_id])
    if rows.num_rows == 0:
        raise KeyError(f"session {session_id} is not in the TraceLake")
    return rows["model_sha256"][0].as_py()


def with_profiled_nodes(graph: onnx.GraphProto, lake, session_id: str) -> onnx.GraphProto:
    """The runtime graph as the session's profile names it (see `as_profiled`)."""
    profiled = lake.query(
        "SELECT DISTINCT node_name, op_type FROM kernel_events "
        "WHERE session_id = $sid AND category = 'Node' AND node_name IS NOT NULL",
        {"sid": session_id},
    ).to_pylist()
    return as_profiled(graph, profiled)


def attribute_session(lake, session_id: str, optimized_model: onnx.ModelProto | None) -> dict:
    """The session's node mapping and its time breakdown per node, per op type and per fusion
    group (level 'fused': what the roofline places, fusion_groups.py), each node and op type
    with how often a resample of the iterations ranks it first or among the first three
    (ranking_stability); plus, not stored as they are, its kernels and the node ranking's
    stability (derived metrics)."""
    sha = session_model_sha(lake, session_id)
    graph_nodes = lake.query(
        "SELECT * FROM graph_nodes WHERE model_sha256 = ? ORDER BY node_index", [sha]
    )
    runtime_graph = optimized_model.graph if optimized_model else graph_from_nodes(graph_nodes)
    runtime_graph = with_profiled_nodes(runtime_graph, lake, session_id)
    mapping = map_runtime_nodes(original_nodes(graph_nodes), runtime_graph)
    kernels = session_kernels(lake, session_id)
    places = kernel_places(lake, session_id, kernels)
    breakdown, per_node, stability = time_breakdown(lake.query, session_id, sha, kernels, mapping)
    source, tables = kernel_source(kernels)
    groups, members = fusion_groups(mapping, graph_nodes)
    fused = lake.query(
        FUSED_SQL.format(kernels=source),
        {"sid": session_id, "sha": sha},
        tables={"groups": groups, "members": members, **tables},
    )
    breakdown = pa.concat_tables([conform(breakdown, OP_BREAKDOWN), conform(fused, OP_BREAKDOWN)])
    session_column = pa.array([session_id] * mapping.num_rows, pa.string())
    return {
        "node_attribution": mapping.add_column(0, "session_id", session_column),
        "op_breakdown": breakdown,
        "phase_breakdown": phase_breakdown(lake, session_id, sha, per_node),
        "kernel_places": places,
        "kernels": kernels,  # not stored: the derived metrics are computed from it
        # not stored as such: the node ranking's stability, among the derived metrics
        "ranking": stability_metrics(stability),
    }


PLACES_SQL = """
SELECT kernel_name, node_name, count(*) AS dispatches, sum(duration_ns)::BIGINT AS ns,
       count(DISTINCT iteration) AS iterations
FROM {kernels} WHERE kernel_name IS NOT NULL GROUP BY ALL
"""


def kernel_places(lake, session_id: str, kernels: pa.Table | str | None = None) -> pa.Table:
    """KERNEL_PLACES: each device kernel's dispatches and time per runtime node it was
    attributed to, in the profiled iterations (`kernels`: session_kernels', computed when not
    given). Host node executions name no kernel and make no rows."""
    kernels = session_kernels(lake, session_id) if kernels is None else kernels
    source, tables = kernel_source(kernels)
    places = lake.query(
        PLACES_SQL.format(kernels=source), None if tables else {"sid": session_id}, tables=tables
    )
    column = pa.array([session_id] * places.num_rows, pa.string())
    return conform(places.add_column(0, "session_id", column), KERNEL_PLACES)


def time_breakdown(
    query, session_id: str, sha: str | None, kernels: pa.Table | str, mapping: pa.Table
) -> tuple[pa.Table, pa.Table, RankingStability | None]:
    """Each node's and op type's time per profiled iteration (mean, median, shares) with how
    stable its rank is; the per-iteration rows they came from; the node ranking's stability.
    One pass over the kernels (PER_ITERATION_SQL), then the breakdown and the bootstrap over
    its rows. `query`: TraceLake.query, or a callable of its signature."""
    source, tables = kernel_source(kernels)
    per_node = query(
        PER_ITERATION_SQL.format(kernels=source),
        None if tables else {"sid": session_id},  # SQL over the TraceLake names the session
        tables={"mapping": mapping, **tables},
    )
    ranks, stability = session_ranking(per_node)
    breakdown = query(
        BREAKDOWN_SQL,
        {"sid": session_id, "sha": sha},
        tables={"per_node": per_node, "ranks": ranks},
    )
    return breakdown, per_node, stability


def phase_breakdown(lake, session_id: str, sha: str, per_node: pa.Table) -> pa.Table:
    """A generation session's breakdown per phase: the profiled runs that were prefills, then
    those that were decode steps, each through the same breakdown (mean time per step) of
    their rows of the per-iteration table. Node FLOPs and bytes are the graph's, extracted at
    prefill shapes: a decode step's are left unknown. Empty for a forward-pass session."""
    steps = lake.query(
        "SELECT iteration, phase FROM generation_steps "
        "WHERE session_id = $sid AND run = 'profiled' AND iteration >= 0",
        {"sid": session_id},
    )
    parts = []
    for phase in ("prefill", "decode"):
        iterations = steps.filter(pc.equal(steps["phase"], phase))["iteration"]
        if len(iterations) == 0:
            continue
        wanted = iterations.combine_chunks().cast(per_node.schema.field("iteration").type)
        mine = pc.is_in(per_node["iteration"], value_set=wanted)
        part = lake.query(
            BREAKDOWN_SQL,
            {"sid": session_id, "sha": sha},
            tables={"per_node": per_node.filter(mine), "ranks": RANKS.empty_table()},
        )
        if phase == "decode":  # the graph's costs are a prefill's (its extraction shapes)
            for column in ("flops", "bytes_moved"):
                index = part.schema.get_field_index(column)
                part = part.set_column(index, column, pa.nulls(part.num_rows, pa.int64()))
        parts.append(part.add_column(0, "phase", pa.array([phase] * part.num_rows, pa.string())))
    return (
        conform(pa.concat_tables(parts), PHASE_BREAKDOWN) if parts else empty_table(PHASE_BREAKDOWN)
    )

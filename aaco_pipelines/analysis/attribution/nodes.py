"""Kernel attribution: which ONNX graph node(s) each executed kernel belongs to.

ONNX Runtime runs an optimized graph: it fuses nodes (Conv+BatchNorm+Relu, MatMul+Add,
Erf-GELU → BiasGelu, MatMul+Scale), folds constants, drops no-ops and inserts its own layout
nodes (ReorderInput/ReorderOutput). The profile names the *runtime* node; this module maps every
runtime node back to the original graph nodes it covers, from the optimized model ONNX Runtime
saved for the session:

  exact_name        the runtime node has an original node's name                 confidence 1.0
  fused_anchor      an original node's name is embedded in the runtime name
                    ("fused layer0/fc", "stem/relu_nchwc", ".../MatMulScaleFusion/")  0.9
  fused_absorbed    an original node whose output tensors no longer exist in the
                    optimized graph, joined to the nearest anchor through those
                    vanished tensors (multi-source BFS over the original graph)     0.8
  runtime_copy      a runtime node of the same op as an original node already
                    anchored, named after it (".../DequantizeLinear/duplicated")     0.9
  inserted_helper   a runtime node with no original counterpart (ReorderInput,
                    gemm_input_reshape, a layout Transpose) next to the rewritten node
                    it serves: it takes that node's originals and shares             0.5
  runtime_inserted  a runtime node with no original counterpart and no mapped
                    neighbour (its time is kept and reported as unmatched)         0.0
  eliminated        an original node that no longer runs (folded or removed)       share 0

A runtime node's time is split across the original nodes it covers by their FLOP share from the
cost model; by bytes moved when FLOPs are unknown or zero; equally when both are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import onnx
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.attribution.fusion_groups import FUSED_SQL, fusion_groups
from aaco_pipelines.analysis.attribution.gpu_kernels import (
    attribute_gpu_kernels,
    clock_alignment_of,
)
from aaco_pipelines.analysis.attribution.ranking_stability import (
    RANKS,
    RankingStability,
    session_ranking,
    stability_metrics,
)
from aaco_pipelines.analysis.metrics.derived import kernel_source
from aaco_pipelines.graph.extract import all_nodes, subgraphs
from aaco_pipelines.tracelake.schema import (
    KERNEL_PLACES,
    OP_BREAKDOWN,
    PHASE_BREAKDOWN,
    conform,
    empty_table,
)

CONFIDENCE = {
    "exact_name": 1.0,
    "fused_anchor": 0.9,
    "fused_absorbed": 0.8,
    "runtime_copy": 0.9,
    "inserted_helper": 0.5,
    "runtime_inserted": 0.0,
    "eliminated": 1.0,
}

NODE_MAPPING = pa.schema(
    [
        ("runtime_node", pa.string()),
        ("runtime_op_type", pa.string()),
        ("onnx_node", pa.string()),
        ("onnx_op_type", pa.string()),
        ("method", pa.string()),
        ("confidence", pa.float64()),
        ("share", pa.float64()),
        ("split_rule", pa.string()),
    ]
)

_SEPARATORS = re.compile(r"[ /_:.\-]")


@dataclass(frozen=True)
class OriginalNode:
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: int | None
    bytes_moved: int | None


def original_nodes(graph_nodes: pa.Table) -> list[OriginalNode]:
    """The original graph's nodes from a GRAPH_NODES table (one model)."""
    return [
        OriginalNode(
            r["node_name"],
            r["op_type"],
            tuple(r["inputs"]),
            tuple(r["outputs"]),
            r["flops"],
            r["bytes_moved"],
        )
        for r in graph_nodes.select(
            ["node_name", "op_type", "inputs", "outputs", "flops", "bytes_moved"]
        ).to_pylist()
    ]


def map_runtime_nodes(originals: list[OriginalNode], optimized: onnx.GraphProto) -> pa.Table:
    """One row per (runtime node, original node) pair, plus inserted and eliminated nodes.
    Nodes inside control-flow subgraphs are mapped like top-level ones."""
    optimized = flattened(optimized)
    by_name = {node.name: node for node in originals}
    anchors, methods, copies = _anchors(optimized, by_name)
    owner = _absorb(originals, optimized, anchors)
    groups: dict[str, list[str]] = {}
    for original, runtime in owner.items():
        groups.setdefault(runtime, []).append(original)
    served = _served_nodes(optimized, groups, methods)

    rows = []
    for runtime in optimized.node:
        if runtime.name in copies:
            rows.append(_row(runtime, by_name[copies[runtime.name]], "runtime_copy", 1.0, "copy"))
            continue
        members = groups.get(served.get(runtime.name, runtime.name), [])
        if not members:
            rows.append(_row(runtime, None, "runtime_inserted", 1.0, "unmatched"))
            continue
        shares, rule = _split(by_name[m] for m in members)
        for member, share in zip(members, shares, strict=True):
            if runtime.name in served:
                method = "inserted_helper"
            elif member == anchors.get(runtime.name):
                method = methods[runtime.name]
            else:
                method = "fused_absorbed"
            rows.append(_row(runtime, by_name[member], method, share, rule))
    for node in originals:
        if node.name not in owner:
            rows.append(
                {
                    "runtime_node": None,
                    "runtime_op_type": None,
                    "onnx_node": node.name,
                    "onnx_op_type": node.op_type,
                    "method": "eliminated",
                    "confidence": CONFIDENCE["eliminated"],
                    "share": 0.0,
                    "split_rule": "not executed",
                }
            )
    return pa.Table.from_pylist(rows, schema=NODE_MAPPING)


def flattened(graph: onnx.GraphProto) -> onnx.GraphProto:
    """The graph's nodes and those of its control-flow subgraphs in one graph, without weights
    or attributes: the names, op types and tensor names that mapping needs. Every input, output
    and weight of any level is a graph input, so none of those tensors looks vanished."""
    placed = all_nodes(graph)
    if len(placed) == len(graph.node):
        return graph
    flat = onnx.GraphProto(name=graph.name)
    flat.node.extend(
        onnx.helper.make_node(n.op_type, n.input, n.output, name=n.name, domain=n.domain)
        for n, _ in placed
    )
    levels = [graph, *(g for n, _ in placed for g in subgraphs(n))]
    names = dict.fromkeys(
        t
        for level in levels
        for t in (
            *(v.name for v in level.input),
            *(v.name for v in level.output),
            *(w.name for w in level.initializer),
        )
    )
    flat.input.extend(onnx.helper.make_empty_tensor_value_info(name) for name in names)
    return flat


def _served_nodes(
    optimized: onnx.GraphProto, groups: dict[str, list[str]], methods: dict[str, str]
) -> dict[str, str]:
    """Runtime node with no original counterpart -> the mapped runtime node it works for.

    ONNX Runtime inserts such nodes to adapt data to a node it rewrote: ReorderInput before an
    NCHWc Conv and ReorderOutput after it, gemm_input/output_reshape around a MatMulAddFusion
    Gemm, a Transpose before an NHWC QLinearConv. So among its neighbours in the optimized
    graph the one it serves is a rewritten node (not running under an original name), consumer
    first; else any mapped neighbour. Chains of helpers resolve step by step."""
    producer = {t: n.name for n in optimized.node for t in n.output if t}
    consumers: dict[str, list[str]] = {}
    for node in optimized.node:
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(node.name)
    served: dict[str, str] = {}
    unmapped = [n for n in optimized.node if n.name not in groups]
    changed = True
    while changed:
        changed = False
        for node in unmapped:
            if node.name in served:
                continue
            after = [c for t in node.output for c in consumers.get(t, ())]
            before = [producer[t] for t in node.input if t in producer]
            neighbours = [served.get(n, n) for n in (*after, *before)]
            mapped = [n for n in neighbours if n in groups]
            rewritten = [n for n in mapped if methods.get(n) != "exact_name"]
            if rewritten or mapped:
                served[node.name] = (rewritten or mapped)[0]
                changed = True
    return served


def _row(runtime, original: OriginalNode | None, method: str, share: float, rule: str) -> dict:
    return {
        "runtime_node": runtime.name,
        "runtime_op_type": runtime.op_type,
        "onnx_node": original.name if original else None,
        "onnx_op_type": original.op_type if original else None,
        "method": method,
        "confidence": CONFIDENCE[method],
        "share": share,
        "split_rule": rule,
    }


def _anchors(optimized: onnx.GraphProto, by_name: dict[str, OriginalNode]):
    """Each runtime node's anchor original node, best evidence first: the same name; the original
    producer of a tensor the runtime node still outputs; an original node name, or an original
    tensor name (NCHWc nodes are named `<output tensor>_nchwc`), embedded in its name. A runtime
    node whose anchor another one already holds is a copy when it runs the same op."""
    producers = {t: node.name for node in by_name.values() for t in node.outputs}
    known_names = {**producers, **{name: name for name in by_name}}
    anchors: dict[str, str] = {}
    methods: dict[str, str] = {}
    copies: dict[str, str] = {}
    for runtime in optimized.node:
        if runtime.name in by_name:
            anchors[runtime.name], methods[runtime.name] = runtime.name, "exact_name"
            continue
        fusable = [
            producers[t]
            for t in runtime.output
            if t in producers and can_fuse(runtime.op_type, by_name[producers[t]].op_type)
        ]
        embedded = _embedded_name(runtime.name, known_names)
        if not fusable and embedded and can_fuse(runtime.op_type, by_name[embedded].op_type):
            fusable = [embedded]
        if not fusable:
            continue
        if fusable[0] not in anchors.values():
            anchors[runtime.name], methods[runtime.name] = fusable[0], "fused_anchor"
        elif by_name[fusable[0]].op_type == runtime.op_type:
            copies[runtime.name] = fusable[0]
    return anchors, methods, copies


def _embedded_name(runtime_name: str, known_names: dict[str, str]) -> str | None:
    """The original node whose name (or output tensor's name) is the longest piece of
    `runtime_name` that starts and ends at separators: a piece may keep a separator at its start,
    as the TorchScript exporter's names do (`/encoder/layer.0/MatMul` inside
    `/encoder/layer.0/MatMul/MatMulAddFusion`)."""
    separators = list(_SEPARATORS.finditer(runtime_name))
    starts = {0, *(m.start() for m in separators), *(m.end() for m in separators)}
    ends = {len(runtime_name), *(m.start() for m in separators)}
    best = None
    for start in starts:
        for end in ends:
            if end > start and (best is None or end - start > len(best)):
                candidate = runtime_name[start:end]
                if candidate in known_names:
                    best = candidate
    return known_names[best] if best is not None else None


def _absorb(originals: list[OriginalNode], optimized: onnx.GraphProto, anchors: dict[str, str]):
    """Original node -> runtime node that executes it.

    A fusion swallows intermediate tensors: they no longer exist in the optimized graph. Until
    nothing changes: a node whose outputs all vanished and whose consumers all belong to one
    runtime node joins it (Conv ← BatchNorm ← Relu, named after the Relu; the bias Add of a
    BiasGelu); a node fed by a vanished tensor it alone consumed joins its producer's runtime node
    (a residual Add and Relu folded into the Conv before them). Both only when that runtime op
    can execute the original op (`can_fuse`). Anything left was folded or removed.
    """
    runtime_op = {node.name: node.op_type for node in optimized.node}
    vanished = _vanished_tensors(originals, optimized)
    producer_of = {t: n for n in originals for t in n.outputs}
    consumers: dict[str, list[str]] = {}
    for node in originals:
        for tensor in node.inputs:
            consumers.setdefault(tensor, []).append(node.name)
    owner: dict[str, str] = {anchor: runtime for runtime, anchor in anchors.items()}

    def candidates(node: OriginalNode):
        """Runtime nodes this original node may have been fused into, best evidence first."""
        outputs = [t for t in node.outputs if t]
        if outputs and all(t in vanished for t in outputs):
            owners = {owner.get(c) for t in outputs for c in consumers.get(t, ())}
            if len(owners) == 1 and None not in owners:
                yield owners.pop()
        for tensor in node.inputs:
            producer = producer_of.get(tensor)
            if tensor in vanished and consumers[tensor] == [node.name] and producer.name in owner:
                yield owner[producer.name]

    changed = True
    while changed:
        changed = False
        for node in originals:
            if node.name in owner:
                continue
            for runtime in candidates(node):
                if can_fuse(runtime_op[runtime], node.op_type):
                    owner[node.name] = runtime
                    changed = True
                    break
    return owner


def _vanished_tensors(originals: list[OriginalNode], optimized: onnx.GraphProto) -> set[str]:
    """Tensors the original nodes produce that the optimized graph no longer has."""
    surviving = {*(i.name for i in optimized.input), *(o.name for o in optimized.output)}
    surviving.update(init.name for init in optimized.initializer)
    for node in optimized.node:
        surviving.update(node.input)
        surviving.update(node.output)
    return {t for n in originals for t in n.outputs if t and t not in surviving}


_ACTIVATIONS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "Elu", "Selu"}
_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Sum", "Erf", "Pow", "Sqrt", "Cast"}
_QDQ = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
# Which original ops a fused runtime op can contain (ONNX Runtime's CPU and GPU fusions).
FUSES = {
    "Conv": {"Conv", "BatchNormalization", *_ACTIVATIONS, "Add", "Sum"},
    "FusedConv": {"Conv", "BatchNormalization", *_ACTIVATIONS, "Add", "Sum"},
    "Gemm": {"Gemm", "MatMul", "Add", *_ACTIVATIONS},
    "FusedGemm": {"Gemm", "MatMul", "Add", *_ACTIVATIONS},
    "MatMul": {"MatMul", "Add"},
    "FusedMatMul": {"MatMul", "Mul", "Div", "Transpose"},
    "BiasGelu": {"Add", "Mul", "Div", "Erf"},
    "Gelu": {"Mul", "Div", "Erf", "Add"},
    "FastGelu": {"Add", "Mul", "Tanh", "Pow"},
    "LayerNormalization": {"LayerNormalization", "ReduceMean", *_ELEMENTWISE},
    "SkipLayerNormalization": {"LayerNormalization", "ReduceMean", *_ELEMENTWISE},
    "SimplifiedLayerNormalization": {"ReduceMean", *_ELEMENTWISE},
    "Attention": {"MatMul", "Add", "Reshape", "Transpose", "Softmax", "Mul", "Div"},
    "MultiHeadAttention": {"MatMul", "Add", "Reshape", "Transpose", "Softmax", "Mul", "Div"},
    "Upsample": {"Resize", "Upsample"},  # an NCHWc Resize runs as Upsample
    # Quantized kernels: QDQ groups (DequantizeLinear -> op -> QuantizeLinear) fused into one.
    "QLinearConv": {"Conv", "QLinearConv", *_QDQ, *_ACTIVATIONS},
    "QLinearMatMul": {"MatMul", "QLinearMatMul", *_QDQ},
    "QGemm": {"Gemm", "MatMul", "Add", "QGemm", *_QDQ},
    "QLinearAdd": {"Add", "QLinearAdd", *_QDQ},
    "QLinearMul": {"Mul", "QLinearMul", *_QDQ},
    "QLinearSigmoid": {"Sigmoid", "QLinearSigmoid", *_QDQ},
    "QLinearLeakyRelu": {"LeakyRelu", "QLinearLeakyRelu", *_QDQ},
    "QLinearConcat": {"Concat", "QLinearConcat", *_QDQ},
    "QLinearGlobalAveragePool": {"GlobalAveragePool", "QLinearGlobalAveragePool", *_QDQ},
    "QLinearAveragePool": {"AveragePool", "QLinearAveragePool", *_QDQ},
    "MatMulIntegerToFloat": {"MatMulInteger", "MatMul", "Cast", "Mul", "Add", *_QDQ},
    "DynamicQuantizeMatMul": {"MatMul", "MatMulInteger", "Cast", "Mul", "Add", *_QDQ},
    "NhwcMaxPool": {"MaxPool", *_QDQ},
}


# Nodes the runtime adds to move or re-lay out data: they execute no original node.
RUNTIME_ONLY = {"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost"}


def can_fuse(runtime_op_type: str, original_op_type: str) -> bool:
    """Whether a runtime op can be executing an original op. A standard ONNX op outside the
    table executes only itself; an opaque compiled kernel (MIGraphX, TensorRT...) anything."""
    if runtime_op_type in RUNTIME_ONLY:
        return False
    if runtime_op_type == original_op_type:
        return True
    if runtime_op_type in FUSES:
        return original_op_type in FUSES[runtime_op_type]
    return not onnx.defs.has(runtime_op_type)


def _split(members) -> tuple[list[float], str]:
    members = list(members)
    for rule, weights in (
        ("flop_share", [m.flops for m in members]),
        ("byte_share", [m.bytes_moved for m in members]),
    ):
        if all(w is not None for w in weights) and sum(weights) > 0:
            total = float(sum(weights))
            return [w / total for w in weights], rule
    return [1.0 / len(members)] * len(members), "equal_share"


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
# What places a device kernel on its queue after its launch call (analysis.critical_path.device_path): its
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


def graph_from_nodes(graph_nodes: pa.Table) -> onnx.GraphProto:
    """The original graph rebuilt from its GRAPH_NODES rows: the runtime graph to map against
    when ONNX Runtime's optimized model is not there (a trace ingested from elsewhere)."""
    nodes = [
        onnx.helper.make_node(r["op_type"], r["inputs"], r["outputs"], name=r["node_name"])
        for r in graph_nodes.select(["op_type", "inputs", "outputs", "node_name"]).to_pylist()
    ]
    return onnx.helper.make_graph(nodes, "original", [], [])


def with_profiled_nodes(graph: onnx.GraphProto, lake, session_id: str) -> onnx.GraphProto:
    """The runtime graph as the session's profile names it (see `as_profiled`)."""
    profiled = lake.query(
        "SELECT DISTINCT node_name, op_type FROM kernel_events "
        "WHERE session_id = $sid AND category = 'Node' AND node_name IS NOT NULL",
        {"sid": session_id},
    ).to_pylist()
    return as_profiled(graph, profiled)


_PROFILE_NAME = re.compile(r"(.+)_(\d+)$")


def as_profiled(graph: onnx.GraphProto, profiled: list[dict]) -> onnx.GraphProto:
    """The runtime graph with the names the profile uses, plus any node the profile shows that
    the graph lacks (a GPU run's optimized graph differs from the one at hand): known by name
    and op type only, such nodes can still be anchored by the names embedded in them.

    ONNX Runtime saves an unnamed node without a name but profiles it as `<op type>_<node
    index>`, an index of its in-memory graph that the saved file does not keep. Those indices
    grow in graph order, so each op type's unnamed nodes take the unknown `<op type>_<n>`
    names in order of n, when the counts agree."""
    graph = flattened(graph)
    known = {node.name for node in graph.node if node.name}
    missing = [r for r in profiled if r["node_name"] not in known]
    if not missing:
        return graph
    extended = onnx.GraphProto()
    extended.CopyFrom(graph)
    missing = _name_unnamed(extended, missing)
    extended.node.extend(
        onnx.helper.make_node(r["op_type"] or "Unknown", [], [], name=r["node_name"])
        for r in missing
    )
    return extended


def _name_unnamed(graph: onnx.GraphProto, missing: list[dict]) -> list[dict]:
    """Name the graph's unnamed nodes after the profile; the profiled nodes still missing."""
    indexed: dict[str, list[tuple[int, str]]] = {}
    for r in missing:
        match = _PROFILE_NAME.match(r["node_name"])
        if match and match.group(1) == r["op_type"]:
            indexed.setdefault(r["op_type"], []).append((int(match.group(2)), r["node_name"]))
    named = set()
    for op_type, names in indexed.items():
        unnamed = [n for n in graph.node if not n.name and n.op_type == op_type]
        if len(unnamed) == len(names):
            for node, (_, name) in zip(unnamed, sorted(names), strict=True):
                node.name = name
                named.add(name)
    return [r for r in missing if r["node_name"] not in named]


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

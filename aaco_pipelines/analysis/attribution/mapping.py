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

from aaco_pipelines.graph.extract import all_nodes, subgraphs

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


def graph_from_nodes(graph_nodes: pa.Table) -> onnx.GraphProto:
    """The original graph rebuilt from its GRAPH_NODES rows: the runtime graph to map against
    when ONNX Runtime's optimized model is not there (a trace ingested from elsewhere)."""
    nodes = [
        onnx.helper.make_node(r["op_type"], r["inputs"], r["outputs"], name=r["node_name"])
        for r in graph_nodes.select(["op_type", "inputs", "outputs", "node_name"]).to_pylist()
    ]
    return onnx.helper.make_graph(nodes, "original", [], [])


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

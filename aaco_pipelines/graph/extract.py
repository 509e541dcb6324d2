"""One model file as three tables: a summary row, its nodes with their costs, and its edges.

The nodes of control-flow subgraphs (If branches, Loop and Scan bodies) are rows like the
others, after the top-level nodes, with `parent_node` naming the node that holds them: ONNX
Runtime profiles and runs them as nodes of their own, and their costs are the model's too.

Shapes come from ONNX shape inference run with the inputs fixed to the resolved input specs, so
every per-node cost is for the exact shapes the benchmark feeds. The result is keyed by the
model's sha256 and saved once: the same file always gives the same graph.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from onnx import helper

from aaco_pipelines.graph.cost_model import TensorInfo, node_cost, tensor_bytes
from aaco_pipelines.graph.external_data import model_sha256
from aaco_pipelines.graph.inputs import declared_dims, dtype_name, graph_inputs, load_model
from aaco_pipelines.registry.sidecar import InputSpec
from aaco_pipelines.tracelake.schema import GRAPH_EDGES, GRAPH_NODES, conform

log = logging.getLogger(__name__)

SUMMARY_FILE, NODES_FILE, EDGES_FILE = "graph.json", "nodes.parquet", "edges.parquet"
# Initializers up to this many elements keep their values (shape constants feed data
# propagation); larger ones go to shape inference as typed inputs, without their data.
SMALL_INITIALIZER = 1024


@dataclass(frozen=True)
class GraphExtract:
    summary: dict  # the MODELS row, plus "op_histogram": {op_type: count}, most frequent first
    nodes: pa.Table  # GRAPH_NODES
    edges: pa.Table  # GRAPH_EDGES

    def save(self, directory: Path) -> None:
        """Write all three files at once: readers see a complete graph or none.

        The directory is named by content, so an existing complete one is left as it is.
        """
        if _is_complete(directory):
            return
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            (staging / SUMMARY_FILE).write_text(json.dumps(self.summary, indent=2))
            pq.write_table(self.nodes, staging / NODES_FILE)
            pq.write_table(self.edges, staging / EDGES_FILE)
            _publish(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @classmethod
    def load(cls, directory: Path) -> GraphExtract:
        return cls(
            summary=json.loads((directory / SUMMARY_FILE).read_text()),
            # conform: an extract saved before a column was added reads with it null
            nodes=conform(pq.read_table(directory / NODES_FILE), GRAPH_NODES),
            edges=pq.read_table(directory / EDGES_FILE).cast(GRAPH_EDGES),
        )


def _is_complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (SUMMARY_FILE, NODES_FILE, EDGES_FILE))


def _publish(staging: Path, directory: Path) -> None:
    """Rename into place; a concurrent writer that got there first has written the same graph."""
    try:
        os.rename(staging, directory)
    except OSError:
        if _is_complete(directory):
            return
        if directory.exists():
            shutil.rmtree(directory)  # a half-made directory left by something else
        os.rename(staging, directory)


def extract_graph(
    model_path: Path, input_specs: Mapping[str, InputSpec], model_name: str | None = None
) -> GraphExtract:
    """Nodes, edges and costs of a model, for inputs of the given shapes."""
    model = load_model(model_path)
    sha = model_sha256(model_path)
    tensors = _tensor_infos(_infer_shapes(model, input_specs, model_path).graph)
    graph = model.graph
    placed = all_nodes(graph)
    names = _node_names([node for node, _ in placed])
    nodes = _nodes_table(placed, names, tensors, sha)
    edges = _edges_table(graph, placed, names, tensors, sha)
    summary = {
        "model_sha256": sha,
        "model_name": model_name or model_path.stem,
        "opset": _default_opset(model),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "node_count": nodes.num_rows,
        "edge_count": edges.num_rows,
        **_parameters(graph),
        "total_flops": pc.sum(nodes["flops"]).as_py(),
        "total_bytes_moved": pc.sum(nodes["bytes_moved"]).as_py(),
        "input_spec": json.dumps(
            {name: {"shape": list(s.shape), "dtype": s.dtype} for name, s in input_specs.items()}
        ),
        "op_histogram": _op_histogram([node for node, _ in placed]),
    }
    return GraphExtract(summary=summary, nodes=nodes, edges=edges)


def _infer_shapes(
    model: onnx.ModelProto, input_specs: Mapping[str, InputSpec], path: Path
) -> onnx.ModelProto:
    """The model's graph with shapes inferred for the given inputs; un-inferred if that fails."""
    light = _shape_model(model, input_specs)
    try:
        return onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception as exc:  # an inference bug on an exotic model must not stop extraction
        log.warning("%s: shape inference failed (%s); costs need declared shapes only", path, exc)
        return light


def _shape_model(model: onnx.ModelProto, input_specs: Mapping[str, InputSpec]) -> onnx.ModelProto:
    """A copy with the inputs fixed to concrete shapes and the large weights reduced to types.

    Inference only needs a weight's shape (and the values of small shape constants), so leaving
    large weights' data behind keeps memory flat and stays under protobuf's 2 GB limit.
    """
    source = model.graph
    light = onnx.ModelProto(
        ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions
    )
    graph = light.graph
    graph.name = source.name
    for value_info in graph_inputs(model):
        fixed = graph.input.add()
        fixed.CopyFrom(value_info)
        if value_info.name in input_specs:
            shape = fixed.type.tensor_type.shape
            del shape.dim[:]
            for size in input_specs[value_info.name].shape:
                shape.dim.add().dim_value = size
    for weight in source.initializer:
        inline = weight.data_location != onnx.TensorProto.EXTERNAL
        if inline and math.prod(weight.dims) <= SMALL_INITIALIZER:
            graph.initializer.append(weight)
        else:
            graph.input.append(
                helper.make_tensor_value_info(weight.name, weight.data_type, list(weight.dims))
            )
    graph.sparse_initializer.extend(source.sparse_initializer)
    graph.node.extend(source.node)
    graph.value_info.extend(source.value_info)
    graph.output.extend(source.output)
    return light


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs a control-flow node holds (If's branches, Loop's and Scan's body)."""
    found = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            found.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            found.extend(attribute.graphs)
    return found


def all_nodes(graph: onnx.GraphProto) -> list[tuple[onnx.NodeProto, int | None]]:
    """Every node with the position of the node whose subgraph holds it (None at top level):
    the top-level nodes first, in order, then each subgraph's, breadth first."""
    placed: list[tuple[onnx.NodeProto, int | None]] = [(node, None) for node in graph.node]
    index = 0
    while index < len(placed):
        for subgraph in subgraphs(placed[index][0]):
            placed.extend((node, index) for node in subgraph.node)
        index += 1
    return placed


def _all_graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    return [graph, *(g for node, _ in all_nodes(graph) for g in subgraphs(node))]


def _tensor_infos(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    """Shape and dtype of every named tensor the graph and its subgraphs know, the inferred ones
    winning."""
    infos = {}
    for level in _all_graphs(graph):
        for weight in level.initializer:
            infos[weight.name] = TensorInfo(tuple(weight.dims), dtype_name(weight.data_type))
    for level in _all_graphs(graph):
        for value_info in [*level.input, *level.value_info, *level.output]:
            if value_info.type.HasField("tensor_type"):
                dims = declared_dims(value_info)
                shape = (
                    None if dims is None else tuple(d if isinstance(d, int) else None for d in dims)
                )
                infos[value_info.name] = TensorInfo(
                    shape, dtype_name(value_info.type.tensor_type.elem_type)
                )
    return infos


def _node_names(nodes: list[onnx.NodeProto]) -> list[str]:
    """Each node's name; unnamed nodes get "<op_type>_<index>", stable across extractions."""
    return [node.name or f"{node.op_type}_{index}" for index, node in enumerate(nodes)]


def _nodes_table(
    placed: list[tuple[onnx.NodeProto, int | None]],
    names: list[str],
    tensors: Mapping[str, TensorInfo],
    sha: str,
) -> pa.Table:
    columns: dict[str, list] = {field.name: [] for field in GRAPH_NODES}
    for index, (node, parent) in enumerate(placed):
        outputs = [tensors.get(name) if name else None for name in node.output]
        cost = node_cost(node, tensors)
        row = {
            "model_sha256": sha,
            "node_index": index,
            "node_name": names[index],
            "op_type": node.op_type,
            "domain": node.domain or "ai.onnx",
            "inputs": list(node.input),
            "outputs": list(node.output),
            "attributes": _attributes_json(node),
            "output_shapes": json.dumps([_shape(info) for info in outputs]),
            "output_dtypes": [info.dtype if info else None for info in outputs],
            "flops": cost.flops,
            "bytes_moved": cost.bytes_moved,
            "cost_rule": cost.rule,
            "parent_node": None if parent is None else names[parent],
        }
        for key, value in row.items():
            columns[key].append(value)
    return pa.Table.from_pydict(columns, schema=GRAPH_NODES)


def _edges_table(
    graph: onnx.GraphProto,
    placed: list[tuple[onnx.NodeProto, int | None]],
    names: list[str],
    tensors: Mapping[str, TensorInfo],
    sha: str,
) -> pa.Table:
    """One row per (tensor, consumer); a graph output is consumed by nobody (dst_node null)."""
    nodes = [node for node, _ in placed]
    producer = {out: names[i] for i, node in enumerate(nodes) for out in node.output if out}
    pairs = [
        (tensor, names[i])
        for i, node in enumerate(nodes)
        for tensor in dict.fromkeys(name for name in node.input if name)
    ]
    pairs += [(output.name, None) for output in graph.output]
    weights = {weight.name for level in _all_graphs(graph) for weight in level.initializer}
    columns: dict[str, list] = {field.name: [] for field in GRAPH_EDGES}
    for tensor, consumer in pairs:
        info = tensors.get(tensor)
        shape = _shape(info)
        row = {
            "model_sha256": sha,
            "tensor_name": tensor,
            "src_node": producer.get(tensor),
            "dst_node": consumer,
            "dtype": info.dtype if info else None,
            "shape": None if shape is None else json.dumps(shape),
            "bytes": tensor_bytes(info),
            "is_initializer": tensor in weights,
        }
        for key, value in row.items():
            columns[key].append(value)
    return pa.Table.from_pydict(columns, schema=GRAPH_EDGES)


def _shape(info: TensorInfo | None) -> list[int | None] | None:
    return None if info is None or info.shape is None else list(info.shape)


def _attributes_json(node: onnx.NodeProto) -> str:
    """Scalar and list attributes by value; tensors and subgraphs only noted, as "<tensor>"."""
    kinds = onnx.AttributeProto.AttributeType
    attributes = {}
    for attribute in node.attribute:
        kind = kinds.Name(attribute.type).lower()
        if kind in ("int", "float", "string", "ints", "floats", "strings"):
            attributes[attribute.name] = _json_value(helper.get_attribute_value(attribute))
        else:
            attributes[attribute.name] = f"<{kind}>"
    return json.dumps(attributes)


def _json_value(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or inf
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    return value


def _default_opset(model: onnx.ModelProto) -> int | None:
    versions = [op.version for op in model.opset_import if op.domain in ("", "ai.onnx")]
    return versions[0] if versions else None


def _parameters(graph: onnx.GraphProto) -> dict[str, int]:
    count = size = 0
    for weight in graph.initializer:
        info = TensorInfo(tuple(weight.dims), dtype_name(weight.data_type))
        count += math.prod(weight.dims)
        size += tensor_bytes(info) or 0
    return {"parameter_count": count, "parameter_bytes": size}


def _op_histogram(nodes: list[onnx.NodeProto]) -> dict[str, int]:
    counts = Counter(node.op_type for node in nodes)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

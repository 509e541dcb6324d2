"""One model file as three tables: a summary row, its nodes with their costs, and its edges.

The nodes of control-flow subgraphs (If branches, Loop and Scan bodies) are rows like the
others, after the top-level nodes, with `parent_node` naming the node that holds them: ONNX
Runtime profiles and runs them as nodes of their own, and their costs are the model's too.

Shapes come from ONNX shape inference run with the inputs fixed to the resolved input specs, so
every per-node cost is for the exact shapes the benchmark feeds. Where it stops, rounds of it
continue: the outputs the cost model derives for com.microsoft ops are fed back as value_info,
small shape arithmetic that data propagation does not follow (Where, Equal, ConstantOfShape,
values from an outer scope) is computed and fed back as Constants, and a Loop's carried state gets
its initial shape; all without the weights (only tensors up to SMALL_INITIALIZER elements). The result is keyed by the
model's sha256 and saved once: the same file always gives the same graph.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aaco_pipelines.graph.cost.core import TensorInfo, numel, tensor_bytes
from aaco_pipelines.graph.cost.model import node_cost, output_infos
from aaco_pipelines.graph.inputs import declared_dims, dtype_name, graph_inputs, load_model
from aaco_pipelines.registry.external_data import model_sha256
from aaco_pipelines.registry.sidecar import InputSpec
from aaco_pipelines.tracelake.schema import GRAPH_EDGES, GRAPH_NODES, conform

log = logging.getLogger(__name__)

SUMMARY_FILE, NODES_FILE, EDGES_FILE = "graph.json", "nodes.parquet", "edges.parquet"
# Initializers up to this many elements keep their values (shape constants feed data
# propagation); larger ones go to shape inference as typed inputs, without their data.
SMALL_INITIALIZER = 1024
# Inference rounds with the contrib ops' derived outputs fed back; each carries shapes past at
# least one more op ONNX does not know, and a round that adds nothing ends them.
FEEDBACK_ROUNDS = 20


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
        inferred = _infer(light)
    except Exception as exc:  # an inference bug on an exotic model must not stop extraction
        log.warning("%s: shape inference failed (%s); costs need declared shapes only", path, exc)
        return light
    for _ in range(FEEDBACK_ROUNDS):
        tensors = _tensor_infos(inferred.graph)
        if _all_known(inferred.graph, tensors):
            break
        derived = _feed_back_derived(inferred, tensors)
        if not _fold_shape_values(inferred, tensors) and not derived:
            break
        try:
            inferred = _infer(inferred)
        except Exception as exc:
            log.warning("%s: shape inference failed on fed-back shapes (%s)", path, exc)
            break
    return inferred


def _all_known(graph: onnx.GraphProto, tensors: Mapping[str, TensorInfo]) -> bool:
    """Whether every node output has a known shape: nothing left for another round to find."""
    return all(
        numel(tensors.get(name)) is not None
        for node, _ in all_nodes(graph)
        for name in node.output
        if name
    )


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)


def _feed_back_derived(model: onnx.ModelProto, tensors: dict[str, TensorInfo]) -> bool:
    """Declare, as value_info, the outputs the cost model derives (contrib ops, which ONNX shape
    inference does not know) where inference left them unknown, so that the next inference
    round carries them downstream (and `tensors` has them now). Whether anything was added."""
    added = False
    for level in _all_graphs(model.graph):
        declared = {info.name: info for info in [*level.value_info, *level.output]}
        for node in level.node:
            derived = _loop_carried(node, tensors) if node.op_type == "Loop" else None
            derived = derived or output_infos(node, tensors)
            for name, info in zip(node.output, derived, strict=False):
                if not name or numel(info) is None or numel(tensors.get(name)) is not None:
                    continue
                elem_type = _elem_type(info.dtype)
                if elem_type is None:
                    continue
                typed = helper.make_tensor_value_info(name, elem_type, list(info.shape))
                if name in declared:
                    declared[name].type.CopyFrom(typed.type)
                else:
                    level.value_info.append(typed)
                tensors[name] = info  # nodes later in this round see it already
                added = True
    return added


# Ops whose output can be much larger than their inputs: evaluated only when the output's size is
# known to be small.
_GROWING = {"ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Upsample", "OneHot"}
_RANDOM = {
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "Dropout",
}


def _fold_shape_values(model: onnx.ModelProto, tensors: Mapping[str, TensorInfo]) -> bool:
    """Replace, by Constant nodes, the nodes whose (small) outputs can be computed from constants,
    small initializers and the now-known shapes (Shape, Size): the shape arithmetic of exported
    models (Where, Equal, ConstantOfShape ...) that ONNX's data propagation does not follow, nor
    carry into subgraphs, so that the next inference round sees the shapes Expand, Reshape, Pad
    or Slice are given. Only small tensors are computed, never a weight. Whether any node was
    replaced."""
    return _fold_graph(model.graph, {}, tensors, model.opset_import)


def _fold_graph(
    graph: onnx.GraphProto,
    outer: Mapping[str, np.ndarray | onnx.TensorProto],
    tensors: Mapping[str, TensorInfo],
    opsets,
) -> bool:
    values = dict(outer)  # a subgraph sees its enclosing graphs' values
    values.update(  # read (by _value) only where a node needs them
        (weight.name, weight)
        for weight in graph.initializer
        if weight.data_location != onnx.TensorProto.EXTERNAL
        and math.prod(weight.dims) <= SMALL_INITIALIZER
    )
    replaced = False
    nodes = []
    for node in graph.node:
        for subgraph in subgraphs(node):
            replaced |= _fold_graph(subgraph, values, tensors, opsets)
        folded = _evaluate(node, values, tensors, opsets)
        if folded is not None:
            values.update((n, value) for n, value in zip(node.output, folded, strict=True) if n)
        if folded is None or node.op_type == "Constant":
            nodes.append(node)
            continue
        nodes.extend(
            helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
            for name, value in zip(node.output, folded, strict=True)
            if name
        )
        replaced = True
    if replaced:
        del graph.node[:]
        graph.node.extend(nodes)
    return replaced


def _value(values: dict, name: str) -> np.ndarray | None:
    value = values.get(name)
    if isinstance(value, onnx.TensorProto):
        value = values[name] = numpy_helper.to_array(value)
    return value


def _evaluate(
    node: onnx.NodeProto, values: dict[str, np.ndarray], tensors: Mapping[str, TensorInfo], opsets
) -> list[np.ndarray] | None:
    """The node's output values if they follow from known values and shapes and are small."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _RANDOM or subgraphs(node):
        return None
    if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
        value = node.attribute[0].t
        if value.data_location == onnx.TensorProto.EXTERNAL or (
            math.prod(value.dims) > SMALL_INITIALIZER
        ):
            return None  # a weight held as a Constant: not shape arithmetic
        return [numpy_helper.to_array(value)]
    if node.op_type in ("Shape", "Size"):
        source = _value(values, node.input[0])
        shape = (
            source.shape
            if source is not None
            else getattr(tensors.get(node.input[0]), "shape", None)
        )
        if shape is None or any(d is None for d in shape):
            return None
        if node.op_type == "Size":
            return [np.array(math.prod(shape), np.int64)]
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        start, end = attributes.get("start", 0), attributes.get("end")
        return [np.array(shape[start:end], np.int64)]
    if any(name and values.get(name) is None for name in node.input):
        return None
    inputs = [_value(values, name) if name else None for name in node.input]
    if node.op_type in _GROWING:
        outputs = [numel(tensors.get(name)) for name in node.output if name]
        if node.op_type == "ConstantOfShape":
            outputs = [math.prod(int(d) for d in inputs[0].reshape(-1))]
        if any(size is None or size > SMALL_INITIALIZER for size in outputs):
            return None
    given = {name: value for name, value in zip(node.input, inputs, strict=True) if name}
    probe = helper.make_model(
        helper.make_graph(
            [node],
            "fold",
            [
                helper.make_tensor_value_info(n, _elem_type(v.dtype.name) or 0, v.shape)
                for n, v in given.items()
            ],
            [onnx.ValueInfoProto(name=name) for name in node.output if name],
        ),
        opset_imports=list(opsets),
    )
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # log(0), casts of inf: values as ONNX Runtime's
            results = ReferenceEvaluator(probe).run(None, given)
    except Exception:  # an op the reference runtime lacks or rejects: left to inference
        return None
    arrays = [np.asarray(result) for result in results]
    if any(array.size > SMALL_INITIALIZER or array.dtype == object for array in arrays):
        return None
    produced = iter(arrays)
    return [next(produced) if name else np.array([]) for name in node.output]


def _loop_carried(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> list | None:
    """A Loop's outputs where each loop-carried value keeps one shape: the initial value's, when
    the body gives back the same (ONNX inference leaves it unknown when the body's shape comes
    from an If or from outer-scope values). The stacked scan outputs stay as they are."""
    body = next(iter(subgraphs(node)), None)
    if body is None:
        return None
    carried = len(node.input) - 2
    outputs = [tensors.get(name) if name else None for name in node.output]
    for index in range(min(carried, len(node.output))):
        initial = tensors.get(node.input[2 + index])
        returned = (
            tensors.get(body.output[1 + index].name) if len(body.output) > 1 + index else None
        )
        if (
            numel(outputs[index]) is None
            and numel(initial) is not None
            and returned is not None
            and returned.shape == initial.shape
        ):
            outputs[index] = TensorInfo(initial.shape, initial.dtype or returned.dtype)
    return outputs


def _elem_type(dtype: str | None) -> int | None:
    if dtype is None:
        return None
    if dtype == "string":
        return onnx.TensorProto.STRING
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (KeyError, TypeError, ValueError):
        return None


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


_dtype_name = functools.cache(dtype_name)  # called per tensor, every inference round


def _tensor_infos(graph: onnx.GraphProto) -> dict[str, TensorInfo]:
    """Shape and dtype of every named tensor the graph and its subgraphs know, the inferred ones
    winning."""
    infos = {}
    for level in _all_graphs(graph):
        for weight in level.initializer:
            infos[weight.name] = TensorInfo(tuple(weight.dims), _dtype_name(weight.data_type))
    for level in _all_graphs(graph):
        for value_info in [*level.input, *level.value_info, *level.output]:
            if value_info.type.HasField("tensor_type"):
                dims = declared_dims(value_info)
                shape = (
                    None if dims is None else tuple(d if isinstance(d, int) else None for d in dims)
                )
                infos[value_info.name] = TensorInfo(
                    shape, _dtype_name(value_info.type.tensor_type.elem_type)
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

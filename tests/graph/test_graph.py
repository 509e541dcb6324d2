"""Graph extraction, input resolution and the cost model, on tiny models built right here."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.graph import extract as extract_module
from aaco_pipelines.graph.cost.core import TensorInfo
from aaco_pipelines.graph.cost.model import node_cost
from aaco_pipelines.graph.extract import GraphExtract, extract_graph
from aaco_pipelines.graph.inputs import load_model, make_inputs, resolve_input_specs
from aaco_pipelines.registry.scan import file_sha256
from aaco_pipelines.registry.sidecar import InputSpec
from aaco_pipelines.tracelake.schema import GRAPH_EDGES, GRAPH_NODES, MODELS

F32 = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    # onnxruntime 1.22 reads IR <= 10; onnx 1.23 would default to a newer one.
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def value(name, shape, elem=F32):
    return helper.make_tensor_value_info(name, elem, shape)


def weight(name, shape, dtype=np.float32):
    data = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    return numpy_helper.from_array(data, name)


def infos(**shapes) -> dict[str, TensorInfo]:
    return {name: TensorInfo(tuple(shape), "float32") for name, shape in shapes.items()}


# --- cost model ---------------------------------------------------------------------------


def test_matmul_batched_broadcast():
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    cost = node_cost(node, infos(a=[2, 3, 4], b=[4, 5], y=[2, 3, 5]))
    assert cost.flops == 2 * 2 * 3 * 4 * 5
    assert cost.bytes_moved == (2 * 3 * 4 + 4 * 5 + 2 * 3 * 5) * 4
    assert cost.rule == "matmul"


def test_gemm_honours_transposes_and_bias():
    with_c = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)
    cost = node_cost(with_c, infos(a=[3, 4], b=[5, 4], c=[5], y=[3, 5]))
    assert cost.flops == 2 * 3 * 5 * 4 + 3 * 5
    assert cost.bytes_moved == (12 + 20 + 5 + 15) * 4

    trans_a = helper.make_node("Gemm", ["a", "b"], ["y"], transA=1)
    assert node_cost(trans_a, infos(a=[4, 3], b=[4, 5], y=[3, 5])).flops == 2 * 3 * 5 * 4


def test_conv_with_groups_padding_and_stride(tmp_path):
    # 4 -> 6 channels in 2 groups, 3x3 kernel, pad 1, stride 2: 8x8 becomes 4x4.
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], group=2, pads=[1, 1, 1, 1], strides=[2, 2]
    )
    model = make_model(
        [node],
        [value("x", [1, 4, 8, 8])],
        [value("y", None)],
        [weight("w", [6, 2, 3, 3]), weight("b", [6])],
    )
    path = tmp_path / "conv.onnx"
    onnx.save(model, path)
    row = extract_graph(path, {"x": InputSpec((1, 4, 8, 8), "float32")}).nodes.to_pylist()[0]
    assert json.loads(row["output_shapes"]) == [[1, 6, 4, 4]]
    assert row["flops"] == 2 * 1 * 6 * (4 * 4) * (4 // 2) * (3 * 3) + 1 * 6 * 4 * 4
    assert row["bytes_moved"] == (4 * 64 + 6 * 2 * 9 + 6 + 6 * 16) * 4
    assert row["cost_rule"] == "conv"


def test_conv_transpose_scatters_every_input_element():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"])
    cost = node_cost(node, infos(x=[1, 2, 3, 3], w=[2, 4, 2, 2], y=[1, 4, 4, 4]))
    assert cost.flops == 2 * (2 * 3 * 3) * 4 * (2 * 2)


def test_normalisation_multipliers():
    softmax = helper.make_node("Softmax", ["x"], ["y"])
    assert node_cost(softmax, infos(x=[2, 10], y=[2, 10])).flops == 5 * 20
    norm = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])
    assert node_cost(norm, infos(x=[2, 10], s=[10], b=[10], y=[2, 10])).flops == 8 * 20


def test_elementwise_costs_per_output_element():
    add = helper.make_node("Add", ["a", "b"], ["y"])
    assert node_cost(add, infos(a=[2, 3], b=[3], y=[2, 3])).flops == 6
    erf = helper.make_node("Erf", ["a"], ["y"])
    assert node_cost(erf, infos(a=[2, 3], y=[2, 3])).flops == 4 * 6
    total = helper.make_node("Sum", ["a", "b", "c"], ["y"])
    assert node_cost(total, infos(a=[6], b=[6], c=[6], y=[6])).flops == 2 * 6


def test_pooling_counts_the_kernel():
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    assert node_cost(pool, infos(x=[1, 1, 4, 4], y=[1, 1, 2, 2])).flops == 4 * 4
    global_pool = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    assert node_cost(global_pool, infos(x=[1, 3, 4, 4], y=[1, 3, 1, 1])).flops == 48


def test_views_are_free_and_data_movement_reads_and_writes():
    reshape = helper.make_node("Reshape", ["x", "s"], ["y"])
    assert node_cost(reshape, infos(x=[2, 6], y=[3, 4])) == node_cost(reshape, {})
    assert node_cost(reshape, {}).bytes_moved == 0 and node_cost(reshape, {}).flops == 0
    transpose = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    cost = node_cost(transpose, infos(x=[2, 6], y=[6, 2]))
    assert (cost.flops, cost.bytes_moved, cost.rule) == (0, 2 * 12 * 4, "data_movement")


def test_gather_reads_only_the_gathered_rows():
    gather = helper.make_node("Gather", ["table", "ids"], ["y"])
    tensors = {
        **infos(table=[1000, 8], y=[2, 3, 8]),
        "ids": TensorInfo((2, 3), "int64"),
    }
    cost = node_cost(gather, tensors)
    assert (cost.flops, cost.bytes_moved) == (0, 6 * 8 + 2 * (48 * 4))


def test_unknown_op_or_shape_gives_no_number():
    custom = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    assert (node_cost(custom, infos(x=[4], y=[4])).flops, node_cost(custom, {}).rule) == (
        None,
        "unknown",
    )
    add = helper.make_node("Add", ["a", "b"], ["y"])
    cost = node_cost(add, {"a": TensorInfo((None, 3), "float32"), **infos(b=[3])})
    assert (cost.flops, cost.bytes_moved, cost.rule) == (None, None, "unknown")


# --- inputs -------------------------------------------------------------------------------


def dynamic_model() -> onnx.ModelProto:
    node = helper.make_node("Relu", ["image"], ["y"])
    return make_model([node], [value("image", ["batch", 3, 4, 4])], [value("y", None)])


def test_dynamic_dim_without_sidecar_names_input_path_and_fix(tmp_path):
    path = tmp_path / "net.onnx"
    with pytest.raises(AacoInputError) as caught:
        resolve_input_specs(dynamic_model(), {}, path)
    message = str(caught.value)
    assert "image" in message and str(path) in message and "sidecar" in message
    assert "[batch, 3, 4, 4]" in message and "net.yaml" in message


def test_sidecar_completes_the_dynamic_dims(tmp_path):
    given = {"image": InputSpec((2, 3, 4, 4), "float32", low=0.0, high=1.0)}
    specs = resolve_input_specs(dynamic_model(), given, tmp_path / "net.onnx")
    assert specs == {"image": InputSpec((2, 3, 4, 4), "float32", low=0.0, high=1.0)}


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 5, 4, 4)], ids=["rank", "static-dim"])
def test_sidecar_cannot_contradict_the_model(tmp_path, shape):
    with pytest.raises(AacoInputError, match="image"):
        resolve_input_specs(
            dynamic_model(), {"image": InputSpec(shape, "float32")}, tmp_path / "net.onnx"
        )


def test_sidecar_naming_a_missing_input_is_refused(tmp_path):
    given = {
        "image": InputSpec((1, 3, 4, 4), "float32"),
        "mask": InputSpec((1,), "bool"),
    }
    with pytest.raises(AacoInputError, match="mask"):
        resolve_input_specs(dynamic_model(), given, tmp_path / "net.onnx")


def test_static_inputs_need_no_sidecar_and_weights_are_not_inputs(tmp_path):
    node = helper.make_node("Gather", ["table", "ids"], ["y"])
    model = make_model(
        [node],
        # Old exporters list weights among the graph inputs too.
        [value("ids", [2, 5], TensorProto.INT64), value("table", [10, 4])],
        [value("y", None)],
        [weight("table", [10, 4])],
    )
    # The model's dtype wins over the sidecar's float32 default.
    specs = resolve_input_specs(model, {"ids": InputSpec((2, 5), "float32")}, tmp_path / "m.onnx")
    assert specs == {"ids": InputSpec((2, 5), "int64")}
    assert resolve_input_specs(model, {}, tmp_path / "m.onnx") == specs


def test_load_model_rejects_truncated_and_text_files(tmp_path):
    good = tmp_path / "good.onnx"
    onnx.save(dynamic_model(), good)
    assert load_model(good).graph.node[0].op_type == "Relu"

    data = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [value("x", [1, 64])],
        [value("y", None)],
        [weight("w", [64, 64])],
    ).SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n")
    for path in (truncated, text, tmp_path):
        with pytest.raises(AacoInputError, match="not a valid ONNX model") as caught:
            load_model(path)
        assert str(path) in str(caught.value)


def test_make_inputs_is_deterministic_and_bounded():
    specs = {
        "x": InputSpec((2, 3), "float32"),
        "u": InputSpec((50,), "float16", low=-2.0, high=2.0),
        "ids": InputSpec((4, 100), "int64", low=5, high=9),
        "zeros": InputSpec((10,), "int32"),
        "mask": InputSpec((8,), "bool"),
    }
    first, again, other = make_inputs(specs, 7), make_inputs(specs, 7), make_inputs(specs, 8)
    for name, spec in specs.items():
        np.testing.assert_array_equal(first[name], again[name])
        assert first[name].shape == spec.shape and first[name].dtype == np.dtype(spec.dtype)
    assert not np.array_equal(first["x"], other["x"])
    assert first["ids"].min() >= 5 and first["ids"].max() < 9
    assert set(np.unique(first["ids"])) == {5, 6, 7, 8}
    assert (first["zeros"] == 0).all()
    assert -2 <= first["u"].min() and first["u"].max() <= 2


# --- extraction ---------------------------------------------------------------------------


def mlp(tmp_path):
    """Three dense layers with a dynamic batch, a softmax and a reshape by a constant shape."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Add", ["h1", "b1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r1"]),  # unnamed: becomes Relu_2
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Add", ["h2", "b2"], ["a2"], name="add2"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("MatMul", ["r2", "w3"], ["h3"], name="mm3"),
        helper.make_node("Softmax", ["h3"], ["s"], name="softmax"),
        helper.make_node("Reshape", ["s", "shape"], ["y"], name="reshape"),
    ]
    weights = [
        weight("w1", [8, 16]),
        weight("b1", [16]),
        weight("w2", [16, 16]),
        weight("b2", [16]),
        weight("w3", [16, 4]),
        numpy_helper.from_array(np.array([-1, 2, 2]), "shape"),
    ]
    model = make_model(nodes, [value("x", ["batch", 8])], [value("y", None)], weights)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    specs = resolve_input_specs(model, {"x": InputSpec((3, 8), "float32")}, path)
    return path, specs


@pytest.mark.parametrize("small_initializer", [1024, 100], ids=["all-data", "big-as-types"])
def test_extract_graph_of_a_three_layer_mlp(tmp_path, monkeypatch, small_initializer):
    monkeypatch.setattr(extract_module, "SMALL_INITIALIZER", small_initializer)
    path, specs = mlp(tmp_path)
    graph = extract_graph(path, specs)

    assert graph.nodes.schema.equals(GRAPH_NODES) and graph.edges.schema.equals(GRAPH_EDGES)
    nodes = {row["node_name"]: row for row in graph.nodes.to_pylist()}
    assert list(nodes) == "mm1 add1 Relu_2 mm2 add2 relu2 mm3 softmax reshape".split()
    assert json.loads(nodes["mm2"]["output_shapes"]) == [[3, 16]]
    assert json.loads(nodes["reshape"]["output_shapes"]) == [[3, 2, 2]]
    assert nodes["Relu_2"]["domain"] == "ai.onnx"
    flops = {name: row["flops"] for name, row in nodes.items()}
    assert flops == {
        "mm1": 2 * 3 * 8 * 16,
        "add1": 48,
        "Relu_2": 48,
        "mm2": 2 * 3 * 16 * 16,
        "add2": 48,
        "relu2": 48,
        "mm3": 2 * 3 * 16 * 4,
        "softmax": 5 * 12,
        "reshape": 0,
    }

    summary = graph.summary
    assert set(summary) == set(MODELS.names) | {"op_histogram"}
    assert summary["model_sha256"] == file_sha256(path)
    assert summary["model_name"] == "mlp"
    assert (summary["opset"], summary["ir_version"]) == (17, 9)
    assert summary["node_count"] == 9 and summary["edge_count"] == 16
    assert summary["parameter_count"] == 128 + 16 + 256 + 16 + 64 + 3
    assert summary["parameter_bytes"] == (128 + 16 + 256 + 16 + 64) * 4 + 3 * 8
    assert summary["total_flops"] == sum(flops.values())
    assert json.loads(summary["input_spec"]) == {"x": {"shape": [3, 8], "dtype": "float32"}}
    assert list(summary["op_histogram"].items()) == [
        ("MatMul", 3),
        ("Add", 2),
        ("Relu", 2),
        ("Reshape", 1),
        ("Softmax", 1),
    ]

    edges = graph.edges.to_pylist()
    first = edges[0]
    assert (first["tensor_name"], first["src_node"], first["dst_node"]) == ("x", None, "mm1")
    assert json.loads(first["shape"]) == [3, 8] and first["bytes"] == 3 * 8 * 4
    w1 = next(edge for edge in edges if edge["tensor_name"] == "w1")
    assert w1["is_initializer"] and w1["src_node"] is None
    a1 = next(edge for edge in edges if edge["tensor_name"] == "a1")
    assert (a1["src_node"], a1["dst_node"]) == ("add1", "Relu_2")
    assert edges[-1] == {
        "model_sha256": summary["model_sha256"],
        "tensor_name": "y",
        "src_node": "reshape",
        "dst_node": None,
        "dtype": "float32",
        "shape": "[3, 2, 2]",
        "bytes": 48,
        "is_initializer": False,
    }


def test_inferred_shapes_match_what_onnxruntime_produces(tmp_path):
    path, specs = mlp(tmp_path)
    graph = extract_graph(path, specs)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, make_inputs(specs))
    reshape = graph.nodes.to_pylist()[-1]
    assert json.loads(reshape["output_shapes"]) == [list(output.shape)]


def test_failed_shape_inference_leaves_costs_unknown_not_crashed(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise onnx.shape_inference.InferenceError("boom")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", broken)
    path, specs = mlp(tmp_path)
    nodes = {row["node_name"]: row for row in extract_graph(path, specs).nodes.to_pylist()}
    assert (nodes["mm1"]["flops"], nodes["mm1"]["cost_rule"]) == (None, "unknown")
    assert nodes["reshape"]["cost_rule"] == "view"


def test_attributes_are_json_with_tensors_only_noted(tmp_path):
    nodes = [
        helper.make_node("Constant", [], ["c"], value=weight("v", [4])),
        helper.make_node("Add", ["x", "c"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=[0, 1]),
    ]
    path = tmp_path / "attrs.onnx"
    onnx.save(make_model(nodes, [value("x", [2, 4])], [value("y", None)]), path)
    rows = extract_graph(path, {"x": InputSpec((2, 4), "float32")}).nodes.to_pylist()
    assert json.loads(rows[0]["attributes"]) == {"value": "<tensor>"}
    assert json.loads(rows[2]["attributes"]) == {"perm": [0, 1]}
    assert rows[1]["node_name"] == "Add_1" and rows[1]["flops"] == 8


def test_save_and_load_round_trip_and_never_rewrite(tmp_path):
    path, specs = mlp(tmp_path)
    graph = extract_graph(path, specs)
    target = tmp_path / "graphs" / graph.summary["model_sha256"]
    graph.save(target)
    assert GraphExtract.load(target) == graph
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no staging left behind

    marker = target / "marker"
    marker.write_text("kept")
    graph.save(target)
    assert marker.read_text() == "kept"

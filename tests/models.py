"""Tiny real ONNX models for tests, built with onnx.helper (IR 9, opset 17 for ONNX Runtime 1.22)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def tiny_mlp(
    hidden: int = 32, batch: int = 4, features: int = 16, seed: int = 0
) -> onnx.ModelProto:
    """MatMul → Add → Relu → MatMul: ONNX Runtime fuses the first three into one FusedGemm."""
    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.standard_normal((features, hidden)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((hidden, 8)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1/matmul"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1/bias"),
        helper.make_node("Relu", ["hb"], ["a"], name="fc1/relu"),
        helper.make_node("MatMul", ["a", "w2"], ["y"], name="fc2/matmul"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        weights,
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)


def dynamic_input_model() -> onnx.ModelProto:
    """A model whose input has a symbolic batch dimension: needs a sidecar to be measured."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)


def memory_hog_model(elements: int = 400_000_000) -> onnx.ModelProto:
    """ConstantOfShape to `elements` floats (1.6 GB by default) then a reduction: a worker that
    blows through any modest memory limit, as a real out-of-memory model does."""
    shape = numpy_helper.from_array(np.array([elements], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Add", ["x", "x"], ["x2"], name="touch_input"),
        helper.make_node(
            "ConstantOfShape",
            ["shape"],
            ["big"],
            name="allocate",
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        ),
        helper.make_node("ReduceSum", ["big"], ["s"], name="sum", keepdims=1),
        helper.make_node("Add", ["x2", "s"], ["y"], name="combine"),
    ]
    graph = helper.make_graph(
        nodes,
        "memory_hog",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [shape],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)


def slow_model(size: int = 1024) -> onnx.ModelProto:
    """A MatMul chain big enough that a benchmark with many iterations outlives a short timeout."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((size, size)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"], name="mm0")]
    for i in range(1, 8):
        nodes.append(helper.make_node("MatMul", [f"h{i - 1}", "w"], [f"h{i}"], name=f"mm{i}"))
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size, size])],
        [helper.make_tensor_value_info("h7", TensorProto.FLOAT, [size, size])],
        [w],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)


def write_corrupt_model(path: Path) -> Path:
    """A truncated ONNX file: the first half of a real model's bytes."""
    data = tiny_mlp().SerializeToString()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) // 2])
    return path


def conv_block_model(seed: int = 0) -> onnx.ModelProto:
    """Conv → BatchNorm → Relu → MaxPool → Conv → BatchNorm, a residual Add, Relu, global pool:
    what ONNX Runtime's CPU provider fuses (Conv+BN+Relu, residual Add into Conv) and re-lays out
    (NCHWc with ReorderInput/ReorderOutput)."""
    rng = np.random.default_rng(seed)

    def init(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    weights = [init("w1", (16, 3, 3, 3)), init("w2", (16, 16, 3, 3))]
    for i in (1, 2):
        weights += [
            numpy_helper.from_array(
                np.abs(rng.standard_normal(16)).astype(np.float32) + 0.5, f"bn{i}.{p}"
            )
            for p in ("scale", "bias", "mean", "var")
        ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization",
            ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["b1"],
            name="bn1",
        ),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization",
            ["c2", "bn2.scale", "bn2.bias", "bn2.mean", "bn2.var"],
            ["b2"],
            name="bn2",
        ),
        helper.make_node("Add", ["b2", "p1"], ["s"], name="residual_add"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["y"], name="global_pool"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
        weights,
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)


def gelu_model(seed: int = 0) -> onnx.ModelProto:
    """MatMul → bias Add → Erf-GELU: ONNX Runtime fuses the bias and GELU into one BiasGelu."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "b")
    consts = [
        numpy_helper.from_array(np.array(1.4142135, dtype=np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="up/matmul"),
        helper.make_node("Add", ["m", "b"], ["h"], name="up/bias"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="gelu/div"),
        helper.make_node("Erf", ["d"], ["e"], name="gelu/erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="gelu/add"),
        helper.make_node("Mul", ["h", "a"], ["ha"], name="gelu/mul"),
        helper.make_node("Mul", ["ha", "half"], ["y"], name="gelu/half"),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 128])],
        [w, b, *consts],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)


def slower_mlp(extra_layers: int = 40, **mlp_dims) -> onnx.ModelProto:
    """The tiny MLP with many extra square MatMul+Relu layers: the same model made much slower."""
    model = tiny_mlp(**mlp_dims)
    rng = np.random.default_rng(3)
    graph = model.graph
    last = "y"
    graph.output[0].name = f"y{extra_layers}"
    for i in range(extra_layers):
        w = numpy_helper.from_array(
            rng.standard_normal((8, 8)).astype(np.float32) * 0.3, f"extra{i}.w"
        )
        graph.initializer.append(w)
        graph.node.append(
            helper.make_node("MatMul", [last, w.name], [f"m{i}"], name=f"extra{i}/matmul")
        )
        graph.node.append(helper.make_node("Relu", [f"m{i}"], [f"y{i + 1}"], name=f"extra{i}/relu"))
        last = f"y{i + 1}"
    return model


def transformer_block(rows: int = 64, hidden: int = 256, seed: int = 0) -> onnx.ModelProto:
    """A transformer MLP block as an exporter writes it, op by op: a LayerNorm (ReduceMean, Sub,
    Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), MatMul + bias Add, Erf-GELU, MatMul + bias Add,
    Relu, a residual Add. ONNX Runtime fuses the LayerNorm and the MatMul + Add pairs at every
    level, the GELU (GeluFusion) and Gemm + Relu (FusedGemm) from `extended` on."""
    rng = np.random.default_rng(seed)

    def init(name, value):
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    weights = [
        init("ln.gamma", np.ones(hidden)), init("ln.beta", np.zeros(hidden)), init("eps", 1e-5),
        init("two", 2.0), init("sqrt2", 1.4142135), init("one", 1.0), init("half", 0.5),
        init("fc1.w", rng.standard_normal((hidden, 4 * hidden)) * 0.05),
        init("fc1.b", rng.standard_normal(4 * hidden)),
        init("fc2.w", rng.standard_normal((4 * hidden, hidden)) * 0.05),
        init("fc2.b", rng.standard_normal(hidden)),
    ]  # fmt: skip
    node = helper.make_node
    nodes = [
        node("ReduceMean", ["x"], ["mu"], name="ln/mean", axes=[-1]),
        node("Sub", ["x", "mu"], ["xc"], name="ln/sub"),
        node("Pow", ["xc", "two"], ["sq"], name="ln/pow"),
        node("ReduceMean", ["sq"], ["var"], name="ln/var", axes=[-1]),
        node("Add", ["var", "eps"], ["ve"], name="ln/add_eps"),
        node("Sqrt", ["ve"], ["sd"], name="ln/sqrt"),
        node("Div", ["xc", "sd"], ["xn"], name="ln/div"),
        node("Mul", ["xn", "ln.gamma"], ["xg"], name="ln/scale"),
        node("Add", ["xg", "ln.beta"], ["ln"], name="ln/shift"),
        node("MatMul", ["ln", "fc1.w"], ["h"], name="fc1/matmul"),
        node("Add", ["h", "fc1.b"], ["hb"], name="fc1/bias"),
        node("Div", ["hb", "sqrt2"], ["d"], name="gelu/div"),
        node("Erf", ["d"], ["e"], name="gelu/erf"),
        node("Add", ["e", "one"], ["a"], name="gelu/add"),
        node("Mul", ["hb", "a"], ["ha"], name="gelu/mul"),
        node("Mul", ["ha", "half"], ["g"], name="gelu/half"),
        node("MatMul", ["g", "fc2.w"], ["o"], name="fc2/matmul"),
        node("Add", ["o", "fc2.b"], ["ob"], name="fc2/bias"),
        node("Relu", ["ob"], ["r"], name="fc2/relu"),
        node("Add", ["r", "x"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, hidden])],
        weights,
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=9)

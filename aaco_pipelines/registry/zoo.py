"""The bundled model zoo: six small ONNX models the project builds itself, reproducibly.

A fresh install has something to measure without downloads, and every workload signature the
analysis stages look for has a model that shows it:

- resnet_cnn: a ResNet-style CNN (conv, batch-norm, residual blocks, pooling, classifier), the
  classic vision workload.
- bert_encoder: a 4-layer BERT-style encoder (attention, LayerNormalization, Erf GELU) with
  dynamic batch and sequence dims, so it needs its sidecar and exercises ONNX Runtime fusions.
- mlp: a 4-layer perceptron, the simplest dense workload.
- launch_bound: a chain of hundreds of tiny elementwise ops, where per-op dispatch dominates.
- memory_bound: elementwise ops and reductions over a 32 MiB tensor, where bytes moved dominate.
- compute_bound: four 512x1024x1024 MatMuls, where FLOPs dominate.

Weights come from fixed numpy seeds, so two builds write identical files (and identical hashes).
Every node has a readable unique name ("layer0/attention/q_proj") because later stages attribute
time to node names.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.sidecar import InputSpec, ModelSidecar

ZOO_MODEL_NAMES: tuple[str, ...] = (
    "resnet_cnn",
    "bert_encoder",
    "mlp",
    "launch_bound",
    "memory_bound",
    "compute_bound",
)

# ONNX Runtime 1.22 loads IR <= 10; onnx 1.23 would otherwise stamp IR 14.
IR_VERSION = 9
OPSET = 17
FLOAT = TensorProto.FLOAT


class _Graph:
    """Collects nodes and weights. Each node's output is named after the node, so profiler
    traces, graphs and reports all speak the same names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, TensorProto] = {}

    def weight(self, name: str, shape: list[int], std: float) -> str:
        values = self.rng.standard_normal(shape) * std
        return self.const(name, values)

    def const(self, name: str, values, dtype=np.float32) -> str:
        if name not in self.initializers:
            array = np.asarray(values, dtype=dtype)
            self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def op(self, op_type: str, inputs: list[str], name: str, output: str | None = None, **attrs):
        out = output or name
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def model(self, name: str, doc: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, inputs, outputs, list(self.initializers.values()), doc_string=doc
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="aaco-pipelines-zoo",
            doc_string=doc,
        )
        onnx.checker.check_model(model, full_check=True)
        return model


def _tensor(name: str, dims: list, elem_type: int = FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, dims)


def _linear(g: _Graph, x: str, name: str, d_in: int, d_out: int) -> str:
    """MatMul + bias Add, the pattern ONNX Runtime fuses and transformer exports emit."""
    w = g.weight(f"{name}.weight", [d_in, d_out], std=1 / math.sqrt(d_in))
    b = g.weight(f"{name}.bias", [d_out], std=0.02)
    return g.op("Add", [g.op("MatMul", [x, w], f"{name}/matmul"), b], f"{name}/bias_add")


def _conv_bn(g: _Graph, x: str, name: str, channels_in: int, channels_out: int) -> str:
    """3x3 same-padding Conv + BatchNormalization (inference mode)."""
    w = g.weight(
        f"{name}/conv.weight",
        [channels_out, channels_in, 3, 3],
        std=math.sqrt(2 / (channels_in * 9)),
    )
    y = g.op("Conv", [x, w], f"{name}/conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    params = [
        g.const(f"{name}/bn.scale", g.rng.uniform(0.8, 1.2, channels_out)),
        g.const(f"{name}/bn.bias", g.rng.normal(0, 0.1, channels_out)),
        g.const(f"{name}/bn.mean", g.rng.normal(0, 0.1, channels_out)),
        g.const(f"{name}/bn.var", g.rng.uniform(0.5, 1.5, channels_out)),
    ]
    return g.op("BatchNormalization", [y, *params], f"{name}/bn", epsilon=1e-5)


def _layer_norm(g: _Graph, x: str, name: str, hidden: int) -> str:
    gamma = g.const(f"{name}.gamma", np.ones(hidden))
    beta = g.const(f"{name}.beta", np.zeros(hidden))
    return g.op("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-12)


def _resnet_cnn() -> onnx.ModelProto:
    """Stem, three residual blocks, pooling and a 10-way classifier on a 64x64 image."""
    g, width, classes = _Graph(seed=1), 32, 10
    x = g.op("Relu", [_conv_bn(g, "image", "stem", 3, width)], "stem/relu")
    x = g.op("MaxPool", [x], "stem/maxpool", kernel_shape=[2, 2], strides=[2, 2])
    for i in range(3):
        name = f"block{i}"
        y = g.op("Relu", [_conv_bn(g, x, f"{name}/0", width, width)], f"{name}/0/relu")
        y = _conv_bn(g, y, f"{name}/1", width, width)
        x = g.op("Relu", [g.op("Add", [y, x], f"{name}/skip_add")], f"{name}/relu")
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "head/global_pool")], "head/flatten")
    w = g.weight("head/fc.weight", [width, classes], std=1 / math.sqrt(width))
    b = g.weight("head/fc.bias", [classes], std=0.02)
    g.op("Gemm", [x, w, b], "head/fc", output="logits")
    return g.model(
        "resnet_cnn",
        "ResNet-style CNN: the classic convolutional vision workload.",
        [_tensor("image", [1, 3, 64, 64])],
        [_tensor("logits", [1, classes])],
    )


def _bert_encoder() -> onnx.ModelProto:
    """Four BERT layers; positions are sliced to the input's sequence length (<= 128)."""
    g = _Graph(seed=2)
    hidden, heads, ffn, vocab, max_positions, layers = 128, 4, 512, 1000, 128, 4
    head_dim = hidden // heads
    words = g.weight("embeddings/word.weight", [vocab, hidden], std=0.02)
    positions = g.weight("embeddings/position.weight", [max_positions, hidden], std=0.02)
    seq_len = g.op("Shape", ["input_ids"], "embeddings/sequence_length", start=1, end=2)
    zero = g.const("const/zero", [0], np.int64)
    pos = g.op("Slice", [positions, zero, seq_len, zero], "embeddings/position_slice")
    x = g.op("Gather", [words, "input_ids"], "embeddings/word_gather")
    x = g.op("Add", [x, pos], "embeddings/position_add")
    x = _layer_norm(g, x, "embeddings/layer_norm", hidden)

    split = g.const("const/split_heads", [0, -1, heads, head_dim], np.int64)
    merge = g.const("const/merge_heads", [0, -1, hidden], np.int64)
    scale = g.const("const/attention_scale", math.sqrt(head_dim))
    sqrt2 = g.const("const/sqrt2", math.sqrt(2))
    one, half = g.const("const/one", 1.0), g.const("const/half", 0.5)
    for i in range(layers):
        att = f"layer{i}/attention"
        q, k, v = (
            g.op(
                "Reshape",
                [_linear(g, x, f"{att}/{p}_proj", hidden, hidden), split],
                f"{att}/{p}_split_heads",
            )
            for p in "qkv"
        )
        q = g.op("Transpose", [q], f"{att}/q_transpose", perm=[0, 2, 1, 3])
        k = g.op("Transpose", [k], f"{att}/k_transpose", perm=[0, 2, 3, 1])
        v = g.op("Transpose", [v], f"{att}/v_transpose", perm=[0, 2, 1, 3])
        scores = g.op("Div", [g.op("MatMul", [q, k], f"{att}/qk_matmul"), scale], f"{att}/scale")
        probs = g.op("Softmax", [scores], f"{att}/softmax", axis=-1)
        context = g.op("MatMul", [probs, v], f"{att}/context_matmul")
        context = g.op("Transpose", [context], f"{att}/context_transpose", perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge], f"{att}/merge_heads")
        out = _linear(g, context, f"{att}/out_proj", hidden, hidden)
        x = _layer_norm(
            g, g.op("Add", [out, x], f"{att}/residual_add"), f"{att}/layer_norm", hidden
        )

        ff = f"layer{i}/ffn"
        h = _linear(g, x, f"{ff}/up_proj", hidden, ffn)
        # GELU as x * 0.5 * (1 + erf(x / sqrt(2))): the Erf pattern ONNX Runtime fuses.
        erf = g.op("Erf", [g.op("Div", [h, sqrt2], f"{ff}/gelu/div")], f"{ff}/gelu/erf")
        h = g.op("Mul", [h, g.op("Add", [erf, one], f"{ff}/gelu/add")], f"{ff}/gelu/mul")
        h = g.op("Mul", [h, half], f"{ff}/gelu/half")
        out = _linear(g, h, f"{ff}/down_proj", ffn, hidden)
        x = _layer_norm(g, g.op("Add", [out, x], f"{ff}/residual_add"), f"{ff}/layer_norm", hidden)
    g.op("Identity", [x], "output", output="last_hidden_state")
    return g.model(
        "bert_encoder",
        "BERT-style encoder: attention, LayerNormalization and GELU, with dynamic dims.",
        [_tensor("input_ids", ["batch", "sequence"], TensorProto.INT64)],
        [_tensor("last_hidden_state", ["batch", "sequence", hidden])],
    )


def _mlp() -> onnx.ModelProto:
    """Four Gemm layers with Relu between them, batch 32."""
    g, widths = _Graph(seed=3), [256, 256, 256, 256, 10]
    x = "features"
    for i, (d_in, d_out) in enumerate(pairwise(widths)):
        w = g.weight(f"layer{i}/fc.weight", [d_in, d_out], std=math.sqrt(2 / d_in))
        b = g.weight(f"layer{i}/fc.bias", [d_out], std=0.02)
        last = i == len(widths) - 2
        x = g.op("Gemm", [x, w, b], f"layer{i}/fc", output="logits" if last else None)
        if not last:
            x = g.op("Relu", [x], f"layer{i}/relu")
    return g.model(
        "mlp",
        "Multi-layer perceptron: the simplest dense workload.",
        [_tensor("features", [32, 256])],
        [_tensor("logits", [32, widths[-1]])],
    )


# One launch_bound step: op and the constant it takes. No two neighbours form a pattern ONNX
# Runtime fuses, and the chain depends on the input, so the optimizer keeps every node.
_LAUNCH_STEP = (
    ("Add", "shift"),
    ("Mul", "gain"),
    ("Sigmoid", None),
    ("Sub", "center"),
    ("Tanh", None),
    ("Add", "bias"),
    ("Relu", None),
    ("Mul", "scale"),
)


def _launch_bound(steps: int = 60) -> onnx.ModelProto:
    """steps x 8 tiny ops on a [1, 16] tensor: dispatch overhead, not math, sets the time."""
    g, width = _Graph(seed=4), 16
    ranges = {
        "shift": (-0.1, 0.1),
        "gain": (0.5, 1.5),
        "center": (0.4, 0.6),
        "bias": (0.0, 0.2),
        "scale": (0.8, 1.2),
    }
    x = "x"
    for i in range(steps):
        for op_type, const in _LAUNCH_STEP:
            name = f"step{i:02d}/{op_type.lower()}" + (f"_{const}" if const else "")
            inputs = [x]
            if const:
                inputs.append(g.const(f"const/{const}", g.rng.uniform(*ranges[const], width)))
            x = g.op(op_type, inputs, name)
    g.op("Identity", [x], "output", output="y")
    return g.model(
        "launch_bound",
        "Launch-bound signature: hundreds of tiny elementwise ops, dispatch overhead dominates.",
        [_tensor("x", [1, width])],
        [_tensor("y", [1, width])],
    )


def _memory_bound() -> onnx.ModelProto:
    """Elementwise passes and reductions over [8, 1024, 1024]: about one flop per 8 bytes moved."""
    g, shape = _Graph(seed=5), [8, 1024, 1024]
    x = g.op("Mul", ["x", g.weight("const/column_gain", [1024], std=0.1)], "scale")
    x = g.op("Add", [x, g.weight("const/column_bias", [1024], std=0.1)], "shift")
    x = g.op("Relu", [x], "relu")
    row_mean = g.op("ReduceMean", [x], "row_mean", axes=[-1], keepdims=1)
    centered = g.op("Sub", [x, row_mean], "center")
    squared = g.op("Mul", [centered, centered], "square")
    last_axis = g.const("const/last_axis", [-1], np.int64)
    middle_axis = g.const("const/middle_axis", [1], np.int64)
    g.op("ReduceSum", [squared, last_axis], "row_energy", keepdims=1)
    g.op("ReduceSum", [centered, middle_axis], "column_sum", keepdims=1)
    g.op("ReduceMax", [g.op("Abs", [centered], "abs")], "row_peak", axes=[-1], keepdims=1)
    return g.model(
        "memory_bound",
        "Memory-bound signature: elementwise ops and reductions over a 32 MiB tensor.",
        [_tensor("x", shape)],
        [
            _tensor("row_energy", [8, 1024, 1]),
            _tensor("column_sum", [8, 1, 1024]),
            _tensor("row_peak", [8, 1024, 1]),
        ],
    )


def _compute_bound(layers: int = 4) -> onnx.ModelProto:
    """Four [512, 1024] x [1024, 1024] MatMuls (~1.07 GFLOP each): FLOPs set the time."""
    g, rows, width = _Graph(seed=6), 512, 1024
    x = "x"
    for i in range(layers):
        w = g.weight(f"layer{i}/matmul.weight", [width, width], std=math.sqrt(2 / width))
        last = i == layers - 1
        x = g.op("MatMul", [x, w], f"layer{i}/matmul", output="y" if last else None)
        if not last:
            x = g.op("Relu", [x], f"layer{i}/relu")
    return g.model(
        "compute_bound",
        "Compute-bound signature: large GEMMs, arithmetic dominates.",
        [_tensor("x", [rows, width])],
        [_tensor("y", [rows, width])],
    )


_BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet_cnn": _resnet_cnn,
    "bert_encoder": _bert_encoder,
    "mlp": _mlp,
    "launch_bound": _launch_bound,
    "memory_bound": _memory_bound,
    "compute_bound": _compute_bound,
}

# Iteration counts keep one full zoo measurement (warmup + measured + profiled, all six models)
# near 5 s of inference on two CPU cores, far under the 40 s budget: the sub-millisecond models
# get many samples for stable statistics, the ~20-40 ms signature models fewer.
_QUICK = {"warmup_iterations": 10, "measured_iterations": 200, "profiled_iterations": 10}
_HEAVY = {"warmup_iterations": 5, "measured_iterations": 50, "profiled_iterations": 10}
_SIDECARS: dict[str, ModelSidecar] = {
    "resnet_cnn": ModelSidecar(tags={"zoo": "true", "family": "cnn"}, **_QUICK),
    "bert_encoder": ModelSidecar(
        inputs={"input_ids": InputSpec(shape=(1, 64), dtype="int64", low=0, high=1000)},
        tags={"zoo": "true", "family": "transformer"},
        **_QUICK,
    ),
    "mlp": ModelSidecar(tags={"zoo": "true", "family": "mlp"}, **_QUICK),
    "launch_bound": ModelSidecar(tags={"zoo": "true", "signature": "launch-bound"}, **_QUICK),
    "memory_bound": ModelSidecar(tags={"zoo": "true", "signature": "memory-bound"}, **_HEAVY),
    "compute_bound": ModelSidecar(tags={"zoo": "true", "signature": "compute-bound"}, **_HEAVY),
}


def _check_name(name: str) -> None:
    if name not in _BUILDERS:
        raise AacoInputError(
            f"unknown zoo model '{name}'", fix=f"use one of {', '.join(ZOO_MODEL_NAMES)}"
        )


def build_model(name: str) -> onnx.ModelProto:
    """One zoo model, checked with onnx.checker (full_check)."""
    _check_name(name)
    return _BUILDERS[name]()


def zoo_sidecar(name: str) -> ModelSidecar:
    """How to feed and measure one zoo model."""
    _check_name(name)
    return _SIDECARS[name]


def build_zoo(registry_dir: Path, *, only_if_empty: bool = False) -> list[Path]:
    """Write <name>.onnx and <name>.yaml for every zoo model; return the .onnx paths.

    only_if_empty leaves a registry that already has any *.onnx file alone (returns []), so the
    zoo seeds a fresh install without mixing into a user's models. Each sidecar is written before
    its model and every file is replaced atomically, so a scanner never sees a half-written file
    or a model without its sidecar.
    """
    registry_dir = Path(registry_dir)
    try:
        registry_dir.mkdir(parents=True, exist_ok=True)
        if only_if_empty and any(registry_dir.glob("*.onnx")):
            return []
        paths = []
        for name in ZOO_MODEL_NAMES:
            model_path = registry_dir / f"{name}.onnx"
            _write_atomically(model_path.with_suffix(".yaml"), zoo_sidecar(name).save)
            data = build_model(name).SerializeToString()
            _write_atomically(model_path, lambda tmp, data=data: tmp.write_bytes(data))
            paths.append(model_path)
    except OSError as exc:
        raise AacoInputError(
            f"cannot write the model zoo ({exc})",
            path=registry_dir,
            fix="point the registry at a writable folder",
        ) from exc
    return paths


def _write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """write() a temp file beside path, then rename it over path in one step."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)

"""The bundled model zoo: seven small ONNX models the project builds itself, reproducibly.

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
- llama_decoder: a 2-layer Llama decoder with a KV cache (RMSNorm, rotary embeddings, grouped-
  query attention, SwiGLU) in the Optimum decoder-with-past convention: an LLM generation
  workload (prefill, then one decode step per token), measured for TTFT and TPOT under load.

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
from aaco_pipelines.registry.workload import Curves, GenerationWorkload

ZOO_MODEL_NAMES: tuple[str, ...] = (
    "resnet_cnn",
    "bert_encoder",
    "mlp",
    "launch_bound",
    "memory_bound",
    "compute_bound",
    "llama_decoder",
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


# The most negative float32: added to masked scores it leaves a fully masked row all-equal (a
# uniform softmax, as Hugging Face's eager attention gives), where -inf would give NaN.
_MASKED = float(np.finfo(np.float32).min)


def _rms_norm(g: _Graph, x: str, name: str, hidden: int) -> str:
    """Llama RMSNorm, x / sqrt(mean(x^2) + eps) * weight, in primitive ops (opset 17 has no
    RMSNormalization): the pattern exported Llamas carry. Weights near 1, not exactly 1, so a
    comparison with Hugging Face checks that they are applied."""
    w = g.const(f"{name}.weight", 1 + 0.1 * g.rng.standard_normal(hidden))
    eps = g.const("const/rms_eps", 1e-6)
    mean = g.op("ReduceMean", [g.op("Mul", [x, x], f"{name}/square")], f"{name}/mean", axes=[-1])
    rms = g.op("Sqrt", [g.op("Add", [mean, eps], f"{name}/add_eps")], f"{name}/sqrt")
    return g.op("Mul", [g.op("Div", [x, rms], f"{name}/normalize"), w], f"{name}/scale")


def _matmul(g: _Graph, x: str, name: str, d_in: int, d_out: int) -> str:
    """A bias-free projection. std 1/sqrt(d_in) keeps activations near unit scale, so attention
    is far from uniform and rotary, masks and GQA all move the logits measurably."""
    w = g.weight(f"{name}.weight", [d_in, d_out], std=1 / math.sqrt(d_in))
    return g.op("MatMul", [x, w], name)


def _rotary_tables(g: _Graph, head_dim: int, max_positions: int, theta: float = 10000.0):
    """cos and sin of [max_positions, head_dim] gathered by position_ids to [B, 1, S, head_dim]:
    Hugging Face's frequencies, each repeated for both halves (the rotate_half layout)."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    heads_axis = g.const("const/axis_1", [1], np.int64)
    tables = []
    for fn in ("cos", "sin"):
        table = g.const(f"rotary/{fn}_table", getattr(np, fn)(angles))
        gathered = g.op("Gather", [table, "position_ids"], f"rotary/{fn}_gather")
        tables.append(g.op("Unsqueeze", [gathered, heads_axis], f"rotary/{fn}_unsqueeze"))
    return tables


def _rotary(g: _Graph, x: str, name: str, cos: str, sin: str, head_dim: int) -> str:
    """x * cos + rotate_half(x) * sin on [B, heads, S, head_dim]; rotate_half(x) is
    concat(-x[..., d/2:], x[..., :d/2]), Hugging Face's convention."""
    zero, last = g.const("const/zero", [0], np.int64), g.const("const/axis_last", [-1], np.int64)
    half = g.const("const/half_head_dim", [head_dim // 2], np.int64)
    end = g.const("const/head_dim", [head_dim], np.int64)
    x1 = g.op("Slice", [x, zero, half, last], f"{name}/first_half")
    x2 = g.op("Slice", [x, half, end, last], f"{name}/second_half")
    rotated = g.op("Concat", [g.op("Neg", [x2], f"{name}/neg"), x1], f"{name}/rotate_half", axis=-1)
    return g.op(
        "Add",
        [g.op("Mul", [x, cos], f"{name}/mul_cos"), g.op("Mul", [rotated, sin], f"{name}/mul_sin")],
        f"{name}/add",
    )


def _attention_mask(g: _Graph) -> str:
    """Additive [B, 1, S, T] mask built in the graph: query i sits at position past + i and sees
    keys 0..past + i whose attention_mask is not 0. Positions count cache slots, not
    position_ids, as in Hugging Face, so left padding shifts position_ids only."""
    one = g.const("const/scalar_one", 1, np.int64)
    zero = g.const("const/scalar_zero", 0, np.int64)
    total = g.op("Shape", ["attention_mask"], "mask/mask_shape")
    total = g.op("Gather", [total, one], "mask/total_sequence_length", axis=0)
    seq = g.op("Shape", ["input_ids"], "mask/ids_shape")
    seq = g.op("Gather", [seq, one], "mask/sequence_length", axis=0)
    past = g.op("Sub", [total, seq], "mask/past_sequence_length")
    query = g.op("Range", [past, total, one], "mask/query_positions")
    key = g.op("Range", [zero, total, one], "mask/key_positions")
    query = g.op("Unsqueeze", [query, g.const("const/axis_1", [1], np.int64)], "mask/query_column")
    causal = g.op("LessOrEqual", [key, query], "mask/causal")  # [S, T]
    padding = g.op("Cast", ["attention_mask"], "mask/padding", to=TensorProto.BOOL)
    axes = g.const("const/axes_1_2", [1, 2], np.int64)
    padding = g.op("Unsqueeze", [padding, axes], "mask/padding_unsqueeze")  # [B, 1, 1, T]
    allowed = g.op("And", [causal, padding], "mask/allowed")  # [B, 1, S, T]
    visible, masked = g.const("const/visible", 0.0), g.const("const/masked", _MASKED)
    return g.op("Where", [allowed, visible, masked], "mask/additive")


def _repeat_kv(g: _Graph, x: str, name: str, heads: int, groups: int, head_dim: int) -> str:
    """[B, kv_heads, T, d] -> [B, heads, T, d]: each KV head serves its group of query heads
    (Hugging Face's repeat_kv, as Unsqueeze/Expand/Reshape)."""
    x = g.op("Unsqueeze", [x, g.const("const/axis_2", [2], np.int64)], f"{name}_unsqueeze")
    repeat = g.const("const/repeat_kv", [1, 1, groups, 1, 1], np.int64)
    x = g.op("Expand", [x, repeat], f"{name}_repeat")
    merge = g.const("const/merge_kv_groups", [0, heads, -1, head_dim], np.int64)
    return g.op("Reshape", [x, merge], f"{name}_merge_groups")


def _attention(g, x, name, layer, mask, rotary, hidden, heads, kv_heads) -> str:
    """Grouped-query self-attention with a KV cache. The new K (after rotary) and V are appended
    to the past on the sequence axis and returned as present, one copy per KV head as Hugging
    Face's cache holds them; only then are they repeated for the query heads."""
    head_dim, groups = hidden // heads, heads // kv_heads
    split = g.const("const/split_heads", [0, 0, -1, head_dim], np.int64)
    projected = {}
    for p, n in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
        y = _matmul(g, x, f"{name}/{p}_proj", hidden, n * head_dim)
        y = g.op("Reshape", [y, split], f"{name}/{p}_split_heads")
        projected[p] = g.op("Transpose", [y], f"{name}/{p}_transpose", perm=[0, 2, 1, 3])
    q = _rotary(g, projected["q"], f"{name}/q_rotary", *rotary, head_dim)
    k = _rotary(g, projected["k"], f"{name}/k_rotary", *rotary, head_dim)
    present = {}
    for p, new in (("key", k), ("value", projected["v"])):
        past, out = f"past_key_values.{layer}.{p}", f"present.{layer}.{p}"
        present[p] = g.op("Concat", [past, new], f"{name}/present_{p}", output=out, axis=2)
    k, v = (_repeat_kv(g, present[p], f"{name}/{p}", heads, groups, head_dim) for p in present)
    k = g.op("Transpose", [k], f"{name}/key_transpose", perm=[0, 1, 3, 2])
    scores = g.op("MatMul", [q, k], f"{name}/qk_matmul")
    scale = g.const(f"const/attention_scale_{head_dim}", head_dim**-0.5)
    scores = g.op("Add", [g.op("Mul", [scores, scale], f"{name}/scale"), mask], f"{name}/mask")
    probs = g.op("Softmax", [scores], f"{name}/softmax", axis=-1)
    context = g.op("MatMul", [probs, v], f"{name}/context_matmul")
    context = g.op("Transpose", [context], f"{name}/context_transpose", perm=[0, 2, 1, 3])
    merge = g.const("const/merge_heads", [0, 0, hidden], np.int64)
    context = g.op("Reshape", [context, merge], f"{name}/merge_heads")
    return _matmul(g, context, f"{name}/o_proj", hidden, hidden)


def _swiglu(g: _Graph, x: str, name: str, hidden: int, intermediate: int) -> str:
    """down(silu(gate(x)) * up(x)), SiLU as x * Sigmoid(x): how exporters write it at opset 17."""
    gate = _matmul(g, x, f"{name}/gate_proj", hidden, intermediate)
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"{name}/sigmoid")], f"{name}/silu")
    up = _matmul(g, x, f"{name}/up_proj", hidden, intermediate)
    h = g.op("Mul", [silu, up], f"{name}/gate_mul")
    return _matmul(g, h, f"{name}/down_proj", intermediate, hidden)


def llama_decoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 512,
    max_positions: int = 512,
    seed: int = 7,
) -> onnx.ModelProto:
    """A Llama decoder (Hugging Face LlamaForCausalLM) with a KV cache, for generation runs.

    Inputs and outputs follow the decoder-with-past convention of Hugging Face Optimum and ONNX
    Runtime GenAI: input_ids, attention_mask, position_ids and past_key_values.{i}.key/value in,
    logits and present.{i}.key/value out. Prefill passes past tensors of length 0; each decode
    step passes one token and the previous step's presents. Matches Hugging Face's eager
    LlamaForCausalLM given the same weights (tests/registry/test_llama_decoder.py).
    """
    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise AacoInputError(
            f"llama_decoder: hidden {hidden}, heads {heads}, kv_heads {kv_heads} do not split",
            fix="make hidden divisible by heads (an even head_dim) and heads by kv_heads",
        )
    g, head_dim = _Graph(seed=seed), hidden // heads
    embed = g.weight("embed_tokens.weight", [vocab, hidden], std=1.0)  # unit scale, as _matmul
    x = g.op("Gather", [embed, "input_ids"], "embed_tokens")
    rotary = _rotary_tables(g, head_dim, max_positions)
    mask = _attention_mask(g)
    for i in range(layers):
        h = _rms_norm(g, x, f"layer{i}/input_layernorm", hidden)
        h = _attention(g, h, f"layer{i}/attention", i, mask, rotary, hidden, heads, kv_heads)
        x = g.op("Add", [x, h], f"layer{i}/attention_residual")
        h = _rms_norm(g, x, f"layer{i}/post_attention_layernorm", hidden)
        h = _swiglu(g, h, f"layer{i}/mlp", hidden, intermediate)
        x = g.op("Add", [x, h], f"layer{i}/mlp_residual")
    x = _rms_norm(g, x, "norm", hidden)
    lm_head = g.weight("lm_head.weight", [hidden, vocab], std=1 / math.sqrt(hidden))
    g.op("MatMul", [x, lm_head], "lm_head", output="logits")

    int64 = TensorProto.INT64
    cache = ["batch_size", kv_heads, "past_sequence_length", head_dim]
    present = ["batch_size", kv_heads, "total_sequence_length", head_dim]
    kv = [(i, p) for i in range(layers) for p in ("key", "value")]
    return g.model(
        "llama_decoder",
        "Llama decoder with a KV cache: GQA attention, rotary, RMSNorm, SwiGLU.",
        [
            _tensor("input_ids", ["batch_size", "sequence_length"], int64),
            _tensor("attention_mask", ["batch_size", "total_sequence_length"], int64),
            _tensor("position_ids", ["batch_size", "sequence_length"], int64),
            *(_tensor(f"past_key_values.{i}.{p}", cache) for i, p in kv),
        ],
        [
            _tensor("logits", ["batch_size", "sequence_length", vocab]),
            *(_tensor(f"present.{i}.{p}", present) for i, p in kv),
        ],
    )


_BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet_cnn": _resnet_cnn,
    "bert_encoder": _bert_encoder,
    "mlp": _mlp,
    "launch_bound": _launch_bound,
    "memory_bound": _memory_bound,
    "compute_bound": _compute_bound,
    "llama_decoder": llama_decoder,
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
    # Sized for a 2-core CI host: a few seconds of single-stream and server load (at a rate it
    # carries with room to spare), and short curves.
    "llama_decoder": ModelSidecar(
        tags={"zoo": "true", "family": "llm"},
        warmup_iterations=2,
        profiled_iterations=3,
        generation=GenerationWorkload(
            prompt_tokens=32,
            output_tokens=16,
            scenarios=("single_stream", "server"),
            requests=24,
            min_duration_s=1.0,
            batch_size=4,
            target_qps=20.0,
            curves=Curves(batch_sizes=(1, 2, 4), prompt_lengths=(16, 64), repeats=2),
        ),
    ),
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

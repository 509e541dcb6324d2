"""The cost model on real models: the corpus of tests/data/real_models and ONNX Runtime's own
optimized graphs of it. Which nodes stay unknown and why; FLOPs and bytes of real nodes worked out
by hand from their shapes and attributes; fused graphs costing the math of the graphs they replace;
and, on nodes built here, the contrib and quantized rules the corpus does not reach."""

from __future__ import annotations

import json
import math
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from aaco_pipelines.graph.cost.core import GELU, QUANTIZE, TensorInfo, numel
from aaco_pipelines.graph.cost.model import node_cost, output_infos, rule_for
from aaco_pipelines.graph.extract import all_nodes, extract_graph
from aaco_pipelines.graph.inputs import dtype_name, load_model, make_inputs, resolve_input_specs
from aaco_pipelines.registry.sidecar import load_sidecar
from tests.helpers import DATA

CORPUS = DATA / "real_models"
MODELS = sorted(path.stem for path in CORPUS.glob("*.onnx"))
LEVELS = {
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
MS = "com.microsoft"

# The ops no rule costs, each for a reason, and nothing else. Every entry must still occur below
# (a stale entry fails too): ONNX Runtime's CPU provider, at level "all", rewrites float convs
# and pools into its NCHWc layout, whose tensors are channel blocks as wide as the optimizing
# machine's SIMD registers (8 or 16 floats, channels padded up to a whole block). The saved graph
# declares none of their shapes, and the block width is the machine's, not the file's: neither
# their sizes nor the padded work can be told. (A GPU provider never writes these ops.)
ALLOWED_UNKNOWN = {
    (op, "com.microsoft.nchwc")
    for op in "Conv MaxPool AveragePool GlobalAveragePool Upsample ReorderInput "
    "ReorderOutput".split()
}
# Nodes that have a rule but no cost because a shape they need stays unknown, per corpus model
# (absent: none). extract_graph now knows every shape of the corpus models: it feeds the outputs
# the cost model derives for com.microsoft ops (which ONNX shape inference does not know) back to
# inference, computes the small shape arithmetic data propagation stops at (Where/Expand of
# computed shapes in the BERTs, T5 and ViT, Pad with pads computed through Cast in EfficientNet,
# outer-scope values in a Loop body) and gives a Loop's carried state its shape. Upper bounds:
# a regression fails.
SHAPE_GAPS: dict[str, int] = {}
# Optimized graphs that keep the original's arithmetic (fusions only move it into fewer nodes);
# left out: t5_ts and whisper_encoder_ts, where ONNX Runtime folds constant arithmetic and scalar
# multiplies into weights and rewrites RMSNorm's Pow (costed as a transcendental) into one op, and
# the quantized resnet_qdq and mobilenetv2_qoperator, whose Q/DQ pairs fold into QLinear ops.
FOLDED = ("t5_ts", "whisper_encoder_ts", "resnet_qdq", "mobilenetv2_qoperator")
SAME_MATH = [model for model in MODELS if model not in FOLDED]


@cache
def specs(model: str) -> dict:
    path = CORPUS / f"{model}.onnx"
    return resolve_input_specs(load_model(path), load_sidecar(path).inputs, path)


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, Path]:
    """Every corpus model, and ONNX Runtime's optimized graph of it at levels extended and all
    (CPU provider), as "<model>" and "<model>@<level>"."""
    folder = tmp_path_factory.mktemp("optimized")
    paths = {model: CORPUS / f"{model}.onnx" for model in MODELS}
    for model in MODELS:
        for level, value in LEVELS.items():
            options = ort.SessionOptions()
            options.graph_optimization_level = value
            options.log_severity_level = 3  # the "hardware specific" warning of level all
            options.optimized_model_filepath = str(folder / f"{model}@{level}.onnx")
            ort.InferenceSession(str(paths[model]), options, providers=["CPUExecutionProvider"])
            paths[f"{model}@{level}"] = folder / f"{model}@{level}.onnx"
    return paths


@cache
def true_tensors(path: Path) -> tuple[onnx.ModelProto, dict[str, TensorInfo]]:
    """The model and the shape of every top-level tensor as ONNX Runtime produces it."""
    model = load_model(path)
    feeds = make_inputs(specs(path.stem.split("@")[0]))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    listed = {output.name for output in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in listed:
                probe.graph.output.add().name = name
                listed.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    tensors = {
        w.name: TensorInfo(tuple(w.dims), dtype_name(w.data_type)) for w in model.graph.initializer
    }
    tensors.update({name: TensorInfo(a.shape, a.dtype.name) for name, a in feeds.items()})
    for name, value in zip(names, session.run(names, feeds), strict=True):
        tensors[name] = TensorInfo(tuple(value.shape), value.dtype.name)
    return model, tensors


def true_node(model: str, name: str) -> tuple[onnx.NodeProto, dict[str, TensorInfo]]:
    graph, tensors = true_tensors(CORPUS / f"{model}.onnx")
    (node,) = [node for node in graph.graph.node if node.name == name]
    return node, tensors


def table_tensors(graph) -> dict[str, TensorInfo]:
    """Shape and dtype of every tensor, as extract_graph's tables record them."""
    tensors = {}
    for row in graph.edges.to_pylist():
        shape = None if row["shape"] is None else tuple(json.loads(row["shape"]))
        tensors[row["tensor_name"]] = TensorInfo(shape, row["dtype"])
    for row in graph.nodes.to_pylist():
        shapes = json.loads(row["output_shapes"])
        for name, shape, dtype in zip(row["outputs"], shapes, row["output_dtypes"], strict=True):
            if name:
                tensors[name] = TensorInfo(None if shape is None else tuple(shape), dtype)
    return tensors


@cache
def extracted(model: str):
    return extract_graph(CORPUS / f"{model}.onnx", specs(model))


def extracted_node(model: str, name: str) -> tuple[dict, dict[str, TensorInfo]]:
    graph = extracted(model)
    (row,) = [row for row in graph.nodes.to_pylist() if row["node_name"] == name]
    return row, table_tensors(graph)


def shape_of(tensors: dict[str, TensorInfo], name: str) -> tuple[int, ...]:
    shape = tensors[name].shape
    assert shape is not None and None not in shape, name
    return shape


# --- what stays unknown ---------------------------------------------------------------------


def test_only_the_allowed_ops_lack_a_rule_and_other_unknowns_lack_a_shape(variants):
    without_rule: Counter = Counter()
    gaps: Counter = Counter()
    failed = []
    for label, path in variants.items():
        graph = extract_graph(path, specs(label.split("@")[0]))
        tensors = table_tensors(graph)
        nodes = [node for node, _ in all_nodes(load_model(path).graph)]
        rows = graph.nodes.to_pylist()
        assert len(nodes) == len(rows)
        for node, row in zip(nodes, rows, strict=True):
            if row["cost_rule"] != "unknown":
                continue
            if rule_for(node.op_type, node.domain) is None:
                without_rule[(node.op_type, row["domain"])] += 1
                continue
            # A rule answers whenever the shapes it needs are known: the inputs, and the
            # outputs as inference or the rule itself (contrib ops) gives them.
            needed = [tensors.get(n) for n in node.input if n]
            outputs = output_infos(node, tensors)
            needed += [o for n, o in zip(node.output, outputs, strict=True) if n]
            if all(numel(info) is not None for info in needed):
                failed.append((label, row["node_name"], node.op_type))
            gaps[label] += 1
    assert not failed, f"a rule gave no cost with every shape known: {failed}"
    assert set(without_rule) <= ALLOWED_UNKNOWN, set(without_rule) - ALLOWED_UNKNOWN
    assert set(without_rule) == ALLOWED_UNKNOWN, f"stale: {ALLOWED_UNKNOWN - set(without_rule)}"
    for model in MODELS:
        assert gaps[model] <= SHAPE_GAPS.get(model, 0), (model, gaps[model])


@pytest.mark.parametrize(
    "label",
    [
        *MODELS,
        *(f"{model}@extended" for model in MODELS),
        "resnet_qdq@all",  # NHWC QLinearConv and NhwcMaxPool
        "mobilenetv2_qoperator@all",
    ],
)
def test_with_the_shapes_onnxruntime_produces_every_node_has_a_cost(variants, label):
    """Given the true shapes of a run, every top-level node is costed; the output shapes the
    contrib rules derive from their inputs are the shapes ONNX Runtime produced."""
    model, tensors = true_tensors(variants[label])
    for node in model.graph.node:
        cost = node_cost(node, tensors)
        assert cost.rule != "unknown", (label, node.name, node.op_type)
        if node.domain == MS:
            inputs_only = {k: v for k, v in tensors.items() if k not in node.output}
            derived = output_infos(node, inputs_only)
            for name, info in zip(node.output, derived, strict=True):
                assert not name or info == tensors[name], (label, node.op_type, name, info)


def total_flops(path: Path) -> int:
    model, tensors = true_tensors(path)
    return sum(node_cost(node, tensors).flops for node in model.graph.node)


def total_bytes(path: Path) -> int:
    model, tensors = true_tensors(path)
    return sum(node_cost(node, tensors).bytes_moved or 0 for node in model.graph.node)


def test_onnxruntime_fusions_change_the_bytes_not_the_flops(variants):
    """FusedConv, FusedGemm, FusedMatMul, Gelu, QuickGelu, SkipLayerNormalization,
    DynamicQuantizeMatMul, MatMulIntegerToFloat... cost what the nodes they replace cost
    (constant folding of the shape and mask arithmetic aside), and move fewer bytes."""
    for model in SAME_MATH:
        original, fused = variants[model], variants[f"{model}@extended"]
        assert total_flops(fused) == pytest.approx(total_flops(original), rel=1e-4), model
        assert total_bytes(fused) <= total_bytes(original), model
    # The transformer optimizer's Attention, SkipLayerNormalization and BiasGelu against the
    # graph it was made from: the same math but for the mask prologue (32 elements of a 1x32
    # mask made additive, against a ReduceSum of it to a mask index).
    fused, classic = variants["bert_ort_fused"], variants["bert_classic_ts"]
    assert abs(total_flops(fused) - total_flops(classic)) <= 64
    assert total_bytes(fused) < 0.5 * total_bytes(classic)


# --- real nodes, worked out by hand ---------------------------------------------------------


def test_depthwise_conv_of_mobilenetv2():
    row, tensors = extracted_node(
        "mobilenetv2_ts", "/mobilenet_v2/conv_stem/conv_3x3/convolution/Conv"
    )
    attributes = json.loads(row["attributes"])
    x, w, b = (shape_of(tensors, name) for name in row["inputs"])
    (y,) = json.loads(row["output_shapes"])
    n, c, h, width = y
    kh, kw = attributes["kernel_shape"]
    assert attributes["group"] == c == x[1] and w == (c, 1, kh, kw)  # depthwise: C groups of 1
    outputs = n * c * h * width  # 1 x 16 x 48 x 48
    macs = outputs * (x[1] // attributes["group"]) * kh * kw  # one input channel per output
    assert row["flops"] == 2 * macs + outputs  # + the bias
    assert row["flops"] == 2 * 36864 * 9 + 36864
    assert row["bytes_moved"] == 4 * (math.prod(x) + math.prod(w) + math.prod(b) + outputs)


def test_depthwise_qlinear_conv_of_the_qoperator_mobilenetv2():
    name = "/mobilenet_v2/conv_stem/conv_3x3/convolution/Conv_quant"
    row, tensors = extracted_node("mobilenetv2_qoperator", name)
    attributes = json.loads(row["attributes"])
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = row["inputs"]
    (y,) = json.loads(row["output_shapes"])
    outputs = math.prod(y)  # 1 x 16 x 48 x 48 uint8
    c_out, c_in_per_group, kh, kw = shape_of(tensors, w)
    assert (c_out, c_in_per_group, attributes["group"]) == (16, 1, 16)
    macs = outputs * c_in_per_group * kh * kw
    # integer MACs, the int32 bias, and requantizing each output: round(acc * scale) + zp
    assert row["flops"] == 2 * macs + outputs + QUANTIZE * outputs
    one_byte = math.prod(shape_of(tensors, x)) + math.prod(shape_of(tensors, w)) + outputs
    scalars = 3 * 4 + 3 * 1  # x, w, y scales (float32) and zero points (uint8)
    assert row["bytes_moved"] == one_byte + scalars + 4 * c_out  # + the int32 bias


def test_matmul_integer_and_dynamic_quantize_of_the_dynamic_int8_bert():
    row, tensors = extracted_node(
        "bert_dynamic_int8", "/encoder/layer.0/attention/self/key/MatMul_quant"
    )
    a, b, a_zp, b_zp = row["inputs"]
    batch, seq, k = shape_of(tensors, a)
    k_b, n = shape_of(tensors, b)
    assert (batch, seq, k, n) == (1, 32, 64, 64) and k_b == k
    assert row["flops"] == 2 * batch * seq * n * k
    # uint8 A, int8 B, two one-byte zero points, int32 out
    assert row["bytes_moved"] == batch * seq * k + k * n + 1 + 1 + 4 * batch * seq * n

    quantize = "/embeddings/LayerNorm/LayerNormalization_output_0_QuantizeLinear"
    row, tensors = extracted_node("bert_dynamic_int8", quantize)
    x = math.prod(shape_of(tensors, row["inputs"][0]))
    assert row["op_type"] == "DynamicQuantizeLinear" and row["cost_rule"] == "quantize"
    # min and max over x (2 per element), then x quantized (QUANTIZE per element)
    assert row["flops"] == (2 + QUANTIZE) * x
    # float32 x read; uint8 y, float32 scale and uint8 zero point written
    assert row["bytes_moved"] == 4 * x + x + 4 + 1


def test_attention_of_the_fused_bert():
    node, tensors = true_node("bert_ort_fused", "Attention_0")
    heads = helper.get_attribute_value(next(a for a in node.attribute if a.name == "num_heads"))
    x, weights, bias, mask = node.input
    batch, seq, hidden = tensors[x].shape
    assert tensors[weights].shape == (hidden, 3 * hidden) and tensors[mask].shape == (batch,)
    head = hidden // heads  # 64 / 4 = 16
    projection = 2 * batch * seq * hidden * 3 * hidden + batch * seq * 3 * hidden  # + bias
    scores = batch * heads * seq * seq
    # Q.K^T, the scale, the mask, softmax (5 per score), P.V
    attention = 2 * scores * head + scores + scores + 5 * scores + 2 * scores * head
    cost = node_cost(node, tensors)
    assert (cost.flops, cost.rule) == (projection + attention, "attention")
    moved = 4 * (batch * seq * hidden + hidden * 3 * hidden + 3 * hidden + batch * seq * hidden)
    assert cost.bytes_moved == moved + 4 * batch  # + the int32 mask index
    # The same numbers when ONNX shape inference left the output unknown: the rule derives it.
    unknown_out = {k: v for k, v in tensors.items() if k != node.output[0]}
    assert node_cost(node, unknown_out) == cost


def test_skip_layer_norm_and_bias_gelu_of_the_fused_bert():
    node, tensors = true_node("bert_ort_fused", "SkipLayerNorm_AddBias_0")
    x, skip, gamma, beta, bias = node.input
    elements = numel(tensors[x])  # 1 x 32 x 64
    assert tensors[skip].shape == tensors[x].shape and tensors[gamma].shape == (64,)
    cost = node_cost(node, tensors)
    # + skip, + bias, then LayerNormalization (8 per element)
    assert cost.flops == (1 + 1 + 8) * elements
    assert cost.bytes_moved == 4 * (elements + elements + 64 + 64 + 64 + elements)

    node, tensors = true_node("bert_ort_fused", "Gelu_AddBias_0")
    a, b = node.input
    elements = numel(tensors[a])  # 1 x 32 x 128
    cost = node_cost(node, tensors)
    assert cost.flops == (1 + GELU) * elements and GELU == 4 + 4  # erf + 4 multiply-or-adds
    assert cost.bytes_moved == 4 * (elements + 128 + elements)


def test_qlinear_add_global_pool_and_qgemm_of_the_qoperator_mobilenetv2():
    node, tensors = true_node("mobilenetv2_qoperator", "/mobilenet_v2/layer.3/Add_quant")
    elements = numel(tensors[node.input[0]])
    assert tensors[node.input[3]].shape == tensors[node.output[0]].shape
    cost = node_cost(node, tensors)
    assert cost.flops == (1 + QUANTIZE) * elements  # the add, then requantized
    assert cost.bytes_moved == 3 * elements + 3 * 4 + 3 * 1  # A, B, C uint8; scales, zps

    node, tensors = true_node(
        "mobilenetv2_qoperator", "/mobilenet_v2/pooler/GlobalAveragePool_quant"
    )
    n, c, h, w = tensors[node.input[0]].shape
    assert tensors[node.output[0]].shape == (n, c, 1, 1)
    cost = node_cost(node, tensors)
    assert cost.flops == n * c * h * w + QUANTIZE * n * c  # one add per input, requantize
    assert cost.bytes_moved == n * c * h * w + 2 * 4 + 2 * 1 + n * c

    node, tensors = true_node("mobilenetv2_qoperator", "/classifier/Gemm_quant")
    m, k = tensors[node.input[0]].shape
    n, k_b = tensors[node.input[3]].shape  # transB=1
    assert k == k_b and tensors[node.output[0]].shape == (m, n)
    cost = node_cost(node, tensors)
    assert cost.flops == 2 * m * n * k + m * n + QUANTIZE * m * n  # MACs, int32 C, requantize
    assert cost.bytes_moved == m * k + n * k + 4 * n + 3 * 4 + 3 * 1 + m * n


def test_bilinear_resize_of_unet():
    row, tensors = extracted_node("unet_ts", "/ups.2/ups.2.0/Resize")
    x = shape_of(tensors, row["inputs"][0])
    (y,) = json.loads(row["output_shapes"])
    assert json.loads(row["attributes"])["mode"] == "linear"
    assert x == (1, 32, 32, 32) and y == [1, 32, 64, 64]  # H and W doubled
    # each output interpolates 2 x 2 inputs: 4 multiply-adds
    assert row["flops"] == 2 * 2**2 * math.prod(y)
    assert row["bytes_moved"] == 4 * (math.prod(x) + 4 + math.prod(y))  # + the 4 scales


def test_control_flow_nodes_count_no_flops_and_their_own_inputs_and_outputs():
    row, _ = extracted_node("control_flow_cond_dynamo", "node_cond__0")
    assert (row["flops"], row["bytes_moved"], row["cost_rule"]) == (
        0,
        1 + 4 * 32 * 4,
        "control_flow",
    )
    row, _ = extracted_node("control_flow_scan_helper", "rnn/Scan")
    h0, xs, h_last, ys = 4 * 32, 8 * 4 * 32, 4 * 32, 8 * 4 * 32
    assert (row["flops"], row["bytes_moved"]) == (0, 4 * (h0 + xs + h_last + ys))
    # The Loop's output is its loop-carried state, which ONNX shape inference leaves unknown (the
    # body returns it from an If): extract_graph gives it the initial value's shape, as the body
    # keeps it. Its own inputs (trip count, condition, state) and output; the body's Gemm is
    # costed on its own row.
    row, tensors = extracted_node("control_flow_ts", "/Loop")
    assert shape_of(tensors, "/Loop_output_0") == (4, 32)
    assert (row["flops"], row["bytes_moved"], row["cost_rule"]) == (
        0,
        8 + 1 + 4 * 4 * 32 + 4 * 4 * 32,
        "control_flow",
    )
    body = [r for r in extracted("control_flow_ts").nodes.to_pylist() if r["parent_node"]]
    assert any(r["op_type"] == "Gemm" and r["flops"] for r in body)


# --- rules the corpus does not reach, on nodes built here -----------------------------------


def infos(dtype: str = "float32", **shapes) -> dict[str, TensorInfo]:
    return {name: TensorInfo(tuple(shape), dtype) for name, shape in shapes.items()}


def ms_node(op_type: str, inputs, outputs, **attributes) -> onnx.NodeProto:
    return helper.make_node(op_type, inputs, outputs, domain=MS, **attributes)


def test_matmul_nbits_counts_the_product_and_the_packed_weight():
    k, n, bits, block = 4096, 1024, 4, 32
    blocks = k // block
    node = ms_node(
        "MatMulNBits",
        ["a", "b", "scales", "", "", "bias"],
        ["y"],
        K=k,
        N=n,
        bits=bits,
        block_size=block,
    )
    tensors = {
        **infos("float16", a=[2, 7, k], scales=[n * blocks], bias=[n]),
        "b": TensorInfo((n, blocks, block * bits // 8), "uint8"),
    }
    cost = node_cost(node, tensors)
    rows = 2 * 7
    assert cost.flops == 2 * rows * n * k + rows * n
    packed = n * blocks * block * bits // 8  # = n * k / 2 bytes at 4 bits
    assert packed == n * k // 2
    assert cost.bytes_moved == 2 * rows * k + packed + 2 * n * blocks + 2 * n + 2 * rows * n
    assert output_infos(node, tensors) == [TensorInfo((2, 7, n), "float16")]
    wrong_k = {**tensors, "a": TensorInfo((2, 7, k + 1), "float16")}
    assert node_cost(node, wrong_k).rule == "unknown"


def test_group_query_attention_prompt_packed_and_with_a_cache():
    heads, kv_heads, head, batch, seq = 8, 2, 16, 1, 10
    node = ms_node(
        "GroupQueryAttention",
        ["q", "k", "v", "", "", "seqlens", "total"],
        ["y", "present_k", "present_v"],
        num_heads=heads,
        kv_num_heads=kv_heads,
    )
    tensors = {
        **infos(
            q=[batch, seq, heads * head],
            k=[batch, seq, kv_heads * head],
            v=[batch, seq, kv_heads * head],
        ),
        **infos("int32", seqlens=[batch], total=[]),
    }
    scores = batch * heads * seq * seq
    # Q.K^T, scale, causal mask, softmax, P.V: grouped heads share keys, not products
    expected = 2 * scores * head + (1 + 1 + 5) * scores + 2 * scores * head
    cost = node_cost(node, tensors)
    assert (cost.flops, cost.rule) == (expected, "attention")
    assert output_infos(node, tensors) == [
        TensorInfo((batch, seq, heads * head), "float32"),
        TensorInfo((batch, kv_heads, seq, head), "float32"),
        TensorInfo((batch, kv_heads, seq, head), "float32"),
    ]
    # Packed QKV: the same math.
    packed = ms_node(
        "GroupQueryAttention",
        ["qkv", "", "", "", "", "seqlens", "total"],
        ["y"],
        num_heads=heads,
        kv_num_heads=kv_heads,
    )
    packed_tensors = {**tensors, **infos(qkv=[batch, seq, (heads + 2 * kv_heads) * head])}
    assert node_cost(packed, packed_tensors).flops == expected
    # A cache: past 30 + 1 new token attends 31 keys when present is declared that long...
    decode = ms_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_k", "past_v", "seqlens", "total"],
        ["y", "present_k", "present_v"],
        num_heads=heads,
        kv_num_heads=kv_heads,
    )
    step = {
        **tensors,
        **infos(q=[1, 1, heads * head], k=[1, 1, kv_heads * head], v=[1, 1, kv_heads * head]),
        **infos(past_k=[1, kv_heads, 30, head], past_v=[1, kv_heads, 30, head]),
        **infos(present_k=[1, kv_heads, 31, head], present_v=[1, kv_heads, 31, head]),
    }
    one = heads * 31
    assert node_cost(decode, step).flops == 2 * one * head + 7 * one + 2 * one * head
    # ... but with past and present one shared buffer, the attended length is the value of
    # total_sequence_length, known only at run time.
    shared = {**step, **infos(present_k=[1, kv_heads, 30, head], present_v=[1, kv_heads, 30, head])}
    assert node_cost(decode, shared).rule == "unknown"
    undeclared = {k: v for k, v in step.items() if not k.startswith("present")}
    assert node_cost(decode, undeclared).rule == "unknown"


def test_fused_matmul_honours_transposes_batch_transposes_and_alpha():
    node = ms_node("FusedMatMul", ["a", "b"], ["y"], transA=1, transB=1, alpha=0.125)
    tensors = infos(a=[3, 5, 4], b=[3, 6, 5])  # A^T: [3, 4, 5], B^T: [3, 5, 6]
    assert output_infos(node, tensors) == [TensorInfo((3, 4, 6), "float32")]
    cost = node_cost(node, tensors)
    assert cost.flops == 2 * 3 * 4 * 6 * 5 + 3 * 4 * 6  # + the alpha scale
    assert cost.bytes_moved == 4 * (60 + 90 + 72)
    # transBatchA: A [5, 3, 4] is used as [3, 5, 4] (first axis moved before the last).
    batch_a = ms_node("FusedMatMul", ["a", "b"], ["y"], transBatchA=1)
    tensors = infos(a=[5, 3, 4], b=[3, 4, 6])
    assert output_infos(batch_a, tensors) == [TensorInfo((3, 5, 6), "float32")]
    assert node_cost(batch_a, tensors).flops == 2 * 3 * 5 * 6 * 4


def test_multi_head_attention_with_a_past_and_a_bias():
    heads, head, batch, seq, past = 4, 8, 2, 3, 5
    node = ms_node(
        "MultiHeadAttention",
        ["q", "k", "v", "bias", "", "", "past_k", "past_v"],
        ["y", "present_k", "present_v"],
        num_heads=heads,
    )
    hidden = heads * head
    tensors = infos(
        q=[batch, seq, hidden],
        k=[batch, seq, hidden],
        v=[batch, seq, hidden],
        bias=[3 * hidden],
        past_k=[batch, heads, past, head],
        past_v=[batch, heads, past, head],
    )
    total = past + seq
    scores = batch * heads * seq * total
    bias_adds = 3 * batch * seq * hidden  # on Q, and on the new K and V
    assert node_cost(node, tensors).flops == 4 * scores * head + 6 * scores + bias_adds
    assert output_infos(node, tensors) == [
        TensorInfo((batch, seq, hidden), "float32"),
        TensorInfo((batch, heads, total, head), "float32"),
        TensorInfo((batch, heads, total, head), "float32"),
    ]


def test_embed_layer_norm_reads_only_the_gathered_rows():
    batch, seq, hidden, vocab = 2, 8, 16, 1000
    node = ms_node(
        "EmbedLayerNormalization",
        ["ids", "segments", "words", "positions", "segment_table", "gamma", "beta", "mask"],
        ["y", "mask_index"],
    )
    tensors = {
        **infos("int32", ids=[batch, seq], segments=[batch, seq], mask=[batch, seq]),
        **infos(words=[vocab, hidden], positions=[512, hidden], segment_table=[2, hidden]),
        **infos(gamma=[hidden], beta=[hidden]),
    }
    elements = batch * seq * hidden
    cost = node_cost(node, tensors)
    assert cost.flops == elements * (2 + 8) + batch * seq  # 3 tables summed, LayerNorm, mask
    ids = 3 * 4 * batch * seq  # ids, segments, mask (int32)
    rows = 3 * 4 * elements  # the gathered rows of the three tables
    assert cost.bytes_moved == ids + rows + 2 * 4 * hidden + 4 * elements + 4 * batch


def test_rotary_embedding_input_order_depends_on_the_domain():
    """com.microsoft: input, position_ids, cos_cache, sin_cache; ONNX (opset 23): X, cos_cache,
    sin_cache, position_ids. The same cost from each, reading only the cache rows used."""
    batch, seq, heads, head = 1, 4, 2, 8
    x = infos(x=[batch, seq, heads * head], cos=[2048, head // 2], sin=[2048, head // 2])
    positions = {"pos": TensorInfo((batch, seq), "int64")}
    microsoft = ms_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], num_heads=heads)
    standard = helper.make_node(
        "RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=heads
    )
    tensors = {**x, **positions, **infos(y=[batch, seq, heads * head])}
    elements = batch * seq * heads * head
    rows = 2 * 4 * batch * seq * head // 2  # cos and sin rows of the 4 positions
    expected = (3 * elements, 4 * elements + 8 * batch * seq + rows + 4 * elements)
    for node in (microsoft, standard):
        cost = node_cost(node, tensors)
        assert (cost.flops, cost.bytes_moved, cost.rule) == (*expected, "rotary")
    # Partial rotation: rotary_embedding_dim of each head.
    partial = ms_node(
        "RotaryEmbedding",
        ["x", "pos", "cos", "sin"],
        ["y"],
        num_heads=heads,
        rotary_embedding_dim=4,
    )
    assert node_cost(partial, tensors).flops == 3 * batch * seq * heads * 4


def test_attention_means_different_ops_in_each_domain():
    """ONNX's Attention (opset 23) takes projected Q, K, V; com.microsoft's takes the input and
    the packed QKV weights: the same name, different math."""
    batch, seq, heads, head = 1, 6, 2, 4
    standard = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
    tensors = infos(
        q=[batch, heads, seq, head],
        k=[batch, heads, seq, head],
        v=[batch, heads, seq, head],
        y=[batch, heads, seq, head],
    )
    scores = batch * heads * seq * seq
    assert node_cost(standard, tensors).flops == 4 * scores * head + (1 + 1 + 5) * scores
    microsoft = ms_node("Attention", ["q", "k"], ["y"], num_heads=heads)
    assert node_cost(microsoft, tensors).rule == "unknown"  # no [hidden, 3 * hidden] weights


def test_fused_conv_and_fused_gemm_add_their_activation():
    conv = ms_node("FusedConv", ["x", "w", "b", "z"], ["y"], activation="Relu", pads=[1, 1, 1, 1])
    tensors = infos(x=[1, 4, 8, 8], w=[6, 4, 3, 3], b=[6], z=[1, 6, 8, 8])
    assert output_infos(conv, tensors) == [TensorInfo((1, 6, 8, 8), "float32")]
    out = 6 * 8 * 8
    assert node_cost(conv, tensors).flops == 2 * out * 4 * 9 + out + out + out  # bias, Z, Relu
    gemm = ms_node("FusedGemm", ["a", "b", "c"], ["y"], activation="Tanh", transB=1)
    tensors = infos(a=[3, 4], b=[5, 4], c=[5])
    assert node_cost(gemm, tensors).flops == 2 * 3 * 5 * 4 + 15 + 4 * 15
    unknown_activation = ms_node("FusedGemm", ["a", "b", "c"], ["y"], activation="Frobnicate")
    assert node_cost(unknown_activation, {**tensors, **infos(y=[3, 5])}).rule == "unknown"


def test_nhwc_qlinear_conv_and_max_pool_keep_the_channels_last():
    conv = ms_node(
        "QLinearConv",
        ["x", "s", "z", "w", "s", "z", "s", "z"],
        ["y"],
        channels_last=1,
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    tensors = {
        **infos("uint8", x=[1, 16, 16, 3], w=[8, 3, 3, 3], z=[]),
        **infos(s=[]),
    }
    (y,) = output_infos(conv, tensors)
    assert y == TensorInfo((1, 8, 8, 8), "uint8")
    assert node_cost(conv, tensors).flops == 2 * 512 * 27 + QUANTIZE * 512
    pool = ms_node(
        "NhwcMaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    assert output_infos(pool, infos(x=[1, 16, 16, 3])) == [TensorInfo((1, 8, 8, 3), "float32")]
    assert node_cost(pool, infos(x=[1, 16, 16, 3])).flops == 8 * 8 * 3 * 9


def test_quantized_matmuls_and_conv_integer():
    qmatmul = helper.make_node("QLinearMatMul", ["a", "s", "z", "b", "s", "z", "s", "z"], ["y"])
    tensors = {**infos("uint8", a=[4, 8], b=[8, 2], z=[], y=[4, 2]), **infos(s=[])}
    assert node_cost(qmatmul, tensors).flops == 2 * 4 * 2 * 8 + QUANTIZE * 8
    # ConvInteger's inputs 2 and 3 are zero points: no bias is added.
    conv = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])
    tensors = {
        **infos("uint8", x=[1, 2, 5, 5], w=[3, 2, 3, 3], xz=[], wz=[]),
        **infos("int32", y=[1, 3, 3, 3]),
    }
    assert node_cost(conv, tensors).flops == 2 * 27 * 2 * 9
    to_float = ms_node("MatMulIntegerToFloat", ["a", "b", "sa", "sb", "", "", "bias"], ["y"])
    tensors = {**infos("int8", a=[2, 3, 8], b=[8, 4]), **infos(sa=[], sb=[], bias=[4])}
    assert output_infos(to_float, tensors) == [TensorInfo((2, 3, 4), "float32")]
    assert node_cost(to_float, tensors).flops == 2 * 24 * 8 + 24 + 24  # scale, bias
    dynamic = ms_node("DynamicQuantizeMatMul", ["a", "b", "sb"], ["y"])
    tensors = {**infos(a=[6, 8], sb=[]), **infos("int8", b=[8, 4])}
    assert node_cost(dynamic, tensors).flops == (2 + QUANTIZE) * 48 + 2 * 24 * 8 + 24


def test_qlinear_concat_sigmoid_and_leaky_relu():
    concat = ms_node("QLinearConcat", ["ys", "yz", "a", "s", "z", "b", "s", "z"], ["y"], axis=1)
    tensors = {**infos("uint8", yz=[], z=[], a=[1, 2, 4], b=[1, 3, 4]), **infos(ys=[], s=[])}
    assert output_infos(concat, tensors) == [TensorInfo((1, 5, 4), "uint8")]
    assert node_cost(concat, tensors).flops == QUANTIZE * 20
    for op, per_element in (("QLinearSigmoid", 4 + QUANTIZE), ("QLinearLeakyRelu", 2 + QUANTIZE)):
        node = ms_node(op, ["x", "s", "z", "s", "z"], ["y"])
        tensors = {**infos("int8", x=[2, 10], z=[]), **infos(s=[])}
        assert node_cost(node, tensors).flops == per_element * 20


def test_activations_cost_their_definitions():
    tensors = infos(x=[10], y=[10])
    quick = ms_node("QuickGelu", ["x"], ["y"])  # x * sigmoid(1.702 x)
    silu = ms_node("QuickGelu", ["x"], ["y"], alpha=1.0)  # x * sigmoid(x): Sigmoid + Mul
    assert node_cost(quick, tensors).flops == 10 * (1 + 4 + 1)
    assert node_cost(silu, tensors).flops == 10 * (4 + 1)
    fast = ms_node("FastGelu", ["x", "bias"], ["y"])
    assert node_cost(fast, {**tensors, **infos(bias=[10])}).flops == 10 * (1 + 4 + 8)
    for node, per_element in (
        (helper.make_node("Gelu", ["x"], ["y"]), GELU),
        (helper.make_node("Gelu", ["x"], ["y"], approximate="tanh"), 4 + 8),
        (ms_node("Gelu", ["x"], ["y"]), GELU),
    ):
        assert node_cost(node, tensors).flops == 10 * per_element


def test_skip_simplified_layer_norm_and_rms_norm():
    node = ms_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "", "", "sum"])
    tensors = infos(x=[2, 5, 8], skip=[2, 5, 8], gamma=[8])
    assert node_cost(node, tensors).flops == (1 + 4) * 80
    assert node_cost(node, tensors).bytes_moved == 4 * (80 + 80 + 8 + 80 + 80)
    rms = helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"])
    assert node_cost(rms, tensors).flops == 4 * 80


def test_einsum_counts_the_contraction():
    tensors = infos(a=[2, 3, 4], b=[2, 4, 5], y=[2, 3, 5])
    batched = helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")
    assert node_cost(batched, tensors).flops == 2 * 2 * 3 * 4 * 5
    broadcast = helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")
    assert node_cost(broadcast, tensors).flops == 2 * 2 * 3 * 4 * 5
    implicit = helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk")
    assert node_cost(implicit, tensors).flops == 2 * 2 * 3 * 4 * 5
    transpose = helper.make_node("Einsum", ["a"], ["y"], equation="bij->bji")
    assert node_cost(transpose, infos(a=[2, 3, 4], y=[2, 4, 3])).flops == 0
    trace = helper.make_node("Einsum", ["m"], ["y"], equation="ii")
    assert node_cost(trace, {**infos(m=[6, 6]), "y": TensorInfo((), "float32")}).flops == 6


def test_resize_modes_and_range():
    tensors = {**infos(x=[1, 2, 4, 4], y=[1, 2, 8, 8]), **infos(scales=[4])}
    for mode, per_output in (("nearest", 0), ("linear", 2 * 4), ("cubic", 2 * 16)):
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
        assert node_cost(node, tensors).flops == per_output * 128, mode
    down = helper.make_node("Resize", ["y", "", "scales"], ["x"], mode="linear", antialias=1)
    assert node_cost(down, tensors).rule == "unknown"  # the filter widens with the scale
    span = helper.make_node("Range", ["start", "limit", "delta"], ["r"])
    tensors = {**infos("int64", start=[], limit=[], delta=[]), "r": TensorInfo((7,), "int64")}
    assert node_cost(span, tensors).flops == 7
    assert node_cost(span, {**tensors, "r": TensorInfo((None,), "int64")}).rule == "unknown"


def test_unknown_domains_and_malformed_nodes_stay_unknown():
    custom = helper.make_node("Attention", ["a"], ["y"], domain="com.example")
    assert node_cost(custom, infos(a=[2], y=[2])).rule == "unknown"
    nchwc = helper.make_node("Conv", ["x", "w"], ["y"], domain="com.microsoft.nchwc")
    assert node_cost(nchwc, infos(x=[1, 8, 4, 4], w=[8, 8, 1, 1], y=[1, 8, 4, 4])).rule == "unknown"
    no_heads = ms_node("Attention", ["x", "w"], ["y"], num_heads=0)
    assert node_cost(no_heads, infos(x=[1, 2, 12], w=[12, 36])).rule == "unknown"
    assert rule_for("Attention", MS) == rule_for("Attention", "") == "attention"
    assert rule_for("Frobnicate", MS) is None


# --- contrib output shapes against ONNX Runtime ---------------------------------------------

RNG = np.random.default_rng(0)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def u8(*shape) -> np.ndarray:
    return RNG.integers(0, 255, shape, dtype=np.uint8)


def i8(*shape) -> np.ndarray:
    return RNG.integers(-127, 127, shape, dtype=np.int8)


def scalar(value, dtype=np.float32) -> np.ndarray:
    return np.array(value, dtype)


QPARAMS = {
    "xs": scalar(0.1),
    "xz": scalar(3, np.uint8),
    "ys": scalar(0.1),
    "yz": scalar(3, np.uint8),
}
# (op, inputs in order (None: absent), outputs, attributes): every com.microsoft op the CPU
# provider runs that the corpus does not (or only at one shape).
CONTRIB_CASES = {
    "MatMulNBits": (
        {"a": f32(2, 3, 64), "b": u8(16, 2, 16), "scales": f32(32)},
        ["y"],
        {"K": 64, "N": 16, "bits": 4, "block_size": 32},
    ),
    "GroupQueryAttention": (
        {
            "q": f32(1, 5, 128),
            "k": f32(1, 5, 32),
            "v": f32(1, 5, 32),
            "past_k": None,
            "past_v": None,
            "seqlens": np.array([4], np.int32),
            "total": scalar(5, np.int32),
        },
        ["y", "present_k", "present_v"],
        {"num_heads": 8, "kv_num_heads": 2},
    ),
    "GroupQueryAttention/packed": (
        {
            "qkv": f32(1, 5, 192),
            "k": None,
            "v": None,
            "past_k": None,
            "past_v": None,
            "seqlens": np.array([4], np.int32),
            "total": scalar(5, np.int32),
        },
        ["y", "present_k", "present_v"],
        {"num_heads": 8, "kv_num_heads": 2},
    ),
    "MultiHeadAttention": (
        {
            "q": f32(2, 3, 32),
            "k": f32(2, 3, 32),
            "v": f32(2, 3, 32),
            "bias": f32(96),
            "mask": None,
            "attention_bias": None,
            "past_k": f32(2, 4, 5, 8),
            "past_v": f32(2, 4, 5, 8),
        },
        ["y", "present_k", "present_v"],
        {"num_heads": 4},
    ),
    "Attention": (
        {
            "x": f32(1, 3, 32),
            "w": f32(32, 96),
            "b": f32(96),
            "mask": None,
            "past": f32(2, 1, 4, 5, 8),
        },
        ["y", "present"],
        {"num_heads": 4, "unidirectional": 1},
    ),
    "EmbedLayerNormalization": (
        {
            "ids": RNG.integers(0, 100, (2, 8)).astype(np.int32),
            "segments": RNG.integers(0, 2, (2, 8)).astype(np.int32),
            "words": f32(100, 16),
            "positions": f32(16, 16),
            "segment_table": f32(2, 16),
            "gamma": f32(16),
            "beta": f32(16),
            "mask": np.ones((2, 8), np.int32),
        },
        ["y", "mask_index"],
        {},
    ),
    "RotaryEmbedding": (
        {
            "x": f32(1, 4, 16),
            "positions": np.arange(4, dtype=np.int64).reshape(1, 4),
            "cos": f32(64, 4),
            "sin": f32(64, 4),
        },
        ["y"],
        {"num_heads": 2},
    ),
    "FusedMatMul": ({"a": f32(3, 5, 4), "b": f32(3, 6, 5)}, ["y"], {"transA": 1, "transB": 1}),
    "FusedMatMul/batch": ({"a": f32(5, 3, 4), "b": f32(3, 4, 6)}, ["y"], {"transBatchA": 1}),
    "TransposeMatMul": ({"a": f32(4, 3), "b": f32(4, 5)}, ["y"], {"transA": 1}),
    "FusedConv": (
        {"x": f32(1, 4, 9, 9), "w": f32(6, 4, 3, 3), "b": f32(6), "z": f32(1, 6, 5, 5)},
        ["y"],
        {"activation": "Relu", "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "FusedGemm": (
        {"a": f32(3, 4), "b": f32(5, 4), "c": f32(5)},
        ["y"],
        {"activation": "Tanh", "transB": 1},
    ),
    "QLinearConv": (  # ONNX Runtime's NHWC one
        {
            "x": u8(1, 9, 9, 3),
            "xs": scalar(0.1),
            "xz": scalar(3, np.uint8),
            "w": i8(8, 3, 3, 3),
            "ws": scalar(0.1),
            "wz": scalar(0, np.int8),
            "ys": scalar(0.2),
            "yz": scalar(5, np.uint8),
            "bias": RNG.integers(-5, 5, (8,)).astype(np.int32),
        },
        ["y"],
        {"channels_last": 1, "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "NhwcMaxPool": (
        {"x": u8(1, 9, 9, 3)},
        ["y"],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "QLinearAveragePool": (
        {"x": u8(1, 3, 9, 9), **QPARAMS},
        ["y"],
        {"kernel_shape": [3, 3], "strides": [2, 2]},
    ),
    "QLinearAveragePool/nhwc": (
        {"x": u8(1, 9, 9, 3), **QPARAMS},
        ["y"],
        {"kernel_shape": [3, 3], "strides": [2, 2], "channels_last": 1, "ceil_mode": 1},
    ),
    "QLinearGlobalAveragePool": ({"x": u8(1, 9, 9, 3), **QPARAMS}, ["y"], {"channels_last": 1}),
    "QLinearConcat": (
        {
            "ys": scalar(0.1),
            "yz": scalar(3, np.uint8),
            "a": u8(1, 2, 4),
            "as": scalar(0.2),
            "az": scalar(1, np.uint8),
            "b": u8(1, 3, 4),
            "bs": scalar(0.1),
            "bz": scalar(3, np.uint8),
        },
        ["y"],
        {"axis": 1},
    ),
    "QLinearSigmoid": ({"x": u8(2, 10), **QPARAMS}, ["y"], {}),
    "QLinearLeakyRelu": ({"x": u8(2, 10), **QPARAMS}, ["y"], {"alpha": 0.1}),
    "QLinearMul": (
        {"a": u8(2, 3, 4), "as": scalar(0.1), "az": scalar(3, np.uint8), "b": u8(4), **QPARAMS},
        ["y"],
        {},
    ),
    "QLinearWhere": (
        {
            "condition": RNG.random((2, 1, 4)) < 0.5,
            "x": u8(3, 4),
            "xs": scalar(0.1),
            "xz": scalar(3, np.uint8),
            "y": u8(1, 4),
            "ys": scalar(0.1),
            "yz": scalar(3, np.uint8),
            "zs": scalar(0.1),
            "zz": scalar(3, np.uint8),
        },
        ["z"],
        {},
    ),
    "QLinearSoftmax": ({"x": u8(2, 10), **QPARAMS}, ["y"], {"opset": 13, "axis": -1}),
    "MatMulInteger16": (
        {"a": np.ones((3, 4), np.int16), "b": np.ones((4, 5), np.int16)},
        ["y"],
        {},
    ),
    "SkipLayerNormalization": (
        {"x": f32(2, 5, 8), "skip": f32(2, 5, 8), "gamma": f32(8), "beta": f32(8), "bias": f32(8)},
        ["y", "", "", "sum"],
        {},
    ),
    "SkipSimplifiedLayerNormalization": (
        {"x": f32(2, 5, 8), "skip": f32(2, 5, 8), "gamma": f32(8)},
        ["y", "", "", "sum"],
        {},
    ),
    "FastGelu": ({"x": f32(2, 8), "bias": f32(8)}, ["y"], {}),
    "QuickGelu": ({"x": f32(2, 8)}, ["y"], {}),
    "BiasGelu": ({"x": f32(2, 8), "bias": f32(8)}, ["y"], {}),
    "Gelu": ({"x": f32(2, 8)}, ["y"], {}),
    "MatMulIntegerToFloat": (
        {
            "a": u8(2, 3, 8),
            "b": i8(8, 4),
            "as": scalar(0.1),
            "bs": scalar(0.1),
            "az": scalar(3, np.uint8),
            "bz": None,
            "bias": f32(4),
        },
        ["y"],
        {},
    ),
    "DynamicQuantizeMatMul": ({"a": f32(6, 8), "b": i8(8, 4), "bs": scalar(0.1)}, ["y"], {}),
    "QGemm": (
        {
            "a": u8(3, 8),
            "as": scalar(0.1),
            "az": scalar(3, np.uint8),
            "b": u8(5, 8),
            "bs": scalar(0.1),
            "bz": scalar(3, np.uint8),
        },
        ["y"],
        {"transB": 1},
    ),
    "QGemm/quantized": (
        {
            "a": u8(3, 8),
            "as": scalar(0.1),
            "az": scalar(3, np.uint8),
            "b": u8(5, 8),
            "bs": scalar(0.1),
            "bz": scalar(3, np.uint8),
            "c": np.zeros(5, np.int32),
            **{"ys": scalar(0.1), "yz": scalar(3, np.uint8)},
        },
        ["y"],
        {"transB": 1},
    ),
    "Trilu": ({"x": f32(3, 4)}, ["y"], {}),
    "DequantizeLinear": ({"x": u8(3, 4), "s": scalar(0.1), "z": scalar(3, np.uint8)}, ["y"], {}),
    "QuantizeLinear": ({"x": f32(3, 4), "s": scalar(0.1), "z": scalar(3, np.int8)}, ["y"], {}),
}


@pytest.mark.parametrize("case", list(CONTRIB_CASES))
def test_contrib_rules_give_the_output_shapes_onnxruntime_produces(case):
    """From its inputs alone (as when ONNX shape inference cannot see a contrib op) each node is
    costed, and the outputs its rule derives are the ones ONNX Runtime's CPU kernel writes."""
    feeds, outputs, attributes = CONTRIB_CASES[case]
    node = ms_node(
        case.split("/")[0],
        [n if a is not None else "" for n, a in feeds.items()],
        outputs,
        **attributes,
    )
    given = {name: array for name, array in feeds.items() if array is not None}
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for name, a in given.items()
    ]
    graph = helper.make_graph(
        [node], "g", inputs, [onnx.ValueInfoProto(name=o) for o in outputs if o]
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    model = helper.make_model(graph, ir_version=9, opset_imports=opsets)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    produced = dict(zip([o for o in outputs if o], session.run(None, given), strict=True))
    tensors = {name: TensorInfo(a.shape, a.dtype.name) for name, a in given.items()}
    derived = dict(zip(outputs, output_infos(node, tensors), strict=True))
    for name, array in produced.items():
        assert derived[name] == TensorInfo(array.shape, array.dtype.name), name
    cost = node_cost(node, tensors)
    assert cost.rule != "unknown" and cost.flops >= 0 and cost.bytes_moved > 0

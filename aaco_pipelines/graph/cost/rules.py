"""The rule tables: which family's rule costs each op, by domain.

Rules are looked up by domain and op type: the default ONNX domain ("" or "ai.onnx") and
com.microsoft, whose contrib ops (what ONNX Runtime's quantizer, its transformer optimizer and its
own graph optimizations write) may share a name with a default-domain op of another meaning
(Attention, RotaryEmbedding). ONNX shape inference does not know the contrib ops, so their rules
also give their output shapes from their inputs, following the operators' own definitions.
"""

from __future__ import annotations

from aaco_pipelines.graph.cost import (
    attention,
    dense,
    elementwise,
    movement,
    normalization,
    quantized,
    spatial,
)
from aaco_pipelines.graph.cost.core import (
    DEQUANTIZE,
    GELU,
    QUANTIZE,
    TRANSCENDENTAL,
    Rule,
    per_input,
    per_output,
    same_as,
)
from aaco_pipelines.graph.cost.normalization import NORMALIZATIONS

DEFAULT_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"


_COMMON: dict[str, Rule] = {
    **{
        op: Rule("elementwise", per_output(cost))
        for op, cost in elementwise.ELEMENTWISE_UNARY.items()
    },
    **{
        op: Rule("elementwise", per_output(cost, variadic=op in elementwise.VARIADIC))
        for op, cost in elementwise.ELEMENTWISE_BINARY.items()
    },
    **{op: Rule("normalization", per_input(cost)) for op, cost in NORMALIZATIONS.items()},
    **dict.fromkeys(normalization.REDUCTIONS, Rule("reduction", per_input(1))),
    **dict.fromkeys(spatial.POOLING, Rule("pooling", spatial.pooling)),
    **dict.fromkeys(spatial.GLOBAL_POOLING, Rule("global_pooling", per_input(1))),
    **dict.fromkeys(movement.GATHERS, Rule("gather", movement.free, movement.gather_bytes)),
    **dict.fromkeys(movement.DATA_MOVEMENT, Rule("data_movement", movement.free)),
    **dict.fromkeys(movement.VIEWS, Rule("view", movement.free)),
}

RULES: dict[str, Rule] = {  # the default ONNX domain
    **_COMMON,
    "MatMul": Rule("matmul", dense.matmul),
    "MatMulInteger": Rule("matmul", dense.matmul),
    "QLinearMatMul": Rule("matmul", quantized.qlinear_matmul),
    "Gemm": Rule("gemm", dense.gemm),
    "Conv": Rule("conv", dense.conv),
    "ConvInteger": Rule("conv", quantized.conv_integer),
    "QLinearConv": Rule("conv", quantized.qlinear_conv),
    "ConvTranspose": Rule("conv_transpose", dense.conv_transpose),
    "Gelu": Rule("elementwise", elementwise.gelu),
    "Swish": Rule("elementwise", elementwise.silu(1.0)),
    "DynamicQuantizeLinear": Rule("quantize", quantized.dynamic_quantize),
    "SimplifiedLayerNormalization": Rule(
        "normalization",
        per_input(NORMALIZATIONS["SimplifiedLayerNormalization"]),
        outputs=normalization.rms_norm_outputs,
    ),
    "Resize": Rule("resize", spatial.resize),
    "Upsample": Rule("resize", spatial.resize),
    "Einsum": Rule("einsum", dense.einsum),
    "Range": Rule("generator", movement.range_flops),
    "Attention": Rule("attention", attention.onnx_attention),
    "RotaryEmbedding": Rule("rotary", attention.rotary_embedding, attention.onnx_rotary_bytes),
    **dict.fromkeys(
        movement.CONTROL_FLOW, Rule("control_flow", movement.control_flow, bytes_optional=True)
    ),
}

MS_RULES: dict[str, Rule] = {  # com.microsoft, as ONNX Runtime defines its contrib ops
    # Same math and inputs as the default-domain op of the same name.
    "QuantizeLinear": Rule("elementwise", per_output(QUANTIZE), outputs=quantized.quantize_outputs),
    "DequantizeLinear": Rule(
        "elementwise", per_output(DEQUANTIZE), outputs=quantized.dequantize_outputs
    ),
    "GatherND": Rule("gather", movement.free, movement.gather_bytes),
    "Trilu": Rule("data_movement", movement.free, outputs=same_as(0)),
    "Pad": Rule("data_movement", movement.free),
    "Range": Rule("generator", movement.range_flops),
    "ExpandDims": Rule("view", movement.free),
    "MatMulInteger16": Rule("matmul", dense.matmul, outputs=dense.matmul_outputs(None, "int32")),
    # Activations and biases fused by the transformer optimizer.
    "Gelu": Rule("elementwise", per_output(GELU), outputs=same_as(0)),
    "BiasGelu": Rule("elementwise", per_output(1 + GELU), outputs=same_as(0)),
    "FastGelu": Rule("elementwise", elementwise.fast_gelu, outputs=same_as(0)),
    "QuickGelu": Rule("elementwise", elementwise.silu(1.702), outputs=same_as(0)),
    "BiasAdd": Rule("elementwise", per_output(2), outputs=same_as(0)),
    "BiasSplitGelu": Rule(
        "elementwise", elementwise.bias_split_gelu, outputs=elementwise.bias_split_gelu_outputs
    ),
    "BiasSoftmax": Rule(
        "normalization", per_input(1 + NORMALIZATIONS["Softmax"]), outputs=same_as(0)
    ),
    # (A - A_zero_point) * (B - B_zero_point), accumulated in int32
    "MulInteger": Rule("elementwise", per_output(3), outputs=quantized.mul_integer_outputs),
    # Normalizations.
    "SkipLayerNormalization": Rule(
        "normalization",
        normalization.skip_norm(NORMALIZATIONS["LayerNormalization"], bias=4),
        outputs=normalization.skip_norm_outputs,
    ),
    "SkipSimplifiedLayerNormalization": Rule(
        "normalization",
        normalization.skip_norm(NORMALIZATIONS["SimplifiedLayerNormalization"], bias=3),
        outputs=normalization.skip_norm_outputs,
    ),
    "SimplifiedLayerNormalization": Rule(
        "normalization",
        per_input(NORMALIZATIONS["SimplifiedLayerNormalization"]),
        outputs=normalization.rms_norm_outputs,
    ),
    "EmbedLayerNormalization": Rule(
        "normalization",
        normalization.embed_layer_norm,
        normalization.embed_layer_norm_bytes,
        normalization.embed_layer_norm_outputs,
    ),
    "GroupNorm": Rule("normalization", normalization.group_norm(skip=False), outputs=same_as(0)),
    "SkipGroupNorm": Rule(
        "normalization", normalization.group_norm(skip=True), outputs=same_as(0, 2)
    ),
    # Attention.
    "Attention": Rule("attention", attention.ms_attention, outputs=attention.ms_attention_outputs),
    "MultiHeadAttention": Rule("attention", attention.mha, outputs=attention.mha_outputs),
    "GroupQueryAttention": Rule(
        "attention", attention.gqa, attention.gqa_bytes, attention.gqa_outputs
    ),
    "RotaryEmbedding": Rule(
        "rotary", attention.rotary_embedding, attention.ms_rotary_bytes, same_as(0)
    ),
    # Fused float MatMul / Gemm / Conv.
    "FusedMatMul": Rule("matmul", dense.fused_matmul, outputs=dense.fused_matmul_outputs),
    "TransposeMatMul": Rule("matmul", dense.fused_matmul, outputs=dense.fused_matmul_outputs),
    "FusedGemm": Rule("gemm", dense.fused_gemm, outputs=dense.gemm_outputs(a=0, b=1)),
    "GemmFastGelu": Rule("matmul", dense.gemm_fast_gelu, outputs=dense.matmul_outputs()),
    "FusedConv": Rule("conv", dense.fused_conv, outputs=dense.conv_outputs(weight=1, dtype_from=0)),
    # Quantized MatMul.
    "MatMulNBits": Rule("matmul", quantized.matmul_nbits, outputs=quantized.matmul_nbits_outputs),
    "MatMulIntegerToFloat": Rule(
        "matmul", quantized.matmul_integer_to_float, outputs=dense.matmul_outputs(dtype_from=2)
    ),
    "DynamicQuantizeMatMul": Rule(
        "matmul", quantized.dynamic_quantize_matmul, outputs=dense.matmul_outputs(dtype_from=0)
    ),
    "QGemm": Rule("gemm", quantized.qgemm, outputs=quantized.qgemm_outputs),
    # QOperator ops (ONNX Runtime's NHWC ones carry channels_last).
    "QLinearConv": Rule(
        "conv", quantized.qlinear_conv, outputs=dense.conv_outputs(weight=3, dtype_from=7)
    ),
    "QLinearAdd": Rule(
        "elementwise", per_output(1 + QUANTIZE), outputs=quantized.qlinear_binary_outputs
    ),
    "QLinearMul": Rule(
        "elementwise", per_output(1 + QUANTIZE), outputs=quantized.qlinear_binary_outputs
    ),
    "QLinearSigmoid": Rule(
        "elementwise", per_output(TRANSCENDENTAL + QUANTIZE), outputs=same_as(0)
    ),
    "QLinearLeakyRelu": Rule("elementwise", per_output(2 + QUANTIZE), outputs=same_as(0)),
    "QLinearWhere": Rule(
        "elementwise", per_output(1 + QUANTIZE), outputs=quantized.qlinear_where_outputs
    ),
    "QLinearSoftmax": Rule(
        "normalization",
        quantized.requantized(per_input(NORMALIZATIONS["Softmax"])),
        outputs=same_as(0),
    ),
    "QLinearGlobalAveragePool": Rule(
        "global_pooling", quantized.requantized(per_input(1)), outputs=spatial.global_pool_outputs
    ),
    "QLinearAveragePool": Rule(
        "pooling",
        quantized.requantized(spatial.pooling),
        outputs=spatial.pool_outputs(channels_last_default=0),
    ),
    "QLinearReduceMean": Rule(
        "reduction",
        quantized.requantized(per_input(1)),
        outputs=quantized.qlinear_reduce_mean_outputs,
    ),
    "QLinearConcat": Rule(
        "data_movement", per_output(QUANTIZE), outputs=quantized.qlinear_concat_outputs
    ),
    "NhwcMaxPool": Rule(
        "pooling", spatial.pooling, outputs=spatial.pool_outputs(channels_last_default=1)
    ),
}

RULE_TABLES: dict[str, dict[str, Rule]] = {
    **dict.fromkeys(DEFAULT_DOMAINS, RULES),
    MS_DOMAIN: MS_RULES,
}

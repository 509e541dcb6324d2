"""Elementwise ops: FLOPs per output element, for the ONNX ops and ONNX Runtime's fused
activations and biases (Gelu, FastGelu, QuickGelu, BiasSplitGelu)."""

from __future__ import annotations

import onnx

from aaco_pipelines.graph.cost.core import (
    DEQUANTIZE,
    GELU,
    GELU_TANH,
    QUANTIZE,
    SILU,
    TRANSCENDENTAL,
    FlopRule,
    Infos,
    at,
    attr,
    has_input,
    known_shape,
    like,
    numel,
    per_output,
)

# FLOPs per output element. Unary ops:
ELEMENTWISE_UNARY: dict[str, int] = {
    **dict.fromkeys(
        "Abs Neg Relu Ceil Floor Round Sign Not BitwiseNot Reciprocal IsNaN IsInf "
        "ThresholdedRelu".split(),
        1,
    ),
    **dict.fromkeys("LeakyRelu Clip Shrink".split(), 2),
    "DequantizeLinear": DEQUANTIZE,
    "QuantizeLinear": QUANTIZE,
    "HardSigmoid": 3,
    "HardSwish": 4,
    **dict.fromkeys(
        "Exp Log Sqrt Erf Tanh Sigmoid Softplus Softsign Elu Selu Celu Mish "
        "Sin Cos Tan Asin Acos Atan Sinh Cosh".split(),
        TRANSCENDENTAL,
    ),
}
# ... and binary (or n-ary) ops, per output element and per pair of inputs combined:
ELEMENTWISE_BINARY: dict[str, int] = {
    **dict.fromkeys(
        "Add Sub Mul Div Mod Max Min Sum Mean Where Equal Greater Less GreaterOrEqual "
        "LessOrEqual And Or Xor BitShift BitwiseAnd BitwiseOr BitwiseXor".split(),
        1,
    ),
    "PRelu": 2,
    "Pow": TRANSCENDENTAL,
}
VARIADIC = frozenset("Sum Mean Max Min".split())  # n inputs: n - 1 combinations per element


def gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    cost = GELU_TANH if attr(node, "approximate", "none") == "tanh" else GELU
    return per_output(cost)(node, ins, outs)


def fast_gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """The optional bias (one add), then GELU's tanh approximation."""
    return per_output(GELU_TANH + int(has_input(node, 1)))(node, ins, outs)


def silu(default_alpha: float) -> FlopRule:
    """x * sigmoid(alpha * x) (QuickGelu, Swish): SILU, plus the multiply by an alpha != 1."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        scaled = attr(node, "alpha", default_alpha) != 1.0
        return per_output(SILU + int(scaled))(node, ins, outs)

    return rule


def bias_split_gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """X [N, S, D] + bias, then left half * Gelu(right half): per output, GELU and a multiply."""
    x, y = numel(at(ins, 0)), numel(at(outs, 0))
    return None if x is None or y is None else x + (GELU + 1) * y


def bias_split_gelu_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    x = known_shape(at(ins, 0))
    return [] if x is None else [like((*x[:-1], x[-1] // 2), at(ins, 0))]

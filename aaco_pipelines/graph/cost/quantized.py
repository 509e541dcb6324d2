"""Quantized ops: the integer forms of MatMul, Gemm and Conv (QLinear*, *Integer, QGemm,
MatMulNBits, ...), quantizing and dequantizing.

They count their integer multiply-adds like float ones (2 per MAC), plus QUANTIZE per output
element they requantize; dequantizing their inputs is folded into the integer arithmetic and the
requantization scale, as the kernels do, and is not counted.
"""

from __future__ import annotations

import math

import onnx

from aaco_pipelines.graph.cost.core import (
    QUANTIZE,
    FlopRule,
    Infos,
    at,
    attr,
    broadcast,
    dtype_of,
    has_input,
    known_dims,
    known_shape,
    like,
    numel,
)
from aaco_pipelines.graph.cost.dense import conv_at, gemm_at, gemm_outputs, matmul


def conv_integer(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Conv's MACs on integers; inputs 2 and 3 are zero points, not a bias."""
    return conv_at(node, ins, outs, weight=1, bias=None)


def qlinear_conv(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B: Conv's MACs, the int32 bias and
    the requantization of every output."""
    macs, out = conv_at(node, ins, outs, weight=3, bias=8), numel(at(outs, 0))
    return None if macs is None or out is None else macs + QUANTIZE * out


def qlinear_matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp: MatMul's MACs, then requantized."""
    macs, out = matmul(node, ins, outs), numel(at(outs, 0))
    return None if macs is None or out is None else macs + QUANTIZE * out


def dynamic_quantize(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """DynamicQuantizeLinear: the min and the max of x (2 per element), then each element
    quantized with the scale and zero point they give (QUANTIZE); the scalars are negligible."""
    count = numel(at(ins, 0))
    return None if count is None else (2 + QUANTIZE) * count


def requantized(base: FlopRule) -> FlopRule:
    """A QLinear op: its float op's FLOPs plus QUANTIZE per output element."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        flops, out = base(node, ins, outs), numel(at(outs, 0))
        return None if flops is None or out is None else flops + QUANTIZE * out

    return rule


def qlinear_binary_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """QLinearAdd / QLinearMul: A (0) and B (3) broadcast, in A's type."""
    shape = broadcast(known_shape(at(ins, 0)), known_shape(at(ins, 3)))
    return [like(shape, at(ins, 0))]


def qlinear_where_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """QLinearWhere: condition (0), X (1) and Y (4) broadcast, in X's type."""
    shape = broadcast(*(known_shape(at(ins, i)) for i in (0, 1, 4)))
    return [like(shape, at(ins, 1))]


def qlinear_concat_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """QLinearConcat: Y_scale, Y_zero_point, then (tensor, scale, zero point) per input."""
    parts = [known_shape(info) for info in ins[2::3]]
    if not parts or any(part is None for part in parts):
        return []
    rank = len(parts[0])
    axis = attr(node, "axis", 0) % rank
    size = sum(part[axis] for part in parts)
    shape = (*parts[0][:axis], size, *parts[0][axis + 1 :])
    return [like(shape, at(ins, 1))]


def qlinear_reduce_mean_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    x = known_shape(at(ins, 0))
    if x is None:
        return []
    axes = {axis % len(x) for axis in attr(node, "axes", range(len(x)))}
    keep = attr(node, "keepdims", 1)
    shape = [1 if axis in axes else size for axis, size in enumerate(x) if keep or axis not in axes]
    return [like(shape, at(ins, 0))]


def qgemm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp: Gemm's MACs, the int32 C, then
    each output requantized (y_scale given) or scaled to float (one multiply)."""
    gemm, out = gemm_at(node, ins, outs, a=0, c=6), numel(at(outs, 0))
    if gemm is None or out is None:
        return None
    return gemm + (QUANTIZE if has_input(node, 7) else 1) * out


def qgemm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """(M, N), quantized like y_zero_point when it is given, else float."""
    result = gemm_outputs(a=0, b=3)(node, ins)
    if not result or result[0] is None:
        return []
    dtype = dtype_of(at(ins, 8)) if has_input(node, 8) else "float32"
    return [like(result[0].shape, None, dtype)]


def matmul_integer_to_float(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A, B, a_scale, b_scale, a_zp, b_zp, bias: integer MatMul, each output scaled to float
    (one multiply), plus the bias."""
    macs, out = matmul(node, ins, outs), numel(at(outs, 0))
    if macs is None or out is None:
        return None
    return macs + out + (out if has_input(node, 6) else 0)


def dynamic_quantize_matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A (float), B, b_scale, b_zp, bias: A quantized on the fly as DynamicQuantizeLinear does,
    the integer MatMul, each output scaled back to float, plus the bias."""
    macs, a, out = matmul(node, ins, outs), numel(at(ins, 0)), numel(at(outs, 0))
    if macs is None or a is None or out is None:
        return None
    return (2 + QUANTIZE) * a + macs + out + (out if has_input(node, 4) else 0)


def _matmul_nbits_dims(node: onnx.NodeProto, ins: Infos):
    a, k, n = known_dims(at(ins, 0)), attr(node, "K", 0), attr(node, "N", 0)
    if a is None or k <= 0 or n <= 0 or a[-1] != k:
        return None
    return a, k, n


def matmul_nbits(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A [..., K] times the [K, N] weight stored in bits-wide blocks: 2*M*N*K, plus the bias.
    Dequantizing the blocks is the kernel's own business (once, or per tile), not counted; the
    bytes are the packed weight, its scales and zero points as stored."""
    dims = _matmul_nbits_dims(node, ins)
    if dims is None:
        return None
    a, k, n = dims
    rows = math.prod(a[:-1])
    return 2 * rows * n * k + (rows * n if has_input(node, 5) else 0)


def matmul_nbits_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _matmul_nbits_dims(node, ins)
    return [] if dims is None else [like((*dims[0][:-1], dims[2]), at(ins, 0))]


def quantize_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """x's shape, in the zero point's type (uint8 without one)."""
    dtype = dtype_of(at(ins, 2)) if has_input(node, 2) else "uint8"
    return [like(known_shape(at(ins, 0)), None, dtype)]


def dequantize_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """x's shape, in the scale's type."""
    return [like(known_shape(at(ins, 0)), at(ins, 1))]


def mul_integer_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """MulInteger: A (0) and B (2) broadcast, int32."""
    return [like(broadcast(known_shape(at(ins, 0)), known_shape(at(ins, 2))), None, "int32")]

"""Dense products: MatMul, Gemm, Conv, ConvTranspose and Einsum, and ONNX Runtime's fused float
forms (FusedMatMul, FusedGemm, FusedConv, GemmFastGelu) with the output shapes it derives for them.
2*M*N*K for a product: one multiply-add is 2 FLOPs."""

from __future__ import annotations

import math

import onnx

from aaco_pipelines.graph.cost.core import (
    GELU_TANH,
    Infos,
    ShapeRule,
    at,
    attr,
    broadcast,
    has_input,
    known_dims,
    known_shape,
    like,
    numel,
)
from aaco_pipelines.graph.cost.elementwise import ELEMENTWISE_UNARY
from aaco_pipelines.graph.cost.spatial import join_layout, split_layout, window_outputs


def matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """2*M*N*K per batch: output elements (broadcast batch included) x 2K."""
    a, out = known_dims(at(ins, 0)), numel(at(outs, 0))
    if a is None or out is None:
        return None
    return 2 * out * a[-1]


def gemm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """2*M*N*K for A*B, plus M*N to add C; transA/transB only decide where K sits."""
    return gemm_at(node, ins, outs, a=0, c=2)


def gemm_at(node: onnx.NodeProto, ins: Infos, outs: Infos, a: int, c: int) -> int | None:
    a_dims, out = known_dims(at(ins, a)), numel(at(outs, 0))
    if a_dims is None or len(a_dims) != 2 or out is None:
        return None
    k = a_dims[0] if attr(node, "transA", 0) else a_dims[1]
    return 2 * out * k + (out if has_input(node, c) else 0)


def conv(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """2 * out elements * (Cin/group) * kernel size, plus one add per output for the bias.

    The weight is [Cout, Cin/group, k...], so its trailing dims already hold Cin/group: a
    depthwise conv (group = Cin, weight [C, 1, kh, kw]) costs 2 * out * kh * kw."""
    return conv_at(node, ins, outs, weight=1, bias=2)


def conv_at(
    node: onnx.NodeProto, ins: Infos, outs: Infos, weight: int, bias: int | None
) -> int | None:
    weight_dims, out = known_dims(at(ins, weight)), numel(at(outs, 0))
    if weight_dims is None or out is None:
        return None
    has_bias = bias is not None and has_input(node, bias)
    return 2 * out * math.prod(weight_dims[1:]) + (out if has_bias else 0)


def conv_transpose(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Every input element scatters into (Cout/group) * kernel size outputs, plus the bias."""
    x, weight, out = numel(at(ins, 0)), known_dims(at(ins, 1)), numel(at(outs, 0))
    if x is None or weight is None or out is None:
        return None
    return 2 * x * math.prod(weight[1:]) + (out if has_input(node, 2) else 0)


def einsum(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Operands contracted left to right, as ONNX Runtime does: each step makes one product per
    combination of the indices of both sides (a multiply, and an add when an index is summed
    away there); a single operand only adds what it sums."""
    equation = attr(node, "equation", "").replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms, shapes = lhs.split(","), [known_shape(info) for info in ins]
    if len(terms) != len(shapes) or any(shape is None for shape in shapes):
        return None
    sizes: dict[str, int] = {}
    labels = [_einsum_labels(term, shape, sizes) for term, shape in zip(terms, shapes, strict=True)]
    if any(label is None for label in labels):
        return None
    if arrow:  # explicit output; its "..." stands for every broadcast axis of the inputs
        ellipsis = sorted({x for label in labels for x in label if x.startswith(".")})
        kept = set(rhs.replace("...", "")) | (set(ellipsis) if "..." in rhs else set())
    else:  # implicit: the labels used once, and the broadcast axes
        every = [x for label in labels for x in label]
        kept = {x for x in every if every.count(x) == 1 or x.startswith(".")}
    current, flops = set(labels[0]), 0
    if len(labels) == 1:
        summed = current - kept
        return math.prod(sizes[x] for x in current) if summed else 0
    for index in range(1, len(labels)):
        union = current | set(labels[index])
        needed = kept.union(*map(set, labels[index + 1 :]))
        products = math.prod(sizes[x] for x in union)
        flops += 2 * products if union - needed else products
        current = union & needed
    return flops


def _einsum_labels(term: str, shape: tuple[int, ...], sizes: dict) -> list | None:
    """One label per axis of an operand, "..." spread into ".0", ".1", ... counted from the
    right; records each label's size (a broadcast 1 gives way to the other size)."""
    if "..." in term:
        head, _, tail = term.partition("...")
        count = len(shape) - len(head) - len(tail)
        labels = [*head, *(f".{count - 1 - i}" for i in range(count)), *tail]
    else:
        labels = list(term)
    if len(labels) != len(shape):
        return None
    for label, size in zip(labels, shape, strict=True):
        if sizes.get(label, 1) not in (1, size) and size != 1:
            return None
        sizes[label] = max(sizes.get(label, 1), size)
    return labels


def _matmul_shape(a, b) -> tuple[int, ...] | None:
    """numpy.matmul's output shape, 1-D operands promoted and dropped again."""
    if a is None or b is None or not a or not b:
        return None
    left = (1, *a) if len(a) == 1 else a
    right = (*b, 1) if len(b) == 1 else b
    if left[-1] != right[-2]:
        return None
    batch = broadcast(left[:-2], right[:-2])
    if batch is None:
        return None
    return (*batch, *((left[-2],) if len(a) > 1 else ()), *((right[-1],) if len(b) > 1 else ()))


def matmul_outputs(dtype_from: int | None = 0, dtype: str | None = None) -> ShapeRule:
    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        shape = _matmul_shape(known_shape(at(ins, 0)), known_shape(at(ins, 1)))
        source = at(ins, dtype_from) if dtype_from is not None else None
        return [like(shape, source, dtype)]

    return outputs


def _fused_matmul_operands(node: onnx.NodeProto, ins: Infos):
    """A and B as FusedMatMul multiplies them: transBatch moves the first axis before the last
    (dims [1..r-2, 0, r-1]), then trans swaps the last two."""

    def effective(shape, trans: bool, trans_batch: bool):
        if shape is None or len(shape) < 2:
            return shape
        if trans_batch:
            shape = (*shape[1:-1], shape[0], shape[-1])
        return (*shape[:-2], shape[-1], shape[-2]) if trans else shape

    a = effective(known_shape(at(ins, 0)), attr(node, "transA", 0), attr(node, "transBatchA", 0))
    b = effective(known_shape(at(ins, 1)), attr(node, "transB", 0), attr(node, "transBatchB", 0))
    return a, b


def fused_matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """MatMul of the transposed operands (2*M*N*K), plus a multiply per output when alpha != 1."""
    a, _ = _fused_matmul_operands(node, ins)
    out = numel(at(outs, 0))
    if a is None or out is None:
        return None
    return 2 * out * a[-1] + (out if attr(node, "alpha", 1.0) != 1.0 else 0)


def fused_matmul_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    return [like(_matmul_shape(*_fused_matmul_operands(node, ins)), at(ins, 0))]


def gemm_outputs(a: int, b: int) -> ShapeRule:
    """(M, N) of Gemm-like ops, from A and B and transA/transB, in A's type."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        a_dims, b_dims = known_dims(at(ins, a)), known_dims(at(ins, b))
        if a_dims is None or b_dims is None or len(a_dims) != 2 or len(b_dims) != 2:
            return []
        m = a_dims[1] if attr(node, "transA", 0) else a_dims[0]
        n = b_dims[0] if attr(node, "transB", 0) else b_dims[1]
        return [like((m, n), at(ins, a))]

    return outputs


def _activation(node: onnx.NodeProto) -> int | None:
    """FLOPs per output of a fused activation (FusedConv, FusedGemm), None for one unknown."""
    name = attr(node, "activation", "")
    return 0 if not name else ELEMENTWISE_UNARY.get(name)


def fused_gemm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    flops, act, out = gemm(node, ins, outs), _activation(node), numel(at(outs, 0))
    return None if flops is None or act is None or out is None else flops + act * out


def fused_conv(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Conv (with its bias), one add per output for the residual Z (input 3), the activation."""
    flops, act, out = conv(node, ins, outs), _activation(node), numel(at(outs, 0))
    if flops is None or act is None or out is None:
        return None
    return flops + (out if has_input(node, 3) else 0) + act * out


def conv_outputs(weight: int, dtype_from: int) -> ShapeRule:
    """Conv's output shape, in the input's layout (channels_last for ONNX Runtime's NHWC
    QLinearConv); the weight stays [Cout, Cin/group, k...] in both."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        x, w = known_dims(at(ins, 0)), known_dims(at(ins, weight))
        if x is None or w is None or len(x) != len(w) or len(x) < 3:
            return []
        channels_last = bool(attr(node, "channels_last", 0))
        n, _, spatial = split_layout(x, channels_last)
        kernel = attr(node, "kernel_shape", None) or w[2:]
        sizes = window_outputs(spatial, kernel, node)
        if sizes is None:
            return []
        return [like(join_layout(n, w[0], sizes, channels_last), at(ins, dtype_from))]

    return outputs


def gemm_fast_gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """X * W, the bias, FastGelu on each output."""
    macs, out = matmul(node, ins, outs), numel(at(outs, 0))
    if macs is None or out is None:
        return None
    return macs + (out if has_input(node, 2) else 0) + GELU_TANH * out

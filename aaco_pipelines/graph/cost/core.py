"""What every cost rule shares: a tensor as shape inference left it, a node's cost, a rule, and
the helpers that read a node's inputs, attributes and sizes.

The cost constants are here because several op families use them: one multiply-add is 2 FLOPs,
a transcendental (exp, erf, tanh, ...) TRANSCENDENTAL FLOPs. A helper answers None (never a
guess) when a shape or type it needs is not known, and the rule built on it does the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int | None, ...] | None  # None: rank unknown; a None dim: size unknown
    dtype: str | None  # numpy name ("float32", "int64", "bfloat16", ...)


@dataclass(frozen=True)
class NodeCost:
    flops: int | None
    bytes_moved: int | None
    rule: str


UNKNOWN = NodeCost(None, None, "unknown")
TRANSCENDENTAL = 4
DEQUANTIZE = 2  # (x - zero_point) * scale
QUANTIZE = 3  # x / scale, round, + zero_point (then saturate)
# x * 0.5 * (1 + erf(x / sqrt(2))): the erf and four multiplies or adds.
GELU = TRANSCENDENTAL + 4
# 0.5 * x * (1 + tanh(a * x + b * x^3)): x^3 (2), b * (1), a * x (1), + (1), the tanh, 1 + (1),
# 0.5 * x (1), the product (1). FastGelu, and Gelu with approximate="tanh".
GELU_TANH = TRANSCENDENTAL + 8
SILU = TRANSCENDENTAL + 1  # x * sigmoid(x): the sigmoid, the product (+1 for an alpha != 1)
ROTARY = 3  # per rotated element: x1 * cos - x2 * sin (2 multiplies, 1 add)


Infos = Sequence["TensorInfo | None"]  # positional; None for an absent or unknown tensor
FlopRule = Callable[[onnx.NodeProto, Infos, Infos], "int | None"]
ByteRule = Callable[[onnx.NodeProto, Infos, Infos], "int | None"]
# Output tensors from the inputs, for ops shape inference does not know (None: cannot tell):
ShapeRule = Callable[[onnx.NodeProto, Infos], "list[TensorInfo | None]"]


@dataclass(frozen=True)
class Rule:
    name: str
    flops: FlopRule
    moved: ByteRule | None = None  # None: every input read plus every output written
    outputs: ShapeRule | None = None
    bytes_optional: bool = False  # the FLOPs stand even when the bytes cannot be told


_SUB_BYTE_BITS = {
    "int4": 4,
    "uint4": 4,
    "float4_e2m1fn": 4,
    "int2": 2,
    "uint2": 2,
    "float6_e2m3fn": 6,
    "float6_e3m2fn": 6,
}


def numel(info: TensorInfo | None) -> int | None:
    """Element count, None unless every dimension is known."""
    if info is None or info.shape is None or any(d is None for d in info.shape):
        return None
    return math.prod(info.shape)


def tensor_bytes(info: TensorInfo | None) -> int | None:
    """Bytes in memory (sub-byte types packed as ONNX stores them), None when unknown."""
    count = numel(info)
    if count is None or info.dtype in (None, "string"):
        return None
    bits = _SUB_BYTE_BITS.get(info.dtype)
    if bits is None:
        bits = np.dtype(info.dtype).itemsize * 8
    return (count * bits + 7) // 8


def all_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    read, written = sum_bytes(node.input, ins), sum_bytes(node.output, outs)
    return None if read is None or written is None else read + written


def sum_bytes(names: Sequence[str], infos: Infos) -> int | None:
    """Bytes of the named (present) tensors, None when one is not known."""
    sizes = [tensor_bytes(info) for name, info in zip(names, infos, strict=False) if name]
    return None if None in sizes else sum(sizes)


def attr(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            value = helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return default


def has_input(node: onnx.NodeProto, index: int) -> bool:
    return len(node.input) > index and bool(node.input[index])


def at(infos: Infos, index: int) -> TensorInfo | None:
    """The tensor at a position, None when the node has fewer (a malformed node stays unknown)."""
    return infos[index] if index < len(infos) else None


def known_dims(info: TensorInfo | None) -> tuple[int, ...] | None:
    return None if numel(info) is None or not info.shape else info.shape


def known_shape(info: TensorInfo | None) -> tuple[int, ...] | None:
    """The dims when all are known, rank 0 included (unlike known_dims)."""
    return None if numel(info) is None else info.shape


def dtype_of(info: TensorInfo | None) -> str | None:
    return None if info is None else info.dtype


def like(shape, info: TensorInfo | None, dtype: str | None = None) -> TensorInfo | None:
    """A tensor of this shape with the dtype given, else the dtype of `info`."""
    dtype = dtype or dtype_of(info)
    return None if shape is None or dtype is None else TensorInfo(tuple(shape), dtype)


def same_as(index: int, count: int = 1) -> ShapeRule:
    """`count` outputs of the shape and type of input `index`."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        source = at(ins, index)
        return [like(known_shape(source), source)] * count

    return outputs


def broadcast(*shapes) -> tuple[int, ...] | None:
    if any(shape is None for shape in shapes):
        return None
    rank = max(len(shape) for shape in shapes)
    result = []
    for axis in range(rank):
        sizes = {
            shape[axis - rank + len(shape)] for shape in shapes if axis - rank + len(shape) >= 0
        }
        sizes.discard(1)
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def per_output(cost: int, variadic: bool = False) -> FlopRule:
    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        out = numel(at(outs, 0))
        if out is None:
            return None
        pairs = max(1, sum(1 for n in node.input if n) - 1) if variadic else 1
        return cost * out * pairs

    return rule


def per_input(cost: int) -> FlopRule:
    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        count = numel(at(ins, 0))
        return None if count is None else cost * count

    return rule

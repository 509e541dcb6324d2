"""Ops over spatial windows: pooling and resize, and the window arithmetic (pads, strides,
dilations, NCHW or NHWC layout) that Conv's output shape shares."""

from __future__ import annotations

import math
from collections.abc import Sequence

import onnx

from aaco_pipelines.graph.cost.core import Infos, ShapeRule, at, attr, known_dims, like, numel

POOLING = frozenset("MaxPool AveragePool LpPool".split())  # output elements x kernel size
GLOBAL_POOLING = frozenset("GlobalAveragePool GlobalMaxPool GlobalLpPool".split())  # input elems


def pooling(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    out, kernel = numel(at(outs, 0)), attr(node, "kernel_shape", None)
    return None if out is None or not kernel else out * math.prod(kernel)


def resize(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Per output element, a multiply-add for each input element it interpolates: 2 taps per
    resized axis for linear, 4 for cubic, none for nearest (a gather). An antialiased downscale
    widens the filter with the scale: not counted here."""
    x, y = known_dims(at(ins, 0)), known_dims(at(outs, 0))
    if x is None or y is None or len(x) != len(y):
        return None
    mode = attr(node, "mode", "nearest")
    if mode == "nearest":
        return 0
    taps = {"linear": 2, "bilinear": 2, "cubic": 4}.get(mode)
    resized = [axis for axis in range(len(x)) if x[axis] != y[axis]]
    if taps is None or (attr(node, "antialias", 0) and any(y[a] < x[a] for a in resized)):
        return None
    return 2 * taps ** len(resized) * math.prod(y) if resized else 0


def window_outputs(
    spatial: tuple[int, ...], kernel: Sequence[int], node: onnx.NodeProto
) -> tuple[int, ...] | None:
    """Output spatial sizes of a conv or pool window (pads, strides, dilations, auto_pad,
    ceil_mode), as the ONNX Conv and pooling definitions give them."""
    count = len(spatial)
    if len(kernel) != count:
        return None
    strides = attr(node, "strides", None) or [1] * count
    dilations = attr(node, "dilations", None) or [1] * count
    pads = attr(node, "pads", None) or [0] * (2 * count)
    auto_pad = attr(node, "auto_pad", "NOTSET")
    rounding = math.ceil if attr(node, "ceil_mode", 0) else math.floor
    sizes = []
    for axis, size in enumerate(spatial):
        stride, span = strides[axis], (kernel[axis] - 1) * dilations[axis] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            sizes.append(math.ceil(size / stride))
        elif auto_pad == "VALID":
            sizes.append(math.ceil((size - span + 1) / stride))
        else:
            padded = size + pads[axis] + pads[axis + count]
            sizes.append(rounding((padded - span) / stride) + 1)
    return tuple(sizes)


def split_layout(x: tuple[int, ...], channels_last: bool):
    """(N, C, spatial) of an NCHW tensor, or of an NHWC one."""
    if channels_last:
        return x[0], x[-1], x[1:-1]
    return x[0], x[1], x[2:]


def join_layout(n: int, c: int, spatial: tuple[int, ...], channels_last: bool) -> tuple:
    return (n, *spatial, c) if channels_last else (n, c, *spatial)


def pool_outputs(channels_last_default: int) -> ShapeRule:
    """A pooling window's output, in the input's layout and type."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        x, kernel = known_dims(at(ins, 0)), attr(node, "kernel_shape", None)
        if x is None or not kernel or len(x) < 3:
            return []
        channels_last = bool(attr(node, "channels_last", channels_last_default))
        n, c, spatial = split_layout(x, channels_last)
        sizes = window_outputs(spatial, kernel, node)
        if sizes is None:
            return []
        return [like(join_layout(n, c, sizes, channels_last), at(ins, 0))]

    return outputs


def global_pool_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    x = known_dims(at(ins, 0))
    if x is None or len(x) < 3:
        return []
    channels_last = bool(attr(node, "channels_last", 0))
    n, c, spatial = split_layout(x, channels_last)
    return [like(join_layout(n, c, (1,) * len(spatial), channels_last), at(ins, 0))]

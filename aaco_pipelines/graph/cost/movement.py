"""Ops that compute nothing: data movement, gathers, views, Range, and control flow.

Views are free (0 bytes); gathers read only the gathered rows. If, Loop and Scan are
"control_flow": 0 FLOPs, because the work of their branches and bodies is on those nodes' own
rows (costed one by one: counting it here too would count it twice), and bytes the node's own
inputs read and outputs written (the values it hands into and out of its subgraph), None when a
shape of those is not known: an iteration count or a branch taken is a run-time value, not
something to guess.
"""

from __future__ import annotations

import onnx

from aaco_pipelines.graph.cost.core import Infos, at, numel, tensor_bytes

# 0 FLOPs, reads the gathered rows (the output) and the indices (input 1) only:
GATHERS = frozenset("Gather GatherElements GatherND Compress".split())
# 0 FLOPs; inputs read and outputs written:
DATA_MOVEMENT = frozenset(
    "Transpose Concat Slice Split Cast CastLike Expand Pad Tile DepthToSpace SpaceToDepth "
    "ScatterND ScatterElements Trilu ConstantOfShape OneHot EyeLike ReverseSequence "
    "CenterCropPad".split()
)
# Metadata only: 0 FLOPs, 0 bytes:
VIEWS = frozenset("Reshape Flatten Squeeze Unsqueeze Identity Shape Size Constant Dropout".split())
CONTROL_FLOW = frozenset("If Loop Scan".split())


def gather_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Indices read, plus the gathered rows read once and written once (not the whole table)."""
    indices, out = tensor_bytes(at(ins, 1)), tensor_bytes(at(outs, 0))
    return None if indices is None or out is None else indices + 2 * out


def range_flops(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """One add per element generated; the length is the inputs' values, known only when shape
    inference could read them."""
    return numel(at(outs, 0))


def free(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int:
    return 0


def control_flow(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int:
    return 0

"""Ops along an axis: normalizations (FLOPs per input element) and reductions (one per input
element), with ONNX Runtime's fused forms (SkipLayerNormalization, EmbedLayerNormalization,
GroupNorm) and the output shapes ONNX shape inference does not know for them."""

from __future__ import annotations

import math

import onnx

from aaco_pipelines.graph.cost.core import (
    SILU,
    FlopRule,
    Infos,
    at,
    attr,
    has_input,
    known_dims,
    known_shape,
    like,
    numel,
    sum_bytes,
    tensor_bytes,
)

# FLOPs per input element, for ops that normalise along an axis:
NORMALIZATIONS: dict[str, int] = {
    "Softmax": 5,
    "LogSoftmax": 5,
    "LayerNormalization": 8,
    "InstanceNormalization": 8,
    "GroupNormalization": 8,
    "BatchNormalization": 2,  # inference: a folded scale and shift
    # x * x, the mean, x * rsqrt(mean + eps), * scale
    "RMSNormalization": 4,
    "SimplifiedLayerNormalization": 4,  # ONNX Runtime's RMSNorm, registered in the ONNX domain
}
# One FLOP per input element:
REDUCTIONS = frozenset(
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare ArgMax ArgMin CumSum".split()
)


def skip_norm(norm: int, bias: int) -> FlopRule:
    """input + skip (+ bias at input `bias`), then the normalization, per input element."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        count = numel(at(ins, 0))
        return None if count is None else (1 + int(has_input(node, bias)) + norm) * count

    return rule


def skip_norm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """output, mean, inv_std_var (one per row, float), input_skip_bias_sum."""
    x = at(ins, 0)
    shape = known_shape(x)
    if shape is None:
        return []
    stats = like((*shape[:-1], 1), None, "float32")
    return [like(shape, x), stats, stats, like(shape, x)]


def rms_norm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """SimplifiedLayerNormalization: Y like X, inv_std_var over the normalized axes (float)."""
    x = at(ins, 0)
    shape = known_shape(x)
    if shape is None:
        return []
    axis = attr(node, "axis", -1) % len(shape)
    stats = like((*shape[:axis], *(1,) * (len(shape) - axis)), None, "float32")
    return [like(shape, x), stats]


def _embed_layer_norm_dims(node: onnx.NodeProto, ins: Infos):
    ids, table = known_dims(at(ins, 0)), known_dims(at(ins, 2))
    if ids is None or table is None or len(ids) != 2 or len(table) != 2:
        return None
    return ids[0], ids[1], table[1]


def embed_layer_norm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma,
    beta, mask, position_ids: per element of the [B, S, H] output, the gathered embeddings
    summed (one add per table after the first) and LayerNormalization; the mask index is one add
    per mask element."""
    dims = _embed_layer_norm_dims(node, ins)
    if dims is None:
        return None
    batch, seq, hidden = dims
    tables = 2 + int(has_input(node, 4))
    mask = numel(at(ins, 7)) if has_input(node, 7) else 0
    if mask is None:
        return None
    return batch * seq * hidden * (tables - 1 + NORMALIZATIONS["LayerNormalization"]) + mask


def embed_layer_norm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _embed_layer_norm_dims(node, ins)
    if dims is None:
        return []
    batch, seq, hidden = dims
    table = at(ins, 2)
    return [
        like((batch, seq, hidden), table),
        like((batch,), None, "int32"),
        like((batch, seq, hidden), table),
    ]


def embed_layer_norm_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """The ids, mask, gamma and beta read; of each embedding table only the B*S rows gathered;
    the outputs written."""
    tables = (2, 3, 4)
    gathered = []
    for index in tables:
        if has_input(node, index):
            row = known_dims(at(ins, index))
            size = tensor_bytes(at(ins, index))
            gathered.append(None if row is None or size is None else size // math.prod(row))
    dims = _embed_layer_norm_dims(node, ins)
    rest = [i for i, name in enumerate(node.input) if name and i not in tables]
    sizes = [tensor_bytes(at(ins, i)) for i in rest]
    written = sum_bytes(node.output, outs)
    if dims is None or None in gathered or None in sizes or written is None:
        return None
    batch, seq, hidden = dims
    return sum(sizes) + sum(batch * seq * hidden * size for size in gathered) + written


def group_norm(skip: bool) -> FlopRule:
    """GroupNorm's normalization (8 per element), SiLU when activation=1 (SILU per element);
    SkipGroupNorm adds skip and bias first (one add each)."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        count = numel(at(ins, 0))
        if count is None:
            return None
        adds = (1 + int(has_input(node, 4))) if skip else 0
        act = SILU if attr(node, "activation", 0) else 0
        return (NORMALIZATIONS["GroupNormalization"] + adds + act) * count

    return rule

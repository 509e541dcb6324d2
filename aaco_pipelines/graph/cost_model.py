"""What each node should cost: FLOPs and bytes moved, from tensor shapes alone.

These are the roofline numbers the measured kernel times are judged against, so a rule only
answers when the math is known: an op without a rule, or a node whose shapes inference could not
pin down, gets flops and bytes None with rule "unknown" rather than a made-up number.

Conventions: one multiply-add is 2 FLOPs; a transcendental (exp, erf, tanh, ...) is
TRANSCENDENTAL FLOPs; bytes moved are every input read (activations and weights) plus every output
written, except for views (free) and gathers (only the gathered rows are read).

Rules are looked up by domain and op type: the default ONNX domain ("" or "ai.onnx") and
com.microsoft, whose contrib ops (what ONNX Runtime's quantizer, its transformer optimizer and its
own graph optimizations write) may share a name with a default-domain op of another meaning
(Attention, RotaryEmbedding). ONNX shape inference does not know the contrib ops, so their rules
also give their output shapes from their inputs, following the operators' own definitions.

- Quantized ops count their integer multiply-adds like float ones (2 per MAC), plus QUANTIZE per
  output element they requantize; dequantizing their inputs is folded into the integer arithmetic
  and the requantization scale, as the kernels do, and is not counted.
- Attention counts the score matrix the operator defines, dense: Q.K^T, the scale, each mask or
  bias added, softmax and the product with V, for every query and every key of the total sequence
  (past + new). A causal or windowed kernel that skips masked blocks does less. When the attended
  length is only known at run time (a KV cache shared between past and present, whose valid length
  is an input's value), the node is unknown.
- If, Loop and Scan are "control_flow": 0 FLOPs, because the work of their branches and bodies is
  on those nodes' own rows (costed one by one: counting it here too would count it twice), and
  bytes the node's own inputs read and outputs written (the values it hands into and out of its
  subgraph), None when a shape of those is not known: an iteration count or a branch taken is a
  run-time value, not something to guess.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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
POOLING = frozenset("MaxPool AveragePool LpPool".split())  # output elements x kernel size
GLOBAL_POOLING = frozenset("GlobalAveragePool GlobalMaxPool GlobalLpPool".split())  # input elems
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
DEFAULT_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"

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


def rule_for(op_type: str, domain: str) -> str | None:
    """The name of the rule that costs this op of this domain, None when there is none."""
    rule = _RULE_TABLES.get(domain, {}).get(op_type)
    return None if rule is None else rule.name


def node_cost(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> NodeCost:
    """FLOPs and bytes moved for one node of the default ONNX domain or of com.microsoft, given
    known tensors; unknown for other domains, ops without a rule and shapes not known."""
    rule = _RULE_TABLES.get(node.domain, {}).get(node.op_type)
    if rule is None:
        return UNKNOWN
    if rule.name == "view":
        return NodeCost(0, 0, rule.name)
    ins = [tensors.get(n) if n else None for n in node.input]
    try:
        outs = _outputs(node, ins, [tensors.get(n) if n else None for n in node.output], rule)
        flops = rule.flops(node, ins, outs)
        moved = (rule.moved or _all_bytes)(node, ins, outs)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        return UNKNOWN  # a malformed node (a rank or an attribute out of its op's definition)
    if flops is None or (moved is None and not rule.bytes_optional):
        return UNKNOWN
    return NodeCost(flops, moved, rule.name)


def output_infos(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> list:
    """The node's outputs, positional (None where not known): as `tensors` has them, completed
    from the inputs where the op's rule knows its output shapes (the contrib ops ONNX shape
    inference cannot see). What a caller can feed back to inference for the nodes downstream."""
    known = [tensors.get(n) if n else None for n in node.output]
    rule = _RULE_TABLES.get(node.domain, {}).get(node.op_type)
    if rule is None or rule.outputs is None:
        return known
    ins = [tensors.get(n) if n else None for n in node.input]
    try:
        return _outputs(node, ins, known, rule)
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError):
        return known


def _outputs(node: onnx.NodeProto, ins: Infos, known: list, rule: Rule) -> list:
    """The outputs as inference left them, completed by the rule's own shapes where unknown."""
    if rule.outputs is None or all(numel(info) is not None for info in known):
        return known
    derived = rule.outputs(node, ins)
    return [
        info if numel(info) is not None and info.dtype else _at(derived, index) or info
        for index, info in enumerate(known)
    ]


def _all_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    read, written = _sum_bytes(node.input, ins), _sum_bytes(node.output, outs)
    return None if read is None or written is None else read + written


def _sum_bytes(names: Sequence[str], infos: Infos) -> int | None:
    """Bytes of the named (present) tensors, None when one is not known."""
    sizes = [tensor_bytes(info) for name, info in zip(names, infos, strict=False) if name]
    return None if None in sizes else sum(sizes)


def _gather_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Indices read, plus the gathered rows read once and written once (not the whole table)."""
    indices, out = tensor_bytes(_at(ins, 1)), tensor_bytes(_at(outs, 0))
    return None if indices is None or out is None else indices + 2 * out


def _attr(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            value = helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _has_input(node: onnx.NodeProto, index: int) -> bool:
    return len(node.input) > index and bool(node.input[index])


def _at(infos: Infos, index: int) -> TensorInfo | None:
    """The tensor at a position, None when the node has fewer (a malformed node stays unknown)."""
    return infos[index] if index < len(infos) else None


def _dims(info: TensorInfo | None) -> tuple[int, ...] | None:
    return None if numel(info) is None or not info.shape else info.shape


def _shape(info: TensorInfo | None) -> tuple[int, ...] | None:
    """The dims when all are known, rank 0 included (unlike _dims)."""
    return None if numel(info) is None else info.shape


def _dtype(info: TensorInfo | None) -> str | None:
    return None if info is None else info.dtype


def _like(shape, info: TensorInfo | None, dtype: str | None = None) -> TensorInfo | None:
    """A tensor of this shape with the dtype given, else the dtype of `info`."""
    dtype = dtype or _dtype(info)
    return None if shape is None or dtype is None else TensorInfo(tuple(shape), dtype)


# --- FLOP rules of the default domain -------------------------------------------------------


def _matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """2*M*N*K per batch: output elements (broadcast batch included) x 2K."""
    a, out = _dims(_at(ins, 0)), numel(_at(outs, 0))
    if a is None or out is None:
        return None
    return 2 * out * a[-1]


def _gemm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """2*M*N*K for A*B, plus M*N to add C; transA/transB only decide where K sits."""
    return _gemm_at(node, ins, outs, a=0, c=2)


def _gemm_at(node: onnx.NodeProto, ins: Infos, outs: Infos, a: int, c: int) -> int | None:
    a_dims, out = _dims(_at(ins, a)), numel(_at(outs, 0))
    if a_dims is None or len(a_dims) != 2 or out is None:
        return None
    k = a_dims[0] if _attr(node, "transA", 0) else a_dims[1]
    return 2 * out * k + (out if _has_input(node, c) else 0)


def _conv(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """2 * out elements * (Cin/group) * kernel size, plus one add per output for the bias.

    The weight is [Cout, Cin/group, k...], so its trailing dims already hold Cin/group: a
    depthwise conv (group = Cin, weight [C, 1, kh, kw]) costs 2 * out * kh * kw."""
    return _conv_at(node, ins, outs, weight=1, bias=2)


def _conv_at(
    node: onnx.NodeProto, ins: Infos, outs: Infos, weight: int, bias: int | None
) -> int | None:
    weight_dims, out = _dims(_at(ins, weight)), numel(_at(outs, 0))
    if weight_dims is None or out is None:
        return None
    has_bias = bias is not None and _has_input(node, bias)
    return 2 * out * math.prod(weight_dims[1:]) + (out if has_bias else 0)


def _conv_integer(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Conv's MACs on integers; inputs 2 and 3 are zero points, not a bias."""
    return _conv_at(node, ins, outs, weight=1, bias=None)


def _qlinear_conv(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B: Conv's MACs, the int32 bias and
    the requantization of every output."""
    macs, out = _conv_at(node, ins, outs, weight=3, bias=8), numel(_at(outs, 0))
    return None if macs is None or out is None else macs + QUANTIZE * out


def _qlinear_matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp: MatMul's MACs, then requantized."""
    macs, out = _matmul(node, ins, outs), numel(_at(outs, 0))
    return None if macs is None or out is None else macs + QUANTIZE * out


def _conv_transpose(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Every input element scatters into (Cout/group) * kernel size outputs, plus the bias."""
    x, weight, out = numel(_at(ins, 0)), _dims(_at(ins, 1)), numel(_at(outs, 0))
    if x is None or weight is None or out is None:
        return None
    return 2 * x * math.prod(weight[1:]) + (out if _has_input(node, 2) else 0)


def _per_output(cost: int, variadic: bool = False) -> FlopRule:
    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        out = numel(_at(outs, 0))
        if out is None:
            return None
        pairs = max(1, sum(1 for n in node.input if n) - 1) if variadic else 1
        return cost * out * pairs

    return rule


def _per_input(cost: int) -> FlopRule:
    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        count = numel(_at(ins, 0))
        return None if count is None else cost * count

    return rule


def _gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    cost = GELU_TANH if _attr(node, "approximate", "none") == "tanh" else GELU
    return _per_output(cost)(node, ins, outs)


def _dynamic_quantize(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """DynamicQuantizeLinear: the min and the max of x (2 per element), then each element
    quantized with the scale and zero point they give (QUANTIZE); the scalars are negligible."""
    count = numel(_at(ins, 0))
    return None if count is None else (2 + QUANTIZE) * count


def _pooling(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    out, kernel = numel(_at(outs, 0)), _attr(node, "kernel_shape", None)
    return None if out is None or not kernel else out * math.prod(kernel)


def _resize(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Per output element, a multiply-add for each input element it interpolates: 2 taps per
    resized axis for linear, 4 for cubic, none for nearest (a gather). An antialiased downscale
    widens the filter with the scale: not counted here."""
    x, y = _dims(_at(ins, 0)), _dims(_at(outs, 0))
    if x is None or y is None or len(x) != len(y):
        return None
    mode = _attr(node, "mode", "nearest")
    if mode == "nearest":
        return 0
    taps = {"linear": 2, "bilinear": 2, "cubic": 4}.get(mode)
    resized = [axis for axis in range(len(x)) if x[axis] != y[axis]]
    if taps is None or (_attr(node, "antialias", 0) and any(y[a] < x[a] for a in resized)):
        return None
    return 2 * taps ** len(resized) * math.prod(y) if resized else 0


def _einsum(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Operands contracted left to right, as ONNX Runtime does: each step makes one product per
    combination of the indices of both sides (a multiply, and an add when an index is summed
    away there); a single operand only adds what it sums."""
    equation = _attr(node, "equation", "").replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms, shapes = lhs.split(","), [_shape(info) for info in ins]
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


def _range(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """One add per element generated; the length is the inputs' values, known only when shape
    inference could read them."""
    return numel(_at(outs, 0))


def _free(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int:
    return 0


# --- attention ------------------------------------------------------------------------------


def _attention_core(
    batch: int, heads: int, q_len: int, kv_len: int, head: int, v_head: int, per_score: int
) -> int:
    """Q.K^T and P.V, dense over q_len x kv_len scores per head, plus per_score FLOPs on each
    score (the scale, masks and biases added) and softmax."""
    scores = batch * heads * q_len * kv_len
    softmax = NORMALIZATIONS["Softmax"]
    return 2 * scores * head + (per_score + softmax) * scores + 2 * scores * v_head


def _softcap(node: onnx.NodeProto) -> int:
    """softcap * tanh(scores / softcap): a divide, the tanh and a multiply per score."""
    return TRANSCENDENTAL + 2 if _attr(node, "softcap", 0.0) else 0


def _ms_attention_dims(node: onnx.NodeProto, ins: Infos):
    """com.microsoft.Attention: input [B, S, Hin], weights [Hin, Hq + Hk + Hv] (thirds unless
    qkv_hidden_sizes), past [2, B, heads, P, head]. None when the total length is a run-time
    value (past and present sharing one buffer)."""
    x, w = _dims(_at(ins, 0)), _dims(_at(ins, 1))
    heads = _attr(node, "num_heads", 0)
    if x is None or w is None or len(x) != 3 or len(w) != 2 or heads <= 0:
        return None
    hq, hk, hv = _attr(node, "qkv_hidden_sizes", None) or [w[1] // 3] * 3
    if hq + hk + hv != w[1] or hq % heads or hv % heads or hk != hq:
        return None
    past_len = 0
    if _has_input(node, 4):
        past = _dims(_at(ins, 4))
        if _attr(node, "past_present_share_buffer", 0) or past is None or len(past) != 5:
            return None
        past_len = past[3]
    batch, seq, hidden = x
    return batch, seq, hidden, hq, hv, heads, past_len + seq


def _ms_attention(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """The packed QKV projection (2 * B*S * Hin * (Hq+Hk+Hv), plus the bias), then attention of
    each head over past + new keys; the mask and attention_bias are one add per score each,
    rotary embedding ROTARY per rotated element of Q and K."""
    dims = _ms_attention_dims(node, ins)
    if dims is None:
        return None
    batch, seq, hidden, hq, hv, heads, total = dims
    tokens, width = batch * seq, 2 * hq + hv
    flops = 2 * tokens * hidden * width + (tokens * width if _has_input(node, 2) else 0)
    masked = _has_input(node, 3) or bool(_attr(node, "unidirectional", 0))
    per_score = 1 + int(masked) + int(_has_input(node, 5))
    flops += _attention_core(batch, heads, seq, total, hq // heads, hv // heads, per_score)
    if _attr(node, "do_rotary", 0):
        rotated = _attr(node, "rotary_embedding_dim", 0) or hq // heads
        flops += ROTARY * 2 * tokens * heads * rotated
    return flops


def _ms_attention_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _ms_attention_dims(node, ins)
    if dims is None:
        return []
    batch, seq, _, hq, hv, heads, total = dims
    x = _at(ins, 0)
    return [_like((batch, seq, hv), x), _like((2, batch, heads, total, hq // heads), x)]


def _mha_dims(node: onnx.NodeProto, ins: Infos):
    """com.microsoft.MultiHeadAttention: (B, S, L, heads, head, v_head, total, k_projected).

    query [B, S, heads*head] or packed QKV [B, S, heads, 3, head]; key [B, L, heads*head],
    packed KV [B, L, heads, 2, head], or already BNSH [B, heads, L, head] (cross attention's
    cache, which takes no past); value alike. None when past and present share a buffer."""
    q, heads = _dims(_at(ins, 0)), _attr(node, "num_heads", 0)
    if q is None or heads <= 0:
        return None
    k = _dims(_at(ins, 1)) if _has_input(node, 1) else None
    v = _dims(_at(ins, 2)) if _has_input(node, 2) else None
    if _has_input(node, 8):  # past_sequence_length: the valid past is a run-time value
        return None
    if len(q) == 5:  # packed QKV
        batch, seq, _, _, head = q
        return batch, seq, seq, heads, head, head, seq, True
    if len(q) != 3 or k is None:
        return None
    batch, seq, hidden = q
    head = hidden // heads
    if len(k) == 5:  # packed KV
        kv_len, v_head, projected = k[1], k[4], True
    elif len(k) == 4:  # BNSH keys and values, no past
        kv_len, v_head, projected = k[2], None if v is None else v[3], False
    elif len(k) == 3 and v is not None and len(v) == 3:
        kv_len, v_head, projected = k[1], v[2] // heads, True
    else:
        return None
    if v_head is None:
        return None
    past_len = 0
    if projected and _has_input(node, 6):
        past = _dims(_at(ins, 6))
        if past is None or len(past) != 4:
            return None
        past_len = past[2]
    return batch, seq, kv_len, heads, head, v_head, past_len + kv_len, projected


def _mha(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Attention of each head over past + new keys (projections are outside this op); the bias
    is one add per element of Q, and of new K and V; key_padding_mask and attention_bias one
    add per score each."""
    dims = _mha_dims(node, ins)
    if dims is None:
        return None
    batch, seq, kv_len, heads, head, v_head, total, projected = dims
    masked = _has_input(node, 4) or bool(_attr(node, "unidirectional", 0))
    per_score = 1 + int(masked) + int(_has_input(node, 5))
    flops = _attention_core(batch, heads, seq, total, head, v_head, per_score)
    if _has_input(node, 3):
        new_kv = batch * kv_len * heads * (head + v_head) if projected else 0
        flops += batch * seq * heads * head + new_kv
    return flops


def _mha_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _mha_dims(node, ins)
    if dims is None:
        return []
    batch, seq, _, heads, head, v_head, total, _ = dims
    q = _at(ins, 0)
    return [
        _like((batch, seq, heads * v_head), q),
        _like((batch, heads, total, head), q),
        _like((batch, heads, total, v_head), q),
        _like((batch, heads, seq, total), q),
    ]


def _gqa_dims(node: onnx.NodeProto, ins: Infos):
    """com.microsoft.GroupQueryAttention: (B, S, L, heads, kv_heads, head).

    query [B, S, heads*head], or packed QKV [B, S, (heads + 2*kv_heads)*head] when key and value
    are absent; key [B, L, kv_heads*head]."""
    q = _dims(_at(ins, 0))
    heads, kv_heads = _attr(node, "num_heads", 0), _attr(node, "kv_num_heads", 0)
    if q is None or len(q) != 3 or heads <= 0 or kv_heads <= 0:
        return None
    batch, seq, width = q
    if not _has_input(node, 1):  # packed QKV
        return batch, seq, seq, heads, kv_heads, width // (heads + 2 * kv_heads)
    k = _dims(_at(ins, 1))
    if k is None or len(k) != 3:
        return None
    return batch, seq, k[1], heads, kv_heads, width // heads


def _gqa_total(node: onnx.NodeProto, ins: Infos, outs: Infos, kv_len: int) -> int | None:
    """The keys attended: the L new ones without a past (past_key [B, kv_heads, P, head]).
    With one, the value of the input total_sequence_length, known only when present_key's
    declared length differs from the past's (no buffer shared between them)."""
    if not _has_input(node, 3):
        return kv_len
    past, present = _dims(_at(ins, 3)), _dims(_at(outs, 1))
    if past is None or present is None or len(present) != 4 or present[2] == past[2]:
        return None
    return present[2]


def _gqa(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Attention of each query head over the total keys (kv heads shared by heads / kv_heads
    query heads: fewer keys stored, as many products); the causal mask and attention_bias one add
    per score each; rotary embedding ROTARY per rotated element of Q and K; the optional per-head
    RMS norm of Q and K (q_norm_weight) 4 per element."""
    dims = _gqa_dims(node, ins)
    if dims is None:
        return None
    batch, seq, kv_len, heads, kv_heads, head = dims
    total = _gqa_total(node, ins, outs, kv_len)
    if total is None:
        return None
    per_score = 1 + int(bool(_attr(node, "causal", 1))) + int(_has_input(node, 10))
    flops = _attention_core(batch, heads, seq, total, head, head, per_score + _softcap(node))
    q_elements, k_elements = batch * seq * heads * head, batch * kv_len * kv_heads * head
    if _attr(node, "do_rotary", 0):
        cache = _dims(_at(ins, 7))
        if cache is None:
            return None
        rotated = 2 * cache[-1]
        flops += ROTARY * (q_elements + k_elements) // head * rotated
    if _has_input(node, 14):
        flops += NORMALIZATIONS["RMSNormalization"] * (q_elements + k_elements)
    return flops


def _gqa_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """The output [B, S, heads*head]; present_key and present_value [B, kv_heads, L, head]
    without a past (with one, their length is the run's or their declaration's)."""
    dims = _gqa_dims(node, ins)
    if dims is None:
        return []
    batch, seq, kv_len, heads, kv_heads, head = dims
    q = _at(ins, 0)
    present = None if _has_input(node, 3) else _like((batch, kv_heads, kv_len, head), q)
    return [_like((batch, seq, heads * head), q), present, present]


def _gqa_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Every input and output, but only the rows of the cos and sin caches the positions read."""
    return _rotary_cache_bytes(node, ins, outs, caches=(7, 8), tokens=_tokens(_at(ins, 0)))


def _onnx_attention_dims(node: onnx.NodeProto, ins: Infos):
    """ONNX Attention (opset 23): Q [B, Hq, S, head] or [B, S, Hq*head] with q_num_heads;
    K [B, Hkv, L, head] or [B, L, Hkv*head]; V alike with its own head size; past_key
    [B, Hkv, P, head]. No projection inside."""
    q, k, v = (_dims(_at(ins, i)) for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v):
        return None
    if len(q) == 4:
        (batch, heads, seq, head), kv_len, v_head = q, k[2], v[3]
    elif len(q) == 3:
        heads, kv_heads = _attr(node, "q_num_heads", 0), _attr(node, "kv_num_heads", 0)
        if heads <= 0 or kv_heads <= 0:
            return None
        batch, seq, head = q[0], q[1], q[2] // heads
        kv_len, v_head = k[1], v[2] // kv_heads
    else:
        return None
    past_len = 0
    if _has_input(node, 4):
        past = _dims(_at(ins, 4))
        if past is None or len(past) != 4:
            return None
        past_len = past[2]
    return batch, heads, seq, past_len + kv_len, head, v_head


def _onnx_attention(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    dims = _onnx_attention_dims(node, ins)
    if dims is None:
        return None
    masked = _has_input(node, 3) or bool(_attr(node, "is_causal", 0))
    return _attention_core(*dims, per_score=1 + int(masked) + _softcap(node))


def _rotary_dims(node: onnx.NodeProto, x: tuple[int, ...]) -> int | None:
    """Elements rotated: all, or rotary_embedding_dim of each head."""
    rotary = _attr(node, "rotary_embedding_dim", 0)
    if not rotary:
        return math.prod(x)
    if len(x) == 4:
        head = x[3]
    else:
        heads = _attr(node, "num_heads", 0)
        if heads <= 0:
            return None
        head = x[2] // heads
    return math.prod(x) // head * rotary


def _rotary(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """ROTARY per rotated element of X ([B, S, hidden] or [B, heads, S, head]; both domains);
    the rest of each head is copied."""
    x = _dims(_at(ins, 0))
    if x is None or len(x) not in (3, 4):
        return None
    rotated = _rotary_dims(node, x)
    return None if rotated is None else ROTARY * rotated


def _tokens(x: TensorInfo | None) -> int | None:
    """B * S of a [B, S, hidden] or [B, heads, S, head] tensor."""
    dims = _dims(x)
    if dims is None or len(dims) not in (3, 4):
        return None
    return dims[0] * (dims[1] if len(dims) == 3 else dims[2])


def _rotary_cache_bytes(
    node: onnx.NodeProto, ins: Infos, outs: Infos, caches: tuple[int, int], tokens: int | None
) -> int | None:
    """Every input read and output written, except the cos and sin caches, of which only the
    rows of the positions of the tokens are read (like a gather)."""
    total = 0
    for index, (name, info) in enumerate(zip(node.input, ins, strict=False)):
        if not name:
            continue
        if index in caches:
            cache = _dims(info)
            if cache is None or tokens is None:
                return None
            size = tensor_bytes(info) // numel(info)
            total += min(tokens * cache[-1], math.prod(cache)) * size
        else:
            size = tensor_bytes(info)
            if size is None:
                return None
            total += size
    written = _sum_bytes(node.output, outs)
    return None if written is None else total + written


def _ms_rotary_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    return _rotary_cache_bytes(node, ins, outs, caches=(2, 3), tokens=_tokens(_at(ins, 0)))


def _onnx_rotary_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    if not _has_input(node, 3):  # caches already gathered per token: read whole
        return _all_bytes(node, ins, outs)
    return _rotary_cache_bytes(node, ins, outs, caches=(1, 2), tokens=_tokens(_at(ins, 0)))


# --- com.microsoft FLOP and shape rules -----------------------------------------------------


def _same_as(index: int, count: int = 1) -> ShapeRule:
    """`count` outputs of the shape and type of input `index`."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        source = _at(ins, index)
        return [_like(_shape(source), source)] * count

    return outputs


def _broadcast(*shapes) -> tuple[int, ...] | None:
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


def _matmul_shape(a, b) -> tuple[int, ...] | None:
    """numpy.matmul's output shape, 1-D operands promoted and dropped again."""
    if a is None or b is None or not a or not b:
        return None
    left = (1, *a) if len(a) == 1 else a
    right = (*b, 1) if len(b) == 1 else b
    if left[-1] != right[-2]:
        return None
    batch = _broadcast(left[:-2], right[:-2])
    if batch is None:
        return None
    return (*batch, *((left[-2],) if len(a) > 1 else ()), *((right[-1],) if len(b) > 1 else ()))


def _matmul_outputs(dtype_from: int | None = 0, dtype: str | None = None) -> ShapeRule:
    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        shape = _matmul_shape(_shape(_at(ins, 0)), _shape(_at(ins, 1)))
        source = _at(ins, dtype_from) if dtype_from is not None else None
        return [_like(shape, source, dtype)]

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

    a = effective(_shape(_at(ins, 0)), _attr(node, "transA", 0), _attr(node, "transBatchA", 0))
    b = effective(_shape(_at(ins, 1)), _attr(node, "transB", 0), _attr(node, "transBatchB", 0))
    return a, b


def _fused_matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """MatMul of the transposed operands (2*M*N*K), plus a multiply per output when alpha != 1."""
    a, _ = _fused_matmul_operands(node, ins)
    out = numel(_at(outs, 0))
    if a is None or out is None:
        return None
    return 2 * out * a[-1] + (out if _attr(node, "alpha", 1.0) != 1.0 else 0)


def _fused_matmul_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    return [_like(_matmul_shape(*_fused_matmul_operands(node, ins)), _at(ins, 0))]


def _gemm_outputs(a: int, b: int) -> ShapeRule:
    """(M, N) of Gemm-like ops, from A and B and transA/transB, in A's type."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        a_dims, b_dims = _dims(_at(ins, a)), _dims(_at(ins, b))
        if a_dims is None or b_dims is None or len(a_dims) != 2 or len(b_dims) != 2:
            return []
        m = a_dims[1] if _attr(node, "transA", 0) else a_dims[0]
        n = b_dims[0] if _attr(node, "transB", 0) else b_dims[1]
        return [_like((m, n), _at(ins, a))]

    return outputs


def _activation(node: onnx.NodeProto) -> int | None:
    """FLOPs per output of a fused activation (FusedConv, FusedGemm), None for one unknown."""
    name = _attr(node, "activation", "")
    return 0 if not name else ELEMENTWISE_UNARY.get(name)


def _fused_gemm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    gemm, act, out = _gemm(node, ins, outs), _activation(node), numel(_at(outs, 0))
    return None if gemm is None or act is None or out is None else gemm + act * out


def _fused_conv(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Conv (with its bias), one add per output for the residual Z (input 3), the activation."""
    conv, act, out = _conv(node, ins, outs), _activation(node), numel(_at(outs, 0))
    if conv is None or act is None or out is None:
        return None
    return conv + (out if _has_input(node, 3) else 0) + act * out


def _window_outputs(
    spatial: tuple[int, ...], kernel: Sequence[int], node: onnx.NodeProto
) -> tuple[int, ...] | None:
    """Output spatial sizes of a conv or pool window (pads, strides, dilations, auto_pad,
    ceil_mode), as the ONNX Conv and pooling definitions give them."""
    count = len(spatial)
    if len(kernel) != count:
        return None
    strides = _attr(node, "strides", None) or [1] * count
    dilations = _attr(node, "dilations", None) or [1] * count
    pads = _attr(node, "pads", None) or [0] * (2 * count)
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    rounding = math.ceil if _attr(node, "ceil_mode", 0) else math.floor
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


def _split_layout(x: tuple[int, ...], channels_last: bool):
    """(N, C, spatial) of an NCHW tensor, or of an NHWC one."""
    if channels_last:
        return x[0], x[-1], x[1:-1]
    return x[0], x[1], x[2:]


def _join_layout(n: int, c: int, spatial: tuple[int, ...], channels_last: bool) -> tuple:
    return (n, *spatial, c) if channels_last else (n, c, *spatial)


def _conv_outputs(weight: int, dtype_from: int) -> ShapeRule:
    """Conv's output shape, in the input's layout (channels_last for ONNX Runtime's NHWC
    QLinearConv); the weight stays [Cout, Cin/group, k...] in both."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        x, w = _dims(_at(ins, 0)), _dims(_at(ins, weight))
        if x is None or w is None or len(x) != len(w) or len(x) < 3:
            return []
        channels_last = bool(_attr(node, "channels_last", 0))
        n, _, spatial = _split_layout(x, channels_last)
        kernel = _attr(node, "kernel_shape", None) or w[2:]
        sizes = _window_outputs(spatial, kernel, node)
        if sizes is None:
            return []
        return [_like(_join_layout(n, w[0], sizes, channels_last), _at(ins, dtype_from))]

    return outputs


def _pool_outputs(channels_last_default: int) -> ShapeRule:
    """A pooling window's output, in the input's layout and type."""

    def outputs(node: onnx.NodeProto, ins: Infos) -> list:
        x, kernel = _dims(_at(ins, 0)), _attr(node, "kernel_shape", None)
        if x is None or not kernel or len(x) < 3:
            return []
        channels_last = bool(_attr(node, "channels_last", channels_last_default))
        n, c, spatial = _split_layout(x, channels_last)
        sizes = _window_outputs(spatial, kernel, node)
        if sizes is None:
            return []
        return [_like(_join_layout(n, c, sizes, channels_last), _at(ins, 0))]

    return outputs


def _global_pool_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    x = _dims(_at(ins, 0))
    if x is None or len(x) < 3:
        return []
    channels_last = bool(_attr(node, "channels_last", 0))
    n, c, spatial = _split_layout(x, channels_last)
    return [_like(_join_layout(n, c, (1,) * len(spatial), channels_last), _at(ins, 0))]


def _requantized(base: FlopRule) -> FlopRule:
    """A QLinear op: its float op's FLOPs plus QUANTIZE per output element."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        flops, out = base(node, ins, outs), numel(_at(outs, 0))
        return None if flops is None or out is None else flops + QUANTIZE * out

    return rule


def _qlinear_binary_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """QLinearAdd / QLinearMul: A (0) and B (3) broadcast, in A's type."""
    shape = _broadcast(_shape(_at(ins, 0)), _shape(_at(ins, 3)))
    return [_like(shape, _at(ins, 0))]


def _qlinear_where_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """QLinearWhere: condition (0), X (1) and Y (4) broadcast, in X's type."""
    shape = _broadcast(*(_shape(_at(ins, i)) for i in (0, 1, 4)))
    return [_like(shape, _at(ins, 1))]


def _qlinear_concat_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """QLinearConcat: Y_scale, Y_zero_point, then (tensor, scale, zero point) per input."""
    parts = [_shape(info) for info in ins[2::3]]
    if not parts or any(part is None for part in parts):
        return []
    rank = len(parts[0])
    axis = _attr(node, "axis", 0) % rank
    size = sum(part[axis] for part in parts)
    shape = (*parts[0][:axis], size, *parts[0][axis + 1 :])
    return [_like(shape, _at(ins, 1))]


def _qlinear_reduce_mean_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    x = _shape(_at(ins, 0))
    if x is None:
        return []
    axes = {axis % len(x) for axis in _attr(node, "axes", range(len(x)))}
    keep = _attr(node, "keepdims", 1)
    shape = [1 if axis in axes else size for axis, size in enumerate(x) if keep or axis not in axes]
    return [_like(shape, _at(ins, 0))]


def _qgemm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp: Gemm's MACs, the int32 C, then
    each output requantized (y_scale given) or scaled to float (one multiply)."""
    gemm, out = _gemm_at(node, ins, outs, a=0, c=6), numel(_at(outs, 0))
    if gemm is None or out is None:
        return None
    return gemm + (QUANTIZE if _has_input(node, 7) else 1) * out


def _qgemm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """(M, N), quantized like y_zero_point when it is given, else float."""
    result = _gemm_outputs(a=0, b=3)(node, ins)
    if not result or result[0] is None:
        return []
    dtype = _dtype(_at(ins, 8)) if _has_input(node, 8) else "float32"
    return [_like(result[0].shape, None, dtype)]


def _matmul_integer_to_float(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A, B, a_scale, b_scale, a_zp, b_zp, bias: integer MatMul, each output scaled to float
    (one multiply), plus the bias."""
    macs, out = _matmul(node, ins, outs), numel(_at(outs, 0))
    if macs is None or out is None:
        return None
    return macs + out + (out if _has_input(node, 6) else 0)


def _dynamic_quantize_matmul(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A (float), B, b_scale, b_zp, bias: A quantized on the fly as DynamicQuantizeLinear does,
    the integer MatMul, each output scaled back to float, plus the bias."""
    macs, a, out = _matmul(node, ins, outs), numel(_at(ins, 0)), numel(_at(outs, 0))
    if macs is None or a is None or out is None:
        return None
    return (2 + QUANTIZE) * a + macs + out + (out if _has_input(node, 4) else 0)


def _matmul_nbits_dims(node: onnx.NodeProto, ins: Infos):
    a, k, n = _dims(_at(ins, 0)), _attr(node, "K", 0), _attr(node, "N", 0)
    if a is None or k <= 0 or n <= 0 or a[-1] != k:
        return None
    return a, k, n


def _matmul_nbits(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """A [..., K] times the [K, N] weight stored in bits-wide blocks: 2*M*N*K, plus the bias.
    Dequantizing the blocks is the kernel's own business (once, or per tile), not counted; the
    bytes are the packed weight, its scales and zero points as stored."""
    dims = _matmul_nbits_dims(node, ins)
    if dims is None:
        return None
    a, k, n = dims
    rows = math.prod(a[:-1])
    return 2 * rows * n * k + (rows * n if _has_input(node, 5) else 0)


def _matmul_nbits_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _matmul_nbits_dims(node, ins)
    return [] if dims is None else [_like((*dims[0][:-1], dims[2]), _at(ins, 0))]


def _skip_norm(norm: int, bias: int) -> FlopRule:
    """input + skip (+ bias at input `bias`), then the normalization, per input element."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        count = numel(_at(ins, 0))
        return None if count is None else (1 + int(_has_input(node, bias)) + norm) * count

    return rule


def _skip_norm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """output, mean, inv_std_var (one per row, float), input_skip_bias_sum."""
    x = _at(ins, 0)
    shape = _shape(x)
    if shape is None:
        return []
    stats = _like((*shape[:-1], 1), None, "float32")
    return [_like(shape, x), stats, stats, _like(shape, x)]


def _rms_norm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """SimplifiedLayerNormalization: Y like X, inv_std_var over the normalized axes (float)."""
    x = _at(ins, 0)
    shape = _shape(x)
    if shape is None:
        return []
    axis = _attr(node, "axis", -1) % len(shape)
    stats = _like((*shape[:axis], *(1,) * (len(shape) - axis)), None, "float32")
    return [_like(shape, x), stats]


def _embed_layer_norm_dims(node: onnx.NodeProto, ins: Infos):
    ids, table = _dims(_at(ins, 0)), _dims(_at(ins, 2))
    if ids is None or table is None or len(ids) != 2 or len(table) != 2:
        return None
    return ids[0], ids[1], table[1]


def _embed_layer_norm(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma,
    beta, mask, position_ids: per element of the [B, S, H] output, the gathered embeddings
    summed (one add per table after the first) and LayerNormalization; the mask index is one add
    per mask element."""
    dims = _embed_layer_norm_dims(node, ins)
    if dims is None:
        return None
    batch, seq, hidden = dims
    tables = 2 + int(_has_input(node, 4))
    mask = numel(_at(ins, 7)) if _has_input(node, 7) else 0
    if mask is None:
        return None
    return batch * seq * hidden * (tables - 1 + NORMALIZATIONS["LayerNormalization"]) + mask


def _embed_layer_norm_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _embed_layer_norm_dims(node, ins)
    if dims is None:
        return []
    batch, seq, hidden = dims
    table = _at(ins, 2)
    return [
        _like((batch, seq, hidden), table),
        _like((batch,), None, "int32"),
        _like((batch, seq, hidden), table),
    ]


def _embed_layer_norm_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """The ids, mask, gamma and beta read; of each embedding table only the B*S rows gathered;
    the outputs written."""
    tables = (2, 3, 4)
    gathered = []
    for index in tables:
        if _has_input(node, index):
            row = _dims(_at(ins, index))
            size = tensor_bytes(_at(ins, index))
            gathered.append(None if row is None or size is None else size // math.prod(row))
    dims = _embed_layer_norm_dims(node, ins)
    rest = [i for i, name in enumerate(node.input) if name and i not in tables]
    sizes = [tensor_bytes(_at(ins, i)) for i in rest]
    written = _sum_bytes(node.output, outs)
    if dims is None or None in gathered or None in sizes or written is None:
        return None
    batch, seq, hidden = dims
    return sum(sizes) + sum(batch * seq * hidden * size for size in gathered) + written


def _bias_split_gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """X [N, S, D] + bias, then left half * Gelu(right half): per output, GELU and a multiply."""
    x, y = numel(_at(ins, 0)), numel(_at(outs, 0))
    return None if x is None or y is None else x + (GELU + 1) * y


def _bias_split_gelu_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    x = _shape(_at(ins, 0))
    return [] if x is None else [_like((*x[:-1], x[-1] // 2), _at(ins, 0))]


def _gemm_fast_gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """X * W, the bias, FastGelu on each output."""
    macs, out = _matmul(node, ins, outs), numel(_at(outs, 0))
    if macs is None or out is None:
        return None
    return macs + (out if _has_input(node, 2) else 0) + GELU_TANH * out


def _group_norm(skip: bool) -> FlopRule:
    """GroupNorm's normalization (8 per element), SiLU when activation=1 (SILU per element);
    SkipGroupNorm adds skip and bias first (one add each)."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        count = numel(_at(ins, 0))
        if count is None:
            return None
        adds = (1 + int(_has_input(node, 4))) if skip else 0
        act = SILU if _attr(node, "activation", 0) else 0
        return (NORMALIZATIONS["GroupNormalization"] + adds + act) * count

    return rule


def _fast_gelu(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """The optional bias (one add), then GELU's tanh approximation."""
    return _per_output(GELU_TANH + int(_has_input(node, 1)))(node, ins, outs)


def _silu(default_alpha: float) -> FlopRule:
    """x * sigmoid(alpha * x) (QuickGelu, Swish): SILU, plus the multiply by an alpha != 1."""

    def rule(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
        scaled = _attr(node, "alpha", default_alpha) != 1.0
        return _per_output(SILU + int(scaled))(node, ins, outs)

    return rule


def _quantize_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """x's shape, in the zero point's type (uint8 without one)."""
    dtype = _dtype(_at(ins, 2)) if _has_input(node, 2) else "uint8"
    return [_like(_shape(_at(ins, 0)), None, dtype)]


def _dequantize_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """x's shape, in the scale's type."""
    return [_like(_shape(_at(ins, 0)), _at(ins, 1))]


def _mul_integer_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """MulInteger: A (0) and B (2) broadcast, int32."""
    return [_like(_broadcast(_shape(_at(ins, 0)), _shape(_at(ins, 2))), None, "int32")]


def _control_flow(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int:
    return 0


# --- the tables -----------------------------------------------------------------------------

_COMMON: dict[str, Rule] = {
    **{op: Rule("elementwise", _per_output(cost)) for op, cost in ELEMENTWISE_UNARY.items()},
    **{
        op: Rule("elementwise", _per_output(cost, variadic=op in VARIADIC))
        for op, cost in ELEMENTWISE_BINARY.items()
    },
    **{op: Rule("normalization", _per_input(cost)) for op, cost in NORMALIZATIONS.items()},
    **dict.fromkeys(REDUCTIONS, Rule("reduction", _per_input(1))),
    **dict.fromkeys(POOLING, Rule("pooling", _pooling)),
    **dict.fromkeys(GLOBAL_POOLING, Rule("global_pooling", _per_input(1))),
    **dict.fromkeys(GATHERS, Rule("gather", _free, _gather_bytes)),
    **dict.fromkeys(DATA_MOVEMENT, Rule("data_movement", _free)),
    **dict.fromkeys(VIEWS, Rule("view", _free)),
}

RULES: dict[str, Rule] = {  # the default ONNX domain
    **_COMMON,
    "MatMul": Rule("matmul", _matmul),
    "MatMulInteger": Rule("matmul", _matmul),
    "QLinearMatMul": Rule("matmul", _qlinear_matmul),
    "Gemm": Rule("gemm", _gemm),
    "Conv": Rule("conv", _conv),
    "ConvInteger": Rule("conv", _conv_integer),
    "QLinearConv": Rule("conv", _qlinear_conv),
    "ConvTranspose": Rule("conv_transpose", _conv_transpose),
    "Gelu": Rule("elementwise", _gelu),
    "Swish": Rule("elementwise", _silu(1.0)),
    "DynamicQuantizeLinear": Rule("quantize", _dynamic_quantize),
    "SimplifiedLayerNormalization": Rule(
        "normalization",
        _per_input(NORMALIZATIONS["SimplifiedLayerNormalization"]),
        outputs=_rms_norm_outputs,
    ),
    "Resize": Rule("resize", _resize),
    "Upsample": Rule("resize", _resize),
    "Einsum": Rule("einsum", _einsum),
    "Range": Rule("generator", _range),
    "Attention": Rule("attention", _onnx_attention),
    "RotaryEmbedding": Rule("rotary", _rotary, _onnx_rotary_bytes),
    **dict.fromkeys(CONTROL_FLOW, Rule("control_flow", _control_flow, bytes_optional=True)),
}

MS_RULES: dict[str, Rule] = {  # com.microsoft, as ONNX Runtime defines its contrib ops
    # Same math and inputs as the default-domain op of the same name.
    "QuantizeLinear": Rule("elementwise", _per_output(QUANTIZE), outputs=_quantize_outputs),
    "DequantizeLinear": Rule("elementwise", _per_output(DEQUANTIZE), outputs=_dequantize_outputs),
    "GatherND": Rule("gather", _free, _gather_bytes),
    "Trilu": Rule("data_movement", _free, outputs=_same_as(0)),
    "Pad": Rule("data_movement", _free),
    "Range": Rule("generator", _range),
    "ExpandDims": Rule("view", _free),
    "MatMulInteger16": Rule("matmul", _matmul, outputs=_matmul_outputs(None, "int32")),
    # Activations and biases fused by the transformer optimizer.
    "Gelu": Rule("elementwise", _per_output(GELU), outputs=_same_as(0)),
    "BiasGelu": Rule("elementwise", _per_output(1 + GELU), outputs=_same_as(0)),
    "FastGelu": Rule("elementwise", _fast_gelu, outputs=_same_as(0)),
    "QuickGelu": Rule("elementwise", _silu(1.702), outputs=_same_as(0)),
    "BiasAdd": Rule("elementwise", _per_output(2), outputs=_same_as(0)),
    "BiasSplitGelu": Rule("elementwise", _bias_split_gelu, outputs=_bias_split_gelu_outputs),
    "BiasSoftmax": Rule(
        "normalization", _per_input(1 + NORMALIZATIONS["Softmax"]), outputs=_same_as(0)
    ),
    # (A - A_zero_point) * (B - B_zero_point), accumulated in int32
    "MulInteger": Rule("elementwise", _per_output(3), outputs=_mul_integer_outputs),
    # Normalizations.
    "SkipLayerNormalization": Rule(
        "normalization",
        _skip_norm(NORMALIZATIONS["LayerNormalization"], bias=4),
        outputs=_skip_norm_outputs,
    ),
    "SkipSimplifiedLayerNormalization": Rule(
        "normalization",
        _skip_norm(NORMALIZATIONS["SimplifiedLayerNormalization"], bias=3),
        outputs=_skip_norm_outputs,
    ),
    "SimplifiedLayerNormalization": Rule(
        "normalization",
        _per_input(NORMALIZATIONS["SimplifiedLayerNormalization"]),
        outputs=_rms_norm_outputs,
    ),
    "EmbedLayerNormalization": Rule(
        "normalization", _embed_layer_norm, _embed_layer_norm_bytes, _embed_layer_norm_outputs
    ),
    "GroupNorm": Rule("normalization", _group_norm(skip=False), outputs=_same_as(0)),
    "SkipGroupNorm": Rule("normalization", _group_norm(skip=True), outputs=_same_as(0, 2)),
    # Attention.
    "Attention": Rule("attention", _ms_attention, outputs=_ms_attention_outputs),
    "MultiHeadAttention": Rule("attention", _mha, outputs=_mha_outputs),
    "GroupQueryAttention": Rule("attention", _gqa, _gqa_bytes, _gqa_outputs),
    "RotaryEmbedding": Rule("rotary", _rotary, _ms_rotary_bytes, _same_as(0)),
    # Fused float MatMul / Gemm / Conv.
    "FusedMatMul": Rule("matmul", _fused_matmul, outputs=_fused_matmul_outputs),
    "TransposeMatMul": Rule("matmul", _fused_matmul, outputs=_fused_matmul_outputs),
    "FusedGemm": Rule("gemm", _fused_gemm, outputs=_gemm_outputs(a=0, b=1)),
    "GemmFastGelu": Rule("matmul", _gemm_fast_gelu, outputs=_matmul_outputs()),
    "FusedConv": Rule("conv", _fused_conv, outputs=_conv_outputs(weight=1, dtype_from=0)),
    # Quantized MatMul.
    "MatMulNBits": Rule("matmul", _matmul_nbits, outputs=_matmul_nbits_outputs),
    "MatMulIntegerToFloat": Rule(
        "matmul", _matmul_integer_to_float, outputs=_matmul_outputs(dtype_from=2)
    ),
    "DynamicQuantizeMatMul": Rule(
        "matmul", _dynamic_quantize_matmul, outputs=_matmul_outputs(dtype_from=0)
    ),
    "QGemm": Rule("gemm", _qgemm, outputs=_qgemm_outputs),
    # QOperator ops (ONNX Runtime's NHWC ones carry channels_last).
    "QLinearConv": Rule("conv", _qlinear_conv, outputs=_conv_outputs(weight=3, dtype_from=7)),
    "QLinearAdd": Rule("elementwise", _per_output(1 + QUANTIZE), outputs=_qlinear_binary_outputs),
    "QLinearMul": Rule("elementwise", _per_output(1 + QUANTIZE), outputs=_qlinear_binary_outputs),
    "QLinearSigmoid": Rule(
        "elementwise", _per_output(TRANSCENDENTAL + QUANTIZE), outputs=_same_as(0)
    ),
    "QLinearLeakyRelu": Rule("elementwise", _per_output(2 + QUANTIZE), outputs=_same_as(0)),
    "QLinearWhere": Rule("elementwise", _per_output(1 + QUANTIZE), outputs=_qlinear_where_outputs),
    "QLinearSoftmax": Rule(
        "normalization", _requantized(_per_input(NORMALIZATIONS["Softmax"])), outputs=_same_as(0)
    ),
    "QLinearGlobalAveragePool": Rule(
        "global_pooling", _requantized(_per_input(1)), outputs=_global_pool_outputs
    ),
    "QLinearAveragePool": Rule(
        "pooling", _requantized(_pooling), outputs=_pool_outputs(channels_last_default=0)
    ),
    "QLinearReduceMean": Rule(
        "reduction", _requantized(_per_input(1)), outputs=_qlinear_reduce_mean_outputs
    ),
    "QLinearConcat": Rule("data_movement", _per_output(QUANTIZE), outputs=_qlinear_concat_outputs),
    "NhwcMaxPool": Rule("pooling", _pooling, outputs=_pool_outputs(channels_last_default=1)),
}

_RULE_TABLES: dict[str, dict[str, Rule]] = {
    **dict.fromkeys(DEFAULT_DOMAINS, RULES),
    MS_DOMAIN: MS_RULES,
}

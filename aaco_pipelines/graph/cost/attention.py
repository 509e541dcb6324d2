"""Attention: com.microsoft's Attention, MultiHeadAttention and GroupQueryAttention, ONNX's own
Attention (opset 23), and rotary embedding in both domains.

Attention counts the score matrix the operator defines, dense: Q.K^T, the scale, each mask or
bias added, softmax and the product with V, for every query and every key of the total sequence
(past + new). A causal or windowed kernel that skips masked blocks does less. When the attended
length is only known at run time (a KV cache shared between past and present, whose valid length
is an input's value), the node is unknown.
"""

from __future__ import annotations

import math

import onnx

from aaco_pipelines.graph.cost.core import (
    ROTARY,
    TRANSCENDENTAL,
    Infos,
    TensorInfo,
    all_bytes,
    at,
    attr,
    has_input,
    known_dims,
    like,
    numel,
    sum_bytes,
    tensor_bytes,
)
from aaco_pipelines.graph.cost.normalization import NORMALIZATIONS


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
    return TRANSCENDENTAL + 2 if attr(node, "softcap", 0.0) else 0


def _ms_attention_dims(node: onnx.NodeProto, ins: Infos):
    """com.microsoft.Attention: input [B, S, Hin], weights [Hin, Hq + Hk + Hv] (thirds unless
    qkv_hidden_sizes), past [2, B, heads, P, head]. None when the total length is a run-time
    value (past and present sharing one buffer)."""
    x, w = known_dims(at(ins, 0)), known_dims(at(ins, 1))
    heads = attr(node, "num_heads", 0)
    if x is None or w is None or len(x) != 3 or len(w) != 2 or heads <= 0:
        return None
    hq, hk, hv = attr(node, "qkv_hidden_sizes", None) or [w[1] // 3] * 3
    if hq + hk + hv != w[1] or hq % heads or hv % heads or hk != hq:
        return None
    past_len = 0
    if has_input(node, 4):
        past = known_dims(at(ins, 4))
        if attr(node, "past_present_share_buffer", 0) or past is None or len(past) != 5:
            return None
        past_len = past[3]
    batch, seq, hidden = x
    return batch, seq, hidden, hq, hv, heads, past_len + seq


def ms_attention(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """The packed QKV projection (2 * B*S * Hin * (Hq+Hk+Hv), plus the bias), then attention of
    each head over past + new keys; the mask and attention_bias are one add per score each,
    rotary embedding ROTARY per rotated element of Q and K."""
    dims = _ms_attention_dims(node, ins)
    if dims is None:
        return None
    batch, seq, hidden, hq, hv, heads, total = dims
    tokens, width = batch * seq, 2 * hq + hv
    flops = 2 * tokens * hidden * width + (tokens * width if has_input(node, 2) else 0)
    masked = has_input(node, 3) or bool(attr(node, "unidirectional", 0))
    per_score = 1 + int(masked) + int(has_input(node, 5))
    flops += _attention_core(batch, heads, seq, total, hq // heads, hv // heads, per_score)
    if attr(node, "do_rotary", 0):
        rotated = attr(node, "rotary_embedding_dim", 0) or hq // heads
        flops += ROTARY * 2 * tokens * heads * rotated
    return flops


def ms_attention_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _ms_attention_dims(node, ins)
    if dims is None:
        return []
    batch, seq, _, hq, hv, heads, total = dims
    x = at(ins, 0)
    return [like((batch, seq, hv), x), like((2, batch, heads, total, hq // heads), x)]


def _mha_dims(node: onnx.NodeProto, ins: Infos):
    """com.microsoft.MultiHeadAttention: (B, S, L, heads, head, v_head, total, k_projected).

    query [B, S, heads*head] or packed QKV [B, S, heads, 3, head]; key [B, L, heads*head],
    packed KV [B, L, heads, 2, head], or already BNSH [B, heads, L, head] (cross attention's
    cache, which takes no past); value alike. None when past and present share a buffer."""
    q, heads = known_dims(at(ins, 0)), attr(node, "num_heads", 0)
    if q is None or heads <= 0:
        return None
    k = known_dims(at(ins, 1)) if has_input(node, 1) else None
    v = known_dims(at(ins, 2)) if has_input(node, 2) else None
    if has_input(node, 8):  # past_sequence_length: the valid past is a run-time value
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
    if projected and has_input(node, 6):
        past = known_dims(at(ins, 6))
        if past is None or len(past) != 4:
            return None
        past_len = past[2]
    return batch, seq, kv_len, heads, head, v_head, past_len + kv_len, projected


def mha(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Attention of each head over past + new keys (projections are outside this op); the bias
    is one add per element of Q, and of new K and V; key_padding_mask and attention_bias one
    add per score each."""
    dims = _mha_dims(node, ins)
    if dims is None:
        return None
    batch, seq, kv_len, heads, head, v_head, total, projected = dims
    masked = has_input(node, 4) or bool(attr(node, "unidirectional", 0))
    per_score = 1 + int(masked) + int(has_input(node, 5))
    flops = _attention_core(batch, heads, seq, total, head, v_head, per_score)
    if has_input(node, 3):
        new_kv = batch * kv_len * heads * (head + v_head) if projected else 0
        flops += batch * seq * heads * head + new_kv
    return flops


def mha_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    dims = _mha_dims(node, ins)
    if dims is None:
        return []
    batch, seq, _, heads, head, v_head, total, _ = dims
    q = at(ins, 0)
    return [
        like((batch, seq, heads * v_head), q),
        like((batch, heads, total, head), q),
        like((batch, heads, total, v_head), q),
        like((batch, heads, seq, total), q),
    ]


def _gqa_dims(node: onnx.NodeProto, ins: Infos):
    """com.microsoft.GroupQueryAttention: (B, S, L, heads, kv_heads, head).

    query [B, S, heads*head], or packed QKV [B, S, (heads + 2*kv_heads)*head] when key and value
    are absent; key [B, L, kv_heads*head]."""
    q = known_dims(at(ins, 0))
    heads, kv_heads = attr(node, "num_heads", 0), attr(node, "kv_num_heads", 0)
    if q is None or len(q) != 3 or heads <= 0 or kv_heads <= 0:
        return None
    batch, seq, width = q
    if not has_input(node, 1):  # packed QKV
        return batch, seq, seq, heads, kv_heads, width // (heads + 2 * kv_heads)
    k = known_dims(at(ins, 1))
    if k is None or len(k) != 3:
        return None
    return batch, seq, k[1], heads, kv_heads, width // heads


def _gqa_total(node: onnx.NodeProto, ins: Infos, outs: Infos, kv_len: int) -> int | None:
    """The keys attended: the L new ones without a past (past_key [B, kv_heads, P, head]).
    With one, the value of the input total_sequence_length, known only when present_key's
    declared length differs from the past's (no buffer shared between them)."""
    if not has_input(node, 3):
        return kv_len
    past, present = known_dims(at(ins, 3)), known_dims(at(outs, 1))
    if past is None or present is None or len(present) != 4 or present[2] == past[2]:
        return None
    return present[2]


def gqa(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
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
    per_score = 1 + int(bool(attr(node, "causal", 1))) + int(has_input(node, 10))
    flops = _attention_core(batch, heads, seq, total, head, head, per_score + _softcap(node))
    q_elements, k_elements = batch * seq * heads * head, batch * kv_len * kv_heads * head
    if attr(node, "do_rotary", 0):
        cache = known_dims(at(ins, 7))
        if cache is None:
            return None
        rotated = 2 * cache[-1]
        flops += ROTARY * (q_elements + k_elements) // head * rotated
    if has_input(node, 14):
        flops += NORMALIZATIONS["RMSNormalization"] * (q_elements + k_elements)
    return flops


def gqa_outputs(node: onnx.NodeProto, ins: Infos) -> list:
    """The output [B, S, heads*head]; present_key and present_value [B, kv_heads, L, head]
    without a past (with one, their length is the run's or their declaration's)."""
    dims = _gqa_dims(node, ins)
    if dims is None:
        return []
    batch, seq, kv_len, heads, kv_heads, head = dims
    q = at(ins, 0)
    present = None if has_input(node, 3) else like((batch, kv_heads, kv_len, head), q)
    return [like((batch, seq, heads * head), q), present, present]


def gqa_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """Every input and output, but only the rows of the cos and sin caches the positions read."""
    return _rotary_cache_bytes(node, ins, outs, caches=(7, 8), tokens=_tokens(at(ins, 0)))


def _onnx_attention_dims(node: onnx.NodeProto, ins: Infos):
    """ONNX Attention (opset 23): Q [B, Hq, S, head] or [B, S, Hq*head] with q_num_heads;
    K [B, Hkv, L, head] or [B, L, Hkv*head]; V alike with its own head size; past_key
    [B, Hkv, P, head]. No projection inside."""
    q, k, v = (known_dims(at(ins, i)) for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v):
        return None
    if len(q) == 4:
        (batch, heads, seq, head), kv_len, v_head = q, k[2], v[3]
    elif len(q) == 3:
        heads, kv_heads = attr(node, "q_num_heads", 0), attr(node, "kv_num_heads", 0)
        if heads <= 0 or kv_heads <= 0:
            return None
        batch, seq, head = q[0], q[1], q[2] // heads
        kv_len, v_head = k[1], v[2] // kv_heads
    else:
        return None
    past_len = 0
    if has_input(node, 4):
        past = known_dims(at(ins, 4))
        if past is None or len(past) != 4:
            return None
        past_len = past[2]
    return batch, heads, seq, past_len + kv_len, head, v_head


def onnx_attention(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    dims = _onnx_attention_dims(node, ins)
    if dims is None:
        return None
    masked = has_input(node, 3) or bool(attr(node, "is_causal", 0))
    return _attention_core(*dims, per_score=1 + int(masked) + _softcap(node))


def _rotary_dims(node: onnx.NodeProto, x: tuple[int, ...]) -> int | None:
    """Elements rotated: all, or rotary_embedding_dim of each head."""
    rotary = attr(node, "rotary_embedding_dim", 0)
    if not rotary:
        return math.prod(x)
    if len(x) == 4:
        head = x[3]
    else:
        heads = attr(node, "num_heads", 0)
        if heads <= 0:
            return None
        head = x[2] // heads
    return math.prod(x) // head * rotary


def rotary_embedding(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    """ROTARY per rotated element of X ([B, S, hidden] or [B, heads, S, head]; both domains);
    the rest of each head is copied."""
    x = known_dims(at(ins, 0))
    if x is None or len(x) not in (3, 4):
        return None
    rotated = _rotary_dims(node, x)
    return None if rotated is None else ROTARY * rotated


def _tokens(x: TensorInfo | None) -> int | None:
    """B * S of a [B, S, hidden] or [B, heads, S, head] tensor."""
    dims = known_dims(x)
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
            cache = known_dims(info)
            if cache is None or tokens is None:
                return None
            size = tensor_bytes(info) // numel(info)
            total += min(tokens * cache[-1], math.prod(cache)) * size
        else:
            size = tensor_bytes(info)
            if size is None:
                return None
            total += size
    written = sum_bytes(node.output, outs)
    return None if written is None else total + written


def ms_rotary_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    return _rotary_cache_bytes(node, ins, outs, caches=(2, 3), tokens=_tokens(at(ins, 0)))


def onnx_rotary_bytes(node: onnx.NodeProto, ins: Infos, outs: Infos) -> int | None:
    if not has_input(node, 3):  # caches already gathered per token: read whole
        return all_bytes(node, ins, outs)
    return _rotary_cache_bytes(node, ins, outs, caches=(1, 2), tokens=_tokens(at(ins, 0)))

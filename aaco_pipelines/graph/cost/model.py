"""What each node should cost: FLOPs and bytes moved, from tensor shapes alone.

These are the roofline numbers the measured kernel times are judged against, so a rule only
answers when the math is known: an op without a rule, or a node whose shapes inference could not
pin down, gets flops and bytes None with rule "unknown" rather than a made-up number.

Conventions: one multiply-add is 2 FLOPs; a transcendental (exp, erf, tanh, ...) is
TRANSCENDENTAL FLOPs; bytes moved are every input read (activations and weights) plus every output
written, except for views (free) and gathers (only the gathered rows are read). The rules live
in one module per op family (dense, quantized, attention, normalization, elementwise, spatial,
movement), each with its own conventions; rules.py maps (domain, op type) to them.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from aaco_pipelines.graph.cost.core import (
    UNKNOWN,
    Infos,
    NodeCost,
    Rule,
    TensorInfo,
    all_bytes,
    at,
    numel,
)
from aaco_pipelines.graph.cost.rules import RULE_TABLES


def rule_for(op_type: str, domain: str) -> str | None:
    """The name of the rule that costs this op of this domain, None when there is none."""
    rule = RULE_TABLES.get(domain, {}).get(op_type)
    return None if rule is None else rule.name


def node_cost(node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> NodeCost:
    """FLOPs and bytes moved for one node of the default ONNX domain or of com.microsoft, given
    known tensors; unknown for other domains, ops without a rule and shapes not known."""
    rule = RULE_TABLES.get(node.domain, {}).get(node.op_type)
    if rule is None:
        return UNKNOWN
    if rule.name == "view":
        return NodeCost(0, 0, rule.name)
    ins = [tensors.get(n) if n else None for n in node.input]
    try:
        outs = _outputs(node, ins, [tensors.get(n) if n else None for n in node.output], rule)
        flops = rule.flops(node, ins, outs)
        moved = (rule.moved or all_bytes)(node, ins, outs)
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
    rule = RULE_TABLES.get(node.domain, {}).get(node.op_type)
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
        info if numel(info) is not None and info.dtype else at(derived, index) or info
        for index, info in enumerate(known)
    ]

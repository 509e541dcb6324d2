"""What a structural diff is: its records, and how they survive the TraceLake.

The diff is computed once per session, against the model's previous session on its target, by
the drift stage (stages/judge_drift.py), and stored as JSON in `structural_diffs`: the report,
the asset pages and `aaco diff --structure` of that pair read it back with `StructuralDiff.
from_dict` instead of re-attributing both sessions' kernels (analysis.comparison.structural_diff).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class NodeTime:
    """One original node (or unmatched runtime node) on both sides, per profiled iteration."""

    node: str
    op_type: str | None
    in_a: bool  # the node is in A's graph (False: only B's model version has it)
    in_b: bool
    a_ms: float  # median time per profiled iteration (0: did not run)
    b_ms: float
    delta_ms: float  # b - a
    ci_low_ms: float | None  # CONFIDENCE bootstrap interval of delta_ms (None: too few iterations)
    ci_high_ms: float | None
    kernels_a: float  # kernels per profiled iteration
    kernels_b: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FusionChange:
    """Original nodes ONNX Runtime ran as one on one side and otherwise on the other."""

    change: str  # lost | gained | reshaped | retyped
    fused_a: list[str]  # the fused runtime op types in A (empty: its members ran apart)
    fused_b: list[str]
    anchor: str  # the fused group's anchor node (fusion_groups: the member with most FLOPs)
    where: str  # the members' common name scope (/encoder/layer.3/LayerNorm), else the anchor
    members: list[str]  # the original nodes involved that both graphs have
    groups_a: list[dict]  # A's fused groups: fused_op, anchor, members, runtime_nodes
    groups_b: list[dict]
    kernels_a: float  # kernels per profiled iteration of every runtime node involved
    kernels_b: float
    a_ms: float  # the members' median time per profiled iteration, together
    b_ms: float
    delta_ms: float
    ci_low_ms: float | None
    ci_high_ms: float | None

    @property
    def label(self) -> str:
        """The fused op(s) it is about: 'LayerNormalization', 'Gemm -> FusedGemm'."""
        a, b = "+".join(self.fused_a), "+".join(self.fused_b)
        return {"lost": a, "gained": b}.get(self.change, f"{a} -> {b}")

    def to_dict(self) -> dict:
        return asdict(self) | {"label": self.label}


@dataclass(frozen=True)
class FusionTotal:
    """Every fusion change of one kind and fused op together (LayerNormalization lost in 24
    layers), with the summed time difference of their members and its CI."""

    change: str
    label: str
    count: int
    where: str  # the one with the largest time difference
    a_ms: float  # their members' median time per profiled iteration, together
    b_ms: float
    delta_ms: float
    ci_low_ms: float | None
    ci_high_ms: float | None
    kernels_a: float
    kernels_b: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class KernelPresence:
    """A kernel only one side ran, per profiled iteration of that side."""

    kernel: str
    change: str  # appeared (only B) | vanished (only A)
    per_iteration: float
    ms_per_iteration: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StructuralDiff:
    session_a: str
    session_b: str
    model_slug: str
    model_sha256_a: str | None
    model_sha256_b: str | None
    iterations_a: int  # profiled iterations that ran kernels
    iterations_b: int
    confidence: float
    resamples: int
    fusions: list[FusionChange]  # by |delta_ms|, largest first
    fusion_totals: list[FusionTotal]
    kernel_count_changes: list[NodeTime]  # aligned nodes outside every fusion change
    kernels: list[KernelPresence]  # appeared, then vanished, by time
    nodes: list[NodeTime]  # every node that ran on either side, by |delta_ms|
    only_in_a: list[str] = field(default_factory=list)  # original nodes B's graph lacks
    only_in_b: list[str] = field(default_factory=list)
    # each side's critical path (analysis.critical_path.session_path): {"a": row, "b": row}, a row None for a
    # session analysed before critical paths; with the node a 2x speedup helps most
    critical_paths: dict[str, dict | None] = field(default_factory=dict)

    def count(self, change: str) -> int:
        return sum(f.change == change for f in self.fusions)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["fusions"] = [f.to_dict() for f in self.fusions]
        return data


def _fusion(row: dict) -> FusionChange:
    return FusionChange(**{k: v for k, v in row.items() if k != "label"})


def structural_diff_from_dict(data: dict) -> StructuralDiff:
    """A diff as `StructuralDiff.to_dict` wrote it (a stored one), as records again."""
    return StructuralDiff(
        **{
            **data,
            "fusions": [_fusion(f) for f in data["fusions"]],
            "fusion_totals": [FusionTotal(**t) for t in data["fusion_totals"]],
            "kernel_count_changes": [NodeTime(**n) for n in data["kernel_count_changes"]],
            "kernels": [KernelPresence(**k) for k in data["kernels"]],
            "nodes": [NodeTime(**n) for n in data["nodes"]],
        }
    )

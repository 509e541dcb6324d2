"""What `aaco tune` may try on a model, and in which order: each a named, recorded change.

Two kinds. A runtime change is sidecar keys (graph optimization level, disabled optimizers,
threads, execution mode); a graph change is a rewrite by ONNX Runtime's own tools (its
transformer fusions, dynamic int8 quantization, fp16 conversion), offered only where the graph
has what the rewrite acts on. The session's diagnosis orders them: the class the evidence
decided puts first what that class's advice names (a launch-bound model: fusion; a memory-bound
one: fewer bytes; a compute-bound one: lower precision), so a budget spent early has tried what
the evidence pointed at. An undecided class leaves the order as built, cheapest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aaco_pipelines.registry.sidecar import GRAPH_OPTIMIZATION_LEVELS, ModelSidecar

RUNTIME = "runtime"
GRAPH = "graph"

# Graph rewrites, by what they change in the model.
TRANSFORMER_FUSIONS = "transformer_fusions"  # onnxruntime.transformers.optimizer
INT8_DYNAMIC = "int8_dynamic"  # onnxruntime.quantization.quantize_dynamic (MatMul/Gemm)
FP16 = "fp16"  # onnxruntime.transformers' float16 conversion

# Ops a rewrite acts on: without any of them the rewrite leaves the executed graph unchanged.
ATTENTION_OPS = frozenset({"Softmax"})  # with MatMul: an attention block to fuse
NORM_OPS = frozenset({"LayerNormalization", "ReduceMean"})  # LayerNorm, fused or not yet
MATMUL_OPS = frozenset({"MatMul", "Gemm"})
FLOAT_MATH_OPS = frozenset({"MatMul", "Gemm", "Conv", "Add", "Mul"})

# What each class's advice points at first, by the candidates' focus (see Candidate.focus).
CLASS_FOCUS: dict[str, tuple[str, ...]] = {
    "launch-bound": ("fusion", "threads", "precision"),
    "memory-bound": ("precision", "fusion", "threads"),
    "compute-bound": ("precision", "threads", "fusion"),
    "cpu-bound": ("threads", "fusion", "precision"),
    "throttled": (),  # no change to the model fixes a device's clock
    "balanced": ("fusion", "precision", "threads"),
}


@dataclass(frozen=True)
class Candidate:
    """One change to try: `changes` (sidecar keys) for a runtime change, `rewrite` for a graph
    change; `focus` is what it acts on (fusion, threads or precision), `why` where it came from."""

    name: str
    kind: str
    focus: str
    why: str
    changes: dict = field(default_factory=dict)
    rewrite: str | None = None

    def sidecar(self, base: ModelSidecar) -> dict:
        """The sidecar this candidate is measured with: the model's, with its changes."""
        return {**base.to_dict(), **self.changes}


def runtime_candidates(sidecar: ModelSidecar, cores: int) -> list[Candidate]:
    """The runtime changes to the model's own configuration: every other optimization level
    but `disabled` (never faster than basic), no disabled optimizers where some are, and the
    intra-op thread counts 1, half the cores and all of them that differ from its own."""
    found = [
        Candidate(
            f"graph optimization level {level}",
            RUNTIME,
            "fusion",
            f"the model runs at {sidecar.graph_optimization_level}",
            {"graph_optimization_level": level},
        )
        for level in GRAPH_OPTIMIZATION_LEVELS
        if level not in ("disabled", sidecar.graph_optimization_level)
    ]
    if sidecar.disabled_optimizers:
        found.append(
            Candidate(
                "no disabled optimizers",
                RUNTIME,
                "fusion",
                f"the sidecar disables {', '.join(sidecar.disabled_optimizers)}",
                {"disabled_optimizers": []},
            )
        )
    for threads in sorted({1, max(1, cores // 2), max(1, cores)}):
        if threads != sidecar.intra_op_threads:
            found.append(
                Candidate(
                    f"intra-op threads {threads}",
                    RUNTIME,
                    "threads",
                    f"{cores} cores, the model at "
                    f"{sidecar.intra_op_threads or 'the runtime default'}",
                    {"intra_op_threads": threads},
                )
            )
    return found


# Each rewrite, offered when the graph has what it acts on: (needs, name, focus, why).
REWRITES = (
    (
        lambda ops: bool((ops & ATTENTION_OPS and ops & MATMUL_OPS) or ops & NORM_OPS),
        TRANSFORMER_FUSIONS, "transformer fusions", "fusion",
        "attention or LayerNorm ops ONNX Runtime's transformer optimizer fuses",
    ),
    (
        lambda ops: bool(ops & MATMUL_OPS),
        INT8_DYNAMIC, "dynamic int8 quantization", "precision",
        "MatMul/Gemm weights to int8 (checked against the accuracy limits)",
    ),
    (
        lambda ops: bool(ops & FLOAT_MATH_OPS),
        FP16, "fp16 conversion", "precision",
        "float math in half precision (halves the bytes; on a CPU the runtime may cast around it)",
    ),
)  # fmt: skip


def graph_candidates(op_types: Iterable[str]) -> list[Candidate]:
    """The rewrites that act on this graph's ops (its op types, as the graph stage reads them)."""
    ops = set(op_types)
    return [
        Candidate(name, GRAPH, focus, why, rewrite=rewrite)
        for needs, rewrite, name, focus, why in REWRITES
        if needs(ops)
    ]


def search_order(
    candidates: Sequence[Candidate], bottleneck: str | None, decided: bool
) -> list[Candidate]:
    """The candidates in the order to try them: by the focus the decided class points at
    first, runtime before graph changes within a focus (cheaper, nothing rewritten); as built
    when the class is undecided or unknown. A throttled device gets none: its clock, not the
    model, is the change to make."""
    if bottleneck == "throttled" and decided:
        return []
    focus = CLASS_FOCUS.get(bottleneck or "", ()) if decided else ()
    rank = {name: i for i, name in enumerate(focus)}
    return sorted(
        candidates,
        key=lambda c: (rank.get(c.focus, len(rank)), c.kind != RUNTIME),
    )

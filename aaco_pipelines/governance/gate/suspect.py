"""The vocabulary of root cause (root_cause.explain_change): a suspect, the change it is asked to
explain, and the parameters and priors that judge it. Kept apart so that the modules gathering
suspects (environment_suspects, kernel_suspects) and the one ranking them (root_cause) share it
without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

# How often each kind of change is the cause of a performance regression, before looking at the
# evidence: a judgment from release triage (model and runtime upgrades dominate; a kernel or op
# regressing on its own, with nothing else changed, is rarer), not a measured frequency. Pass
# RootCauseParams(priors=...) to use your own history. They sum to 1: the other kinds were
# scaled down, roughly in proportion, to make room for fusion_change's 0.05 (they had drifted to
# 1.15 as kinds were added; posteriors are normalized, so only the ratios matter, and those
# barely moved).
PRIORS: dict[str, float] = {
    "model_version": 0.25,  # the model file changed (model_sha256)
    "runtime": 0.17,  # ONNX Runtime / ROCm / driver (runtime_fingerprint)
    "execution_provider": 0.08,  # the providers that actually ran (providers_used)
    "clocks": 0.08,  # lower CPU / GPU clocks, power or thermal throttling (telemetry)
    # other processes held the host's CPUs on one side only (measurement_quality)
    "host_contention": 0.08,
    "op_time": 0.07,  # one op type's time per iteration (op_breakdown)
    "kernel_count": 0.04,  # kernels per iteration of a family (kernel_events)
    # a kernel whose counted work per dispatch or occupancy moved with its time (kernel_diagnoses)
    "kernel_hardware": 0.04,
    # ONNX Runtime fused the nodes of a pattern on one side only (analysis/structural_diff): the
    # usual way a runtime upgrade, another optimisation level or a re-exported model slows a
    # model ("Graph Optimizations in ONNX Runtime", onnxruntime.ai/docs/performance/
    # model-optimizations/graph-optimizations.html: the fusions differ by level and provider).
    # Between op_time and kernel_count: it is what often lies behind both, but needs a fusion
    # the runtime applies to change, which a plain kernel regression does not.
    "fusion_change": 0.05,
    "new_kernels": 0.03,  # kernels the baseline never ran
    "vanished_kernels": 0.01,  # kernels the current session no longer runs
    "noise": 0.085,  # no real change: session-to-session noise
    "unexplained": 0.015,  # a real change none of the suspects accounts for
}


@dataclass(frozen=True)
class RootCauseParams:
    priors: Mapping[str, float] = field(default_factory=lambda: dict(PRIORS))
    noise_floor: float = 0.02  # least session-to-session sd of p50, as a fraction of its median
    effect_scale: float = 0.10  # tau: scale of a real change, as a fraction of the baseline median
    min_change: float = 0.05  # relative change for an op / clock to become a suspect
    min_latency_share: float = 0.01  # ... and at least this fraction of the baseline latency
    min_kernel_count_change: float = 0.5  # kernels per iteration
    min_violation_change: float = 5.0  # percent of time in power / thermal violation
    min_contention_change: float = 0.10  # other processes' share of the host's CPU
    min_fit: float = 0.02  # fit of a suspect that explains nothing, or the wrong direction
    unknown_fit: float = 0.5  # fit of a suspect whose size cannot be measured

    def to_dict(self) -> dict:
        return asdict(self) | {"priors": dict(self.priors)}


@dataclass(frozen=True)
class Suspect:
    kind: str
    name: str
    before: str | None
    after: str | None
    explained_ms: float | None  # per-iteration slowdown it accounts for (negative: speed-up)
    share: float | None  # explained / total latency delta (None: not measurable)
    prior: float = 0.0
    likelihood: float = 0.0  # relative to the most likely hypothesis (1.0)
    posterior: float = 0.0
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Delta:
    """The change to explain, in ns per iteration."""

    measured: float  # current p50 - baseline median p50
    profiled: float  # the same in the profiled pass (op and kernel times are measured there)
    reference: float  # the baseline median p50
    reference_profiled: float
    sigma: float


def share(explained_ns: float, total_ns: float) -> float:
    """The fraction of the change to explain that a suspect accounts for."""
    return explained_ns / total_ns if total_ns else (1.0 if explained_ns else 0.0)

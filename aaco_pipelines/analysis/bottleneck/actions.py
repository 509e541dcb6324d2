"""What to do about a class, for the session it was judged on: the actions worth reading.

A class's actions are a search order, not a checklist: an action applies only where the
session could use it (MIGraphX and hipBLASLt tuning need a ROCm provider or a trace from a
ROCm GPU; thread counts need a host this project measured on), a suspect measurement first
gets "measure again" with its reasons, an undecided class gets only the actions its leader and
runner-up share the evidence for, and the list stops at MAX_ACTIONS. Why: a suspect CPU session
once got ten, including GPU library tuning and three that would save 1 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aaco_pipelines.analysis.bottleneck.classification import (
    BALANCED,
    COMPUTE,
    CPU,
    LAUNCH,
    MEMORY,
    RUNNER_UP_MIN_POSTERIOR,
    THROTTLED,
    BottleneckReport,
    EvidenceItem,
    Recommendation,
)

MEASURE_AGAIN = "Measure again on a quiet host"  # how the first action on a suspect one begins
MAX_ACTIONS = 5  # after "measure again": more is a list nobody reads to the end
MIN_WORTH = 0.05  # of the p50: an action whose saving is known and smaller is left out

# Where an action applies: every session, or only where the session has what it needs.
ANYWHERE = "anywhere"
ROCM = "rocm"  # a ROCm or MIGraphX provider, or a trace from a ROCm GPU
GPU = "gpu"  # kernels on a GPU (any vendor's provider, or an ingested GPU trace)
MEASURED_HERE = "measured here"  # a session this project measured (not a trace ingested)
ONNX_RUNTIME = "onnx runtime"  # measured through ONNX Runtime (its session options apply)

ROCM_PROVIDERS = ("ROCMExecutionProvider", "MIGraphXExecutionProvider")
GPU_PROVIDERS = (*ROCM_PROVIDERS, "CUDAExecutionProvider", "TensorrtExecutionProvider")
ROCM_TRACES = ("rocprofv3", "rocprofv3_csv", "rocprofv3_json", "rocpd", "rpd")


@dataclass(frozen=True)
class Action:
    text: str
    cites: tuple[str, ...]  # the signals its "why" quotes
    applies: str = ANYWHERE


# What to do per class, in the order to try them.
ACTIONS: dict[str, tuple[Action, ...]] = {
    LAUNCH: (
        Action(
            "Fuse operators into fewer, larger kernels (ONNX Runtime: graph optimization "
            "level ORT_ENABLE_ALL)",
            ("launch_tax", "microkernel_share"),
            ONNX_RUNTIME,
        ),
        Action(
            "Compile the model with MIGraphX, which fuses across operators", ("launch_tax",), ROCM
        ),
        Action(
            "Run larger batches so each kernel launch carries more work",
            ("mean_kernel_us", "roof_time_per_node_us"),
        ),
        Action(
            "Capture the iteration once and replay it (HIP graphs) to skip per-kernel launch cost",
            ("launch_tax",),
            GPU,
        ),
        Action(
            "Cut host ops between kernels: shape arithmetic, CPU fallbacks, host-device copies",
            ("launch_tax",),
            GPU,
        ),
    ),
    MEMORY: (
        Action(
            "Fuse elementwise chains so intermediates stay on chip instead of round-tripping memory",
            ("memory_utilization", "arithmetic_intensity_ratio"),
        ),
        Action("Lower precision (fp16/bf16) to halve the bytes moved", ("memory_utilization",)),
        Action(
            "Use a layout the kernels stream well (NHWC on GPU, NCHWc on CPU)",
            ("memory_utilization",),
        ),
        Action(
            "Remove redundant Transpose/Cast nodes: they move bytes without computing",
            ("arithmetic_intensity_ratio",),
        ),
    ),
    COMPUTE: (
        Action(
            "Lower precision (fp16/bf16, int8) to reach matrix cores or wider SIMD",
            ("compute_utilization", "arithmetic_intensity_ratio"),
        ),
        Action(
            "Tune the GEMMs (hipBLASLt/rocBLAS tuning, MIGraphX exhaustive tuning)",
            ("compute_utilization",),
            ROCM,
        ),
        Action(
            "Check achieved FLOP/s against the envelope's peak: a large gap means badly shaped "
            "GEMMs (pad dimensions to the tile size)",
            ("compute_utilization",),
        ),
    ),
    CPU: (
        Action(
            "Use fewer intra-op threads than cores: the model's own threads wait for a core",
            ("runqueue_wait_ratio", "involuntary_switches_per_s"),
            MEASURED_HERE,
        ),
        Action(
            "Move pre/post-processing off the inference critical path",
            ("launch_tax", "mean_kernel_us"),
        ),
    ),
    THROTTLED: (
        Action(
            "Check cooling and power capping (amd-smi power/thermal violations, CPU governor)",
            ("power_or_thermal_limited", "clock_drop"),
        ),
        Action(
            "Enable performance determinism mode so clocks hold steady",
            ("clock_drop", "clock_cv"),
        ),
        Action(
            "Re-measure once the device is cool: these numbers mix throttled and full clocks",
            ("clock_drop", "clock_cv"),
        ),
    ),
    BALANCED: (
        Action(
            "Nothing dominates: look at the top ops by time and optimize the largest",
            ("launch_tax", "compute_utilization", "memory_utilization"),
        ),
    ),
}


@dataclass(frozen=True)
class SessionFacts:
    """What decides which actions apply to a session."""

    providers: tuple[str, ...] = ()
    trace_source: str | None = None
    ingested: bool = False  # a trace collected elsewhere: no host this project measured
    suspect_reasons: tuple[str, ...] = ()  # the measurement quality's, when it is suspect

    def can(self, applies: str) -> bool:
        gpu_trace = self.ingested and self.trace_source in ROCM_TRACES
        return {
            ANYWHERE: True,
            ROCM: any(p in ROCM_PROVIDERS for p in self.providers) or gpu_trace,
            GPU: any(p in GPU_PROVIDERS for p in self.providers) or self.ingested,
            MEASURED_HERE: not self.ingested,
            ONNX_RUNTIME: not self.ingested,
        }[applies]


def class_actions(report: BottleneckReport, facts: SessionFacts) -> list[tuple[str, str]]:
    """(action, why) for the leader, then for the runner-up while it is a real possibility,
    each only where the session can use it."""
    ranked = sorted(report.posterior, key=report.posterior.__getitem__, reverse=True)
    classes = [ranked[0]]
    if report.posterior[ranked[1]] > RUNNER_UP_MIN_POSTERIOR:
        classes.append(ranked[1])
    by_signal = {item.signal: item for item in report.evidence}
    return [
        (action.text, _why(name, report.posterior[name], [by_signal[s] for s in action.cites]))
        for name in classes
        for action in ACTIONS[name]
        if facts.can(action.applies)
    ]


def measure_again(facts: SessionFacts) -> tuple[str, str] | None:
    """The first thing to do when the measurement is suspect, with its reasons."""
    if not facts.suspect_reasons:
        return None
    return (
        f"{MEASURE_AGAIN} (or pin it: aaco run --laboratory) before acting on this diagnosis",
        "the measurement is suspect: " + "; ".join(facts.suspect_reasons),
    )


def worth_reading(
    first: tuple[str, str] | None,
    candidates: Sequence[tuple[str, str, float | None]],
    p50_ns: float | None,
) -> list[Recommendation]:
    """Ranked recommendations: `first` (measure again), then the candidates (action, why, the
    ns it would save or None when unknown) in order, those saving under MIN_WORTH of the p50
    left out, at most MAX_ACTIONS, no action twice."""
    kept: list[tuple[str, str]] = [first] if first else []
    seen: set[str] = set()
    for action, why, saves_ns in candidates:
        small = saves_ns is not None and p50_ns and saves_ns < MIN_WORTH * p50_ns
        if small or action in seen:
            continue
        seen.add(action)
        kept.append((action, why))
        if len(seen) == MAX_ACTIONS:
            break
    return [Recommendation(rank, action, why) for rank, (action, why) in enumerate(kept, 1)]


def _why(name: str, probability: float, cited: Sequence[EvidenceItem]) -> str:
    """The class's posterior and the measured values the action rests on."""
    present = [
        f"{item.signal} = {item.value:.3g} ({item.bin})" for item in cited if item.likelihoods
    ]
    if not present:
        missing = ", ".join(item.signal for item in cited)
        return f"{name} posterior {probability:.2f}; {missing} not judged"
    return f"{name} posterior {probability:.2f}; " + ", ".join(present)

"""Which evidence a class may rest on, given how the session was measured.

Host contention is a property of the measurement, not of the model. Other processes on the
host stretch every time the host measured (ONNX Runtime's CPU op times, the gaps between GPU
launches) and fill the run queue; they do not move the model's graph, the device's quiet-host
envelope, or kernel times a GPU measured itself. So on a contended measurement the signals it
moves are set aside (shown, not judged) and the classes only they could reach are out of
reach; the class then rests on what contention does not move, or is left undecided. A trace
collected elsewhere holds no host evidence at all: its host-side gaps are launch-bound, never
told apart from a busy host. Concepts: docs/concepts/bottleneck-classes.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aaco_pipelines.analysis.bottleneck.classification import BALANCED, CLASSES, CPU, THROTTLED
from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality

# The measuring host's own state: whatever the model is, other processes move them.
HOST_SIGNALS = ("runqueue_wait_ratio", "involuntary_switches_per_s")
# Times the host took: ONNX Runtime's CPU profile, and the host's clock.
HOST_TIMED = (
    "launch_tax",
    "microkernel_share",
    "mean_kernel_us",
    "compute_utilization",
    "memory_utilization",
    "clock_drop",
    "clock_cv",
)
# Host time between kernels: stretched by contention even where the GPU timed the kernels.
LAUNCH_GAPS = ("launch_tax",)
# Trace sources whose kernel times the device measured (not the host's profiler).
HOST_TIMED_SOURCES = ("ort_profile",)


@dataclass(frozen=True)
class Judging:
    """What the classifier may judge: the signals set aside (signal -> why), the classes the
    rest can reach, and the sentence that says so."""

    set_aside: dict[str, str] = field(default_factory=dict)
    classes: tuple[str, ...] = CLASSES
    context: str | None = None


def judging(
    quality: MeasurementQuality | None, *, trace_source: str | None, ingested: bool
) -> Judging:
    """The evidence a session's class may rest on (see the module's docstring)."""
    if ingested:
        return Judging(
            classes=tuple(name for name in CLASSES if name != CPU),
            context="a trace collected elsewhere holds no host evidence: its gaps between "
            "kernels read as launch-bound, and cpu-bound is not judged",
        )
    if quality is None or not quality.contention_reasons:
        return Judging()
    host_timed = trace_source in HOST_TIMED_SOURCES
    moved = HOST_SIGNALS + (HOST_TIMED if host_timed else LAUNCH_GAPS)
    why = "moved by contention"
    # On a host-timed profile only the graph against the device's roofs is left: it predicts
    # launch-, memory- or compute-bound; "balanced" and "throttled" need measured times.
    out_of_reach = (CPU, THROTTLED, BALANCED) if host_timed else (CPU,)
    busy = " and ".join(quality.contention_reasons)
    what = "every time the host measured" if host_timed else "the host's gaps between kernels"
    return Judging(
        set_aside=dict.fromkeys(moved, why),
        classes=tuple(name for name in CLASSES if name not in out_of_reach),
        context=f"{busy}, which moves {what}: the class rests on what contention does not "
        f"move, and {', '.join(out_of_reach)} cannot be judged",
    )

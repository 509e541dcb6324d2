"""The evidence signals of one session, gathered from the TraceLake for the classifier.

Kernel-side signals come from the derived metrics; roofline signals from the ops' times against
the measured hardware envelope; host-contention and clock signals from the telemetry of the
measured pass. A signal whose source is absent is None.

Every signal read over profiled iterations is their median (launch_tax_p50, the roofline's
median op times, ...): among ten iterations, one preempted for 41x the others moves a mean 5x,
across a bin edge, and the median not at all; measured minutes apart, one model's class went
from compute-bound 0.88 to cpu-bound 0.91. The mean is kept beside it (evidence_means) and
shown, not classified on. The telemetry signals stay means over the pass's ticks: they measure
the contention itself.
"""

from __future__ import annotations

import numpy as np

from aaco_pipelines.analysis.bottleneck.roofline import EnvelopeUtilization, envelope_utilization
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope

MEASURED_TELEMETRY_SQL = """
SELECT device, metric, timestamp_ns, value FROM telemetry
WHERE session_id = $sid AND pass = 'measured'
  AND ((device = 'process' AND metric IN ('runqueue_wait', 'involuntary_context_switches'))
       OR metric IN ('cpu_frequency', 'gfx_clock', 'power_violation', 'thermal_violation'))
"""


# Signals that are derived metrics of the same name: classified on their `_p50` beside them.
FROM_METRICS = ("launch_tax", "microkernel_share", "mean_kernel_us")


def robust(metrics: dict, name: str) -> float | None:
    """The per-iteration median a derived metric has beside its mean (`name`_p50); the mean
    for a session attributed before medians were derived."""
    value = metrics.get(f"{name}_p50")
    return value if value is not None else metrics.get(name)


def kernel_evidence(metrics: dict) -> dict[str, float | None]:
    """The kernel-side signals: per-iteration medians of the derived metrics."""
    return {signal: robust(metrics, signal) for signal in FROM_METRICS}


def session_utilization(
    lake, session_id: str, metrics: dict, envelope: HardwareEnvelope, *, mean: bool = False
) -> EnvelopeUtilization | None:
    """How close the session's kernels came to the measured envelope in a typical iteration
    (its median busy time; `mean=True`: the mean's); None when the model's graph (its FLOPs
    and bytes) is unknown, e.g. a trace ingested alone."""
    rows = lake.query(
        "SELECT m.total_flops, m.total_bytes_moved FROM models m JOIN session_records s "
        "USING (model_sha256) WHERE s.session_id = $sid",
        {"sid": session_id},
    ).to_pylist()
    if not rows or not metrics.get("busy_ns_per_iteration"):
        return None
    totals = rows[0]
    busy = "busy_ns_per_iteration"
    return envelope_utilization(
        float(totals["total_flops"] or 0.0),
        float(totals["total_bytes_moved"] or 0.0),
        metrics[busy] if mean else robust(metrics, busy),
        envelope,
    )


def session_evidence(
    lake,
    session_id: str,
    metrics: dict,
    utilization: EnvelopeUtilization | None,
    ridge_point: float,
    roof_time_per_node_us: float | None = None,
) -> dict[str, float | None]:
    telemetry = lake.query(MEASURED_TELEMETRY_SQL, {"sid": session_id})
    device = np.asarray(telemetry["device"].to_pylist(), dtype=object)
    metric = np.asarray(telemetry["metric"].to_pylist(), dtype=object)
    value = telemetry["value"].to_numpy()
    timestamp = telemetry["timestamp_ns"].to_numpy()

    def mean_of(name: str, where: str = "process") -> float | None:
        selected = value[(metric == name) & (device == where)]
        return float(selected.mean()) if len(selected) else None

    runqueue_ms_per_s = mean_of("runqueue_wait")
    clock_drop, clock_cv = _clock_signals(timestamp, metric, value)
    intensity = utilization.arithmetic_intensity if utilization else None
    return {
        **kernel_evidence(metrics),
        "compute_utilization": utilization.compute_utilization if utilization else None,
        "memory_utilization": utilization.memory_utilization if utilization else None,
        "arithmetic_intensity_ratio": intensity / ridge_point if intensity is not None else None,
        "roof_time_per_node_us": roof_time_per_node_us,
        "runqueue_wait_ratio": runqueue_ms_per_s / 1000.0
        if runqueue_ms_per_s is not None
        else None,
        "involuntary_switches_per_s": mean_of("involuntary_context_switches"),
        "clock_drop": clock_drop,
        "clock_cv": clock_cv,
        "power_or_thermal_limited": _violation_share(metric, value),
    }


def evidence_means(
    metrics: dict, mean_utilization: EnvelopeUtilization | None
) -> dict[str, float | None]:
    """The mean beside each signal classified on a per-iteration median: over the profiled
    iterations, and the utilization of the ops' mean times."""
    means = {signal: metrics.get(signal) for signal in FROM_METRICS}
    if mean_utilization is not None:
        means["compute_utilization"] = mean_utilization.compute_utilization
        means["memory_utilization"] = mean_utilization.memory_utilization
    return means


def _clock_signals(timestamp, metric, value) -> tuple[float | None, float | None]:
    """Drop and variation of the device clock over the measured pass: the GPU gfx clock when
    there is one, else the mean CPU core frequency at each sample."""
    name = "gfx_clock" if np.any(metric == "gfx_clock") else "cpu_frequency"
    mask = metric == name
    if not np.any(mask):
        return None, None
    stamps, inverse = np.unique(timestamp[mask], return_inverse=True)
    clock = np.bincount(inverse, weights=value[mask]) / np.bincount(inverse)
    if len(stamps) < 2 or clock.max() <= 0:
        return None, None
    return float(1.0 - clock.min() / clock.max()), float(clock.std() / clock.mean())


def _violation_share(metric, value) -> float | None:
    mask = (metric == "power_violation") | (metric == "thermal_violation")
    return float(np.mean(value[mask] > 0)) if np.any(mask) else None

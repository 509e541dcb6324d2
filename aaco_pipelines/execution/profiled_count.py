"""How many iterations the profiled pass runs: enough for a stable top op, within a time cap.

ONNX Runtime's profiler can only be switched on when a session is created, and its trace is
read only when the session ends it, so the pass cannot watch the op ranking settle and stop
there. It is sized instead from the measured pass just before it, the same model without the
profiler:

  noise     the measured latencies' robust CV, 1.4826 x MAD / median (a preempted iteration
            barely moves it, where it can double the standard deviation)
  target    (Z x 1.2533 x sqrt(2) x noise / GAP)^2 iterations: enough for the medians of two
            ops GAP (10 %) apart, each as noisy as a whole iteration, to come out in their
            order with probability 0.9 (Z = 1.28; a median's standard error is 1.2533 sd /
            sqrt(n)), the level below which the report calls the top op uncertain
            (analysis/ranking_stability)
  at least  the sidecar's profiled_iterations (default 10)
  at most   MAX_ITERATIONS; and past the minimum the pass stops adding iterations once it has
            run MAX_SECONDS, timed on its own clock, profiler included

A quiet host's measured CV of 0.05 asks for 2 iterations (the minimum runs), a shared host's 0.3
for 47, a sub-millisecond model's 0.6 on a busy one for 186. An explicit count (MeasureOptions.
profiled_iterations, `aaco run --no-profile`) is run exactly; without a measured pass (none
recorded) the minimum is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

GAP = 0.10
Z = 1.2816  # one-sided, probability 0.9
MEDIAN_SE = 1.2533  # sqrt(pi / 2): a median's standard error in sds / sqrt(n)
MAD_TO_SD = 1.4826
MAX_ITERATIONS = 200
MAX_SECONDS = 2.0


@dataclass(frozen=True)
class ProfiledCount:
    minimum: int  # run at least this many
    target: int  # and up to this many while under max_seconds
    max_seconds: float | None  # None: no cap (an exact count)
    noise: float | None  # the measured pass's robust CV, when there was one
    rule: str  # why, in words (recorded with the session)


def robust_cv(latencies: Any) -> float | None:
    """1.4826 x MAD / median of the latencies; None for fewer than 3."""
    values = np.asarray(latencies, dtype=np.float64)
    if len(values) < 3:
        return None
    median = float(np.median(values))
    return MAD_TO_SD * float(np.median(np.abs(values - median))) / median if median > 0 else None


def iterations_for(noise: float) -> int:
    """Profiled iterations that order two ops GAP apart with probability 0.9 at this noise."""
    return math.ceil((Z * MEDIAN_SE * math.sqrt(2.0) * noise / GAP) ** 2)


def profiled_count(
    minimum: int,
    measured_latencies: Any = None,
    *,
    exact: bool = False,
    max_seconds: float = MAX_SECONDS,
) -> ProfiledCount:
    """The profiled pass's size from the measured pass's latencies (see the module's rule)."""
    if exact:
        return ProfiledCount(minimum, minimum, None, None, f"{minimum}, as asked")
    noise = robust_cv(measured_latencies) if measured_latencies is not None else None
    if noise is None:
        return ProfiledCount(minimum, minimum, None, None, f"{minimum}: no measured pass")
    wanted = iterations_for(noise)
    target = max(minimum, min(wanted, MAX_ITERATIONS))
    rule = (
        f"{minimum} to {target} within {max_seconds:g} s: measured robust CV {noise:.3f} asks "
        f"for {wanted} (at least {minimum}, at most {MAX_ITERATIONS})"
    )
    return ProfiledCount(minimum, target, max_seconds, noise, rule)


def request_count(request: dict, measured_latencies: Any = None) -> ProfiledCount:
    """profiled_count for a measuring request (BenchmarkRequest.to_json())."""
    return profiled_count(
        request["profiled_iterations"],
        measured_latencies,
        exact=bool(request.get("profiled_iterations_exact")),
        max_seconds=request.get("max_profiled_seconds", MAX_SECONDS),
    )

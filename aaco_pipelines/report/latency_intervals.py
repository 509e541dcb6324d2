"""A session's headline latency with confidence intervals, from its measured iterations.

The point values are the sessions row's own (so a report never disagrees with the TraceLake);
the intervals say how far they could move on a rerun of the same iterations:

  mean    Student t interval: exact for normal latencies, and by the central limit theorem
          close for the long measured passes used here (no resampling, any n)
  median  distribution-free order-statistic interval: [x(k), x(n-k+1)] with the largest k
          such that P(Binomial(n, 1/2) < k) <= alpha / 2; it holds for any distribution, and
          its achieved coverage (>= the level asked) is reported
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95
SESSION_FIELDS = (
    "latency_mean_ns",
    "latency_std_ns",
    "latency_p50_ns",
    "latency_p99_ns",
    "latency_min_ns",
    "throughput_per_s",
    "profiled_latency_p50_ns",
    "profiling_overhead_pct",
)


def mean_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None
    from scipy.special import stdtrit  # the t quantile; scipy.stats takes 0.5 s to import

    half = stdtrit(x.size - 1, 0.5 + confidence / 2.0) * x.std(ddof=1) / np.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def median_interval(
    values: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float, float] | None:
    """(low, high, achieved coverage); with too few points for the level, [min, max]."""
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n < 2:
        return None
    from scipy.special import bdtr  # the binomial CDF, without scipy.stats' 0.5 s import

    tail = bdtr(np.arange(n), n, 0.5)  # P(B <= j)
    k = max(int(np.count_nonzero(tail <= (1.0 - confidence) / 2.0)), 1)
    coverage = 1.0 - 2.0 * float(bdtr(k - 1, n, 0.5))
    return float(x[k - 1]), float(x[n - k]), coverage


def latency_with_intervals(session: dict, measured_ns: np.ndarray) -> dict:
    """The sessions row's latency figures plus CIs of the mean and the median."""
    summary = {name: session.get(name) for name in SESSION_FIELDS}
    summary["measured_iterations"] = int(np.size(measured_ns))
    summary["confidence"] = CONFIDENCE
    mean_ci = mean_interval(measured_ns)
    median_ci = median_interval(measured_ns)
    summary["latency_mean_ci_ns"] = list(mean_ci) if mean_ci else None
    summary["latency_p50_ci_ns"] = list(median_ci[:2]) if median_ci else None
    summary["latency_p50_ci_coverage"] = median_ci[2] if median_ci else None
    summary["ci_methods"] = {
        "mean": "Student t",
        "median": "distribution-free order statistics (binomial)",
    }
    return summary

"""The drift verdict for the current session of one model+metric: regression, improvement or not.

A verdict needs three things in the same direction: statistical evidence at the current point
(CUSUM, then EWMA, then a robust z), an effect at least `min_effect_pct` large (a real but tiny
change is not worth a page), and a bootstrap CI of that effect that excludes 0. Whichever test
settled the outcome is named in `decided_by`, and every parameter is kept with the verdict.

Every verdict also carries a p-value for "the current point differs from the history", which a
sweep over many series feeds to Benjamini-Hochberg (`governance.drift.fdr`), and a history that is
bimodal or too noisy to judge (`governance.drift.noise`) makes the verdict `unstable_series` instead
of a regression or improvement that would flip with the next session.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from aaco_pipelines.governance.drift.detectors import CusumParams, EwmaParams, cusum, ewma
from aaco_pipelines.governance.drift.noise import ShapeParams, series_shape
from aaco_pipelines.governance.drift.robust_scale import robust_reference, standardize

BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000  # bounds the resample-index matrix to ~32 MB at a time
P_VALUE_TEST = "two-sided predictive: z / sqrt(1/k + pi/2n); t, df 0.7n - 2, or normal if floored"


@dataclass(frozen=True)
class DriftVerdict:
    # "regression" | "improvement" | "no_change" | "unstable_series" | "insufficient_history"
    verdict: str
    effect_pct: float | None  # (current - baseline median) / baseline median * 100, as measured
    ci_low: float | None  # bootstrap CI of effect_pct
    ci_high: float | None
    z: float | None  # the current point, standardized by the baseline
    # two-sided p that the current point (for a confirmed verdict, series.py: the run of sessions
    # since the shift) is no more draws from the history; None without enough history
    p_value: float | None
    # cusum | ewma | z_threshold | no_signal | below_min_effect | ci_includes_zero | bimodal |
    # too_noisy | insufficient_history, and after series.py / fdr.py: awaiting_confirmation |
    # fdr_controlled
    decided_by: str
    baseline: dict | None  # RobustReference.to_dict()
    parameters: dict  # the policy, the direction and the bootstrap inputs
    history_points: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class VerdictPolicy:
    min_history: int = 3  # points before the current one
    history_window: int = 30  # the baseline uses at most the last N points before the current
    min_effect_pct: float = 3.0  # practical significance
    z_threshold: float = 4.0
    floor_fraction: float = 0.01
    ewma: EwmaParams = field(default_factory=EwmaParams)
    cusum: CusumParams = field(default_factory=CusumParams)
    shape: ShapeParams = field(default_factory=ShapeParams)
    bootstrap_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.min_history <= self.history_window:
            raise ValueError("need 1 <= min_history <= history_window")
        if self.bootstrap_resamples < 1:
            raise ValueError("bootstrap_resamples must be at least 1")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")

    def to_dict(self) -> dict:
        return asdict(self)


def drift_verdict(
    series: np.ndarray,
    *,
    higher_is_worse: bool,
    current_samples: np.ndarray | None = None,
    policy: VerdictPolicy = VerdictPolicy(),
) -> DriftVerdict:
    """Judge the last point of `series` (one value per session, oldest first) against the rest.

    `current_samples` are the current session's raw measurements (e.g. per-iteration latencies)
    whose median is the current value; they widen the CI by the current session's own noise.
    Leave them out for a metric that is not a median (p99, throughput): the current value is
    then held fixed in the bootstrap. A history that is bimodal or too noisy overrides the
    outcome with "unstable_series"; the outcome it replaced is kept as `unstable_over`.
    """
    values = np.asarray(series, dtype=float).ravel()
    if values.size == 0:
        raise ValueError("a drift verdict needs at least the current point")
    history = values[:-1][-policy.history_window :]
    current = float(values[-1])
    parameters = {
        **policy.to_dict(),
        "higher_is_worse": higher_is_worse,
        "current_samples": None if current_samples is None else int(np.size(current_samples)),
    }
    if history.size < policy.min_history:
        return _insufficient(parameters, int(history.size))
    baseline = robust_reference(history, policy.floor_fraction)
    if baseline.median == 0.0:
        raise ValueError("baseline median is 0: a percentage effect is undefined for this metric")
    z = standardize(np.append(history, current), baseline)
    effect = (current - baseline.median) / baseline.median * 100.0
    ci_low, ci_high = _bootstrap_effect_ci(history, current, current_samples, policy)
    outcome, decided_by = _outcome(z, effect, (ci_low, ci_high), higher_is_worse, policy)
    p_value = predictive_p_value(float(z[-1]), history.size, estimated_scale=not baseline.floored)
    shape = series_shape(history, policy.shape, policy.min_effect_pct, policy.floor_fraction)
    parameters |= {
        "p_value": p_value,
        "p_value_test": P_VALUE_TEST,
        "series_shape": shape.to_dict(),
    }
    if shape.unstable is not None:
        parameters["unstable_over"] = {"verdict": outcome, "decided_by": decided_by}
        outcome, decided_by = "unstable_series", shape.unstable
    return DriftVerdict(
        verdict=outcome,
        effect_pct=float(effect),
        ci_low=ci_low,
        ci_high=ci_high,
        z=float(z[-1]),
        p_value=p_value,
        decided_by=decided_by,
        baseline=baseline.to_dict(),
        parameters=parameters,
        history_points=int(history.size),
    )


def predictive_p_value(z: float, n: int, estimated_scale: bool = True, points: int = 1) -> float:
    """Two-sided p of a robust z (of one point, or of the mean of `points` consecutive points)
    under "they are more draws from the n-point history" (no change).

    z / sqrt(1 / points + pi / 2n) adds the baseline median's own uncertainty (the median of n
    normal points has variance pi / 2 * sigma^2 / n) to the points'. An estimated (Qn) scale
    makes it a t with max(0.7 n - 2, 1) degrees of freedom, fitted by simulation: on normal
    histories of 3-30 points P(p < alpha) is 0.3-1x alpha for alpha from 1e-2 to 1e-4 (n - 1
    degrees of freedom: up to 2x; the normal: up to 20x). A floored scale is a constant, and at
    least the true sd when the floor is at the noise: the normal then (0.55-0.7x alpha).
    Two-sided because the direction is read off the data: the one-sided p in the observed
    direction would be half the honest value, and Benjamini-Hochberg needs p-values that are
    uniform (or conservative) when nothing changed.
    """
    from scipy.special import ndtr, stdtr  # here: 0.15 s of every aaco command's start-up

    t = abs(z) / np.sqrt(1.0 / points + np.pi / (2.0 * n))
    df = max(0.7 * n - 2.0, 1.0)
    return float(2.0 * (stdtr(df, -t) if estimated_scale else ndtr(-t)))


def _outcome(
    z: np.ndarray,
    effect: float,
    ci: tuple[float, float],
    higher_is_worse: bool,
    policy: VerdictPolicy,
) -> tuple[str, str]:
    """(regression | improvement | no_change, decided_by) before the shape check."""
    direction = int(np.sign(z[-1]))  # +1 above the baseline, -1 below
    evidence = _evidence(z, direction, policy)
    outcome, decided_by = _decide(evidence, effect, *ci, direction, policy)
    if outcome == "change":
        worse = direction == (1 if higher_is_worse else -1)
        outcome = "regression" if worse else "improvement"
    return outcome, decided_by


def _evidence(z: np.ndarray, direction: int, policy: VerdictPolicy) -> str | None:
    """The first test that signals at the current point in the current point's direction."""
    if direction == 0:
        return None
    if cusum(z, policy.cusum).signal[-1] == direction:
        return "cusum"
    if ewma(z, policy.ewma).signal[-1] == direction:
        return "ewma"
    if abs(z[-1]) >= policy.z_threshold:
        return "z_threshold"
    return None


def _decide(
    evidence: str | None,
    effect: float,
    ci_low: float,
    ci_high: float,
    direction: int,
    policy: VerdictPolicy,
) -> tuple[str, str]:
    """("change", test) when all three conditions hold, else ("no_change", the first that fails)."""
    if evidence is None:
        return "no_change", "no_signal"
    if abs(effect) < policy.min_effect_pct:
        return "no_change", "below_min_effect"
    ci_excludes_zero = ci_low > 0.0 if direction > 0 else ci_high < 0.0
    if not ci_excludes_zero:
        return "no_change", "ci_includes_zero"
    return "change", evidence


def _bootstrap_effect_ci(
    history: np.ndarray,
    current: float,
    current_samples: np.ndarray | None,
    policy: VerdictPolicy,
) -> tuple[float, float]:
    """Percentile bootstrap of the effect: resampled history medians against the current value
    (or resampled medians of the current session's samples, when given)."""
    rng = np.random.default_rng(policy.seed)
    resamples = policy.bootstrap_resamples
    base = _bootstrap_medians(history, resamples, rng)
    if current_samples is None:
        cur: np.ndarray | float = current
    else:
        cur = _bootstrap_medians(np.asarray(current_samples, dtype=float).ravel(), resamples, rng)
    effects = (cur - base) / base * 100.0
    tail = (1.0 - policy.confidence) / 2.0
    low, high = np.quantile(effects, [tail, 1.0 - tail])
    return float(low), float(high)


def _bootstrap_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `resamples` resamples with replacement, a bounded block of rows at a time."""
    if values.size == 0:
        raise ValueError("cannot bootstrap an empty sample")
    rows = max(1, BOOTSTRAP_CHUNK_ELEMENTS // values.size)
    blocks = []
    for start in range(0, resamples, rows):
        idx = rng.integers(0, values.size, size=(min(rows, resamples - start), values.size))
        blocks.append(np.median(values[idx], axis=1))
    return np.concatenate(blocks)


def _insufficient(parameters: dict, history_points: int) -> DriftVerdict:
    return DriftVerdict(
        verdict="insufficient_history",
        effect_pct=None,
        ci_low=None,
        ci_high=None,
        z=None,
        p_value=None,
        decided_by="insufficient_history",
        baseline=None,
        parameters=parameters,
        history_points=history_points,
    )

"""The drift verdict for the current session of one model+metric: regression, improvement or not.

A verdict needs three things in the same direction: statistical evidence at the current point
(CUSUM, then EWMA, then a robust z), an effect at least `min_effect_pct` large (a real but tiny
change is not worth a page), and a bootstrap CI of that effect that excludes 0. Whichever test
settled the outcome is named in `decided_by`, and every parameter is kept with the verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from aaco_pipelines.governance.baseline import robust_baseline, standardize
from aaco_pipelines.governance.detectors import CusumParams, EwmaParams, cusum, ewma

BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000  # bounds the resample-index matrix to ~32 MB at a time


@dataclass(frozen=True)
class DriftVerdict:
    verdict: str  # "regression" | "improvement" | "no_change" | "insufficient_history"
    effect_pct: float | None  # (current - baseline median) / baseline median * 100, as measured
    ci_low: float | None  # bootstrap CI of effect_pct
    ci_high: float | None
    z: float | None  # the current point, standardized by the baseline
    decided_by: str  # cusum | ewma | z_threshold | below_min_effect | ci_includes_zero | ...
    baseline: dict | None  # RobustBaseline.to_dict()
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
    then held fixed in the bootstrap.
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
    baseline = robust_baseline(history, policy.floor_fraction)
    if baseline.median == 0.0:
        raise ValueError("baseline median is 0: a percentage effect is undefined for this metric")
    z = standardize(np.append(history, current), baseline)
    effect = (current - baseline.median) / baseline.median * 100.0
    ci_low, ci_high = _bootstrap_effect_ci(history, current, current_samples, policy)
    direction = int(np.sign(z[-1]))  # +1 above the baseline, -1 below
    evidence = _evidence(z, direction, policy)
    outcome, decided_by = _decide(evidence, effect, ci_low, ci_high, direction, policy)
    if outcome == "change":
        worse = direction == (1 if higher_is_worse else -1)
        outcome = "regression" if worse else "improvement"
    return DriftVerdict(
        verdict=outcome,
        effect_pct=float(effect),
        ci_low=ci_low,
        ci_high=ci_high,
        z=float(z[-1]),
        decided_by=decided_by,
        baseline=baseline.to_dict(),
        parameters=parameters,
        history_points=int(history.size),
    )


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
        decided_by="insufficient_history",
        baseline=None,
        parameters=parameters,
        history_points=history_points,
    )

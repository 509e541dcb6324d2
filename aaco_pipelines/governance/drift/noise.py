"""Series shape: is a history too noisy, or bimodal, for a drift verdict to mean anything?

A bimodal series (a host that runs a model in one of two states, a cache that is warm on some
nights) flips between "regression" and "improvement" whenever the minority mode shows up; a very
noisy one hides any effect of practical size. Both are reported as `unstable_series` instead.

Bimodal: the best split of the values into two modes (1-D 2-means: a threshold on the sorted
values, each mode at least `min_mode_fraction` of the points) is well separated (a robust
Ashman's D: the gap between the modes' medians over their IQR spreads), by at least the minimum
practical effect, with spreads within `max_spread_ratio` of each other (scattered shared-host
outliers make one wide "mode"), AND the modes interleave in time: even the best
piecewise-constant labelling with up to two change points (one step, or a step and its fix)
mislabels at least `min_interleaved` of the points that clearly belong to a mode (within 2
spreads of its median: a shared-host outlier or a point between the modes does not count). A
level shift is contiguous segments, which that labelling explains, so a step is not bimodal.

Too noisy: the robust session-to-session noise, from the median absolute successive difference
(a step adds one large difference, so a level shift does not count as noise), is above
`max_noise_cv` of the median. A bimodal series is noisy by that measure too, so it is named
bimodal when the noise within each mode is below the limit.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from aaco_pipelines.governance.drift.robust_scale import EPSILON, MAD_TO_SD

IQR_TO_SD = 1.349  # the IQR of a normal distribution in standard deviations
SQRT2 = float(np.sqrt(2.0))
CORE_SD = 2.0  # a point farther from its mode's median is an outlier or in between modes


@dataclass(frozen=True)
class ShapeParams:
    min_points: int = 10  # shorter histories are not judged for shape
    min_mode_fraction: float = 0.2  # a rarer "mode" is outliers, which confirmation handles
    min_separation: float = 5.0  # D of a forced split of one normal sample: 99th pct 4-5
    min_interleaved: int = 3  # mode points no level shift (<= 2 change points) explains
    max_spread_ratio: float = 5.0  # a "mode" 5x wider than the other is scattered outliers
    max_noise_cv: float = 0.10  # at 10% noise a 3% effect is 0.3 sd: no verdict can see it

    def __post_init__(self) -> None:
        if self.min_points < 6:
            raise ValueError("shape needs min_points >= 6: two modes of at least 3 points")
        if not 0.0 < self.min_mode_fraction <= 0.5:
            raise ValueError("min_mode_fraction must be in (0, 0.5]")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SeriesShape:
    unstable: str | None  # "bimodal" | "too_noisy" | None
    points: int
    noise_cv: float | None = None  # robust sd of session-to-session noise / |median|
    mode_noise_cv: float | None = None  # the same, between consecutive points of one mode
    ashman_d: float | None = None  # separation of the two best modes
    spread_ratio: float | None = None  # the wider mode's spread over the narrower's
    modes: list[float] | None = None  # low and high mode medians
    mode_fraction: float | None = None  # share of the points in the smaller mode
    mode_gap_pct: float | None = None  # (high - low) / |median| * 100
    interleaved: int | None = None  # points the best <= 2-change-point labelling gets wrong
    mode_switches: int | None = None  # consecutive points in different modes (a step: 1)

    def to_dict(self) -> dict:
        return asdict(self)


def series_shape(
    values: np.ndarray,
    params: ShapeParams = ShapeParams(),
    min_gap_pct: float = 3.0,
    floor_fraction: float = 0.01,
) -> SeriesShape:
    """The shape of `values` (time order), and whether it is bimodal or too noisy to judge.

    `min_gap_pct` is the smallest mode gap that matters (the verdict's minimum effect);
    `floor_fraction` of the median floors each mode's spread, so exact modes give a finite D.
    """
    x = np.asarray(values, dtype=float).ravel()
    if x.size < params.min_points:
        return SeriesShape(None, int(x.size))
    median = abs(float(np.median(x))) or EPSILON
    modes = _two_modes(x, params, floor_fraction * median)
    upper = modes.upper[modes.core]  # in time order, outliers and in-between points left out
    same_mode = upper[1:] == upper[:-1]
    noise_cv = _diff_noise(np.diff(x)) / median
    mode_noise_cv = _diff_noise(np.diff(x[modes.core])[same_mode]) / median
    gap_pct = (modes.high - modes.low) / median * 100.0
    interleaved = _interleaved(upper)
    bimodal = (
        modes.d >= params.min_separation
        and modes.spread_ratio <= params.max_spread_ratio
        and gap_pct >= min_gap_pct
        and interleaved >= params.min_interleaved
        and mode_noise_cv <= params.max_noise_cv
    )
    unstable = "bimodal" if bimodal else "too_noisy" if noise_cv > params.max_noise_cv else None
    return SeriesShape(
        unstable, int(x.size), noise_cv, mode_noise_cv, modes.d, modes.spread_ratio,
        [modes.low, modes.high], modes.fraction, gap_pct, interleaved,
        int(np.count_nonzero(~same_mode)),
    )  # fmt: skip


def _diff_noise(diffs: np.ndarray) -> float:
    """Robust sd of one point from successive differences: 1.4826 * median|diff| / sqrt(2)."""
    return MAD_TO_SD * float(np.median(np.abs(diffs))) / SQRT2 if diffs.size else 0.0


class _Modes(NamedTuple):
    low: float  # median of the low mode
    high: float
    d: float  # (high - low) / the modes' IQR spreads pooled by size (Ashman's D, robust)
    spread_ratio: float  # the wider mode's spread over the narrower's
    fraction: float  # share of the points in the smaller mode
    upper: np.ndarray  # per point (time order): in the high mode
    core: np.ndarray  # per point: within CORE_SD spreads of its own mode's median


def _two_modes(x: np.ndarray, params: ShapeParams, spread_floor: float) -> _Modes:
    """1-D 2-means over every admissible threshold on the sorted values, then robust mode
    statistics: medians and IQR spreads, so a stray outlier neither hides a clean mode nor
    counts as one of its points."""
    s = np.sort(x)
    n = s.size
    m = max(3, int(np.ceil(params.min_mode_fraction * n)))
    k = np.arange(m, n - m + 1)  # points in the low mode
    centred = s - s[n // 2]  # the variances below subtract squares: keep them small
    c1, c2 = np.cumsum(centred), np.cumsum(centred * centred)
    lo_mean, hi_mean = c1[k - 1] / k, (c1[-1] - c1[k - 1]) / (n - k)
    lo_var = np.maximum(c2[k - 1] / k - lo_mean**2, 0.0)
    hi_var = np.maximum((c2[-1] - c2[k - 1]) / (n - k) - hi_mean**2, 0.0)
    kb = int(k[np.argmin(k * lo_var + (n - k) * hi_var)])
    lo_q, hi_q = _sorted_quantiles(s[:kb]), _sorted_quantiles(s[kb:])  # q1, median, q3
    low, high = float(lo_q[1]), float(hi_q[1])
    lo_sd = max((lo_q[2] - lo_q[0]) / IQR_TO_SD, spread_floor)  # ignores a stray outlier, not a
    hi_sd = max((hi_q[2] - hi_q[0]) / IQR_TO_SD, spread_floor)  # mode that is really two levels
    upper = x > (s[kb - 1] + s[kb]) / 2.0
    core = np.abs(x - np.where(upper, high, low)) <= CORE_SD * np.where(upper, hi_sd, lo_sd)
    pooled = np.sqrt((kb * lo_sd**2 + (n - kb) * hi_sd**2) / n)
    ratio = max(lo_sd, hi_sd) / min(lo_sd, hi_sd)
    return _Modes(low, high, float((high - low) / pooled), ratio, min(kb, n - kb) / n, upper, core)


def _sorted_quantiles(s: np.ndarray, q: tuple = (0.25, 0.5, 0.75)) -> np.ndarray:
    """np.quantile's default (linear) on already sorted values, without sorting again."""
    pos = np.asarray(q) * (s.size - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, s.size - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _interleaved(upper: np.ndarray) -> int:
    """Fewest points mislabelled by a piecewise-constant mode labelling with at most two change
    points (three segments, each labelled by its majority), over all pairs of change points."""
    n = upper.size
    if n < 3:
        return 0
    c = np.concatenate([[0], np.cumsum(upper)])

    def wrong(i: np.ndarray, j: np.ndarray) -> np.ndarray:  # minority count in upper[i:j]
        ones = c[j] - c[i]
        return np.minimum(ones, (j - i) - ones)

    a, b = _change_point_pairs(n)
    return int(np.min(wrong(np.zeros_like(a), a) + wrong(a, b) + wrong(b, np.full_like(b, n))))


@functools.lru_cache(maxsize=64)
def _change_point_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair 0 < a < b < n: segments [0, a), [a, b), [b, n)."""
    a, b = np.triu_indices(n - 1, k=1)
    return a + 1, b + 1

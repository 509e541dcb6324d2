"""Change points over a series' whole history: where did its level or its distribution change?

The drift verdict judges only the newest session; this looks back over every session and splits
the history into regimes, so a report can say "p50 went up 5% at session 92" after the fact.

E-divisive means (Matteson & James 2014), the method behind MongoDB's and Apache Otava's
performance-regression detection: bisect hierarchically at the split that maximises the energy
divergence (exponent 1) between the two sides, and keep a split only if a permutation test finds
the divergence significant. Energy distance sees changes of spread as well as of level and
assumes no distribution. `method="pelt"` is the parametric alternative: an exact penalised
segmentation built for shifts of the mean in independent normal noise.

A single outlier is not a change: every regime has at least `min_size` points, and every split
must also pass a rank test on its two sides (see `_confirmed`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

METHODS = ("e_divisive", "pelt")
MAD_TO_SD = 1.4826  # MAD of a normal distribution times this is its standard deviation
SPREAD_RATIO = 1.5  # a change of spread must also widen the MAD this much (see _confirmed)
BLOCK_ELEMENTS = 4_000_000  # pairwise distances held at once (32 MB): memory stays O(n)


@dataclass(frozen=True)
class ChangePointParams:
    method: str = "e_divisive"
    alpha: float = 0.05  # level of the permutation test and of the rank check
    min_size: int = 5  # fewest points in a regime
    permutations: int = 199
    seed: int = 0
    min_shift_pct: float = 0.0  # optional floor on |level shift| (Otava's min_magnitude)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.min_size < 2:
            raise ValueError(
                f"min_size must be >= 2 (a regime needs a spread), got {self.min_size}"
            )
        if self.permutations < 1:
            raise ValueError(f"permutations must be >= 1, got {self.permutations}")
        if self.min_shift_pct < 0.0:
            raise ValueError(f"min_shift_pct must be >= 0, got {self.min_shift_pct}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first index of the new regime, 0-based
    before_median: float  # median of the regime that ends here
    after_median: float  # median of the regime that starts here
    shift_pct: float  # 100 * (after - before) / |before|
    shift_sd: float  # (after - before) in robust sd (pooled MAD) of the two regimes
    p_value: float  # permutation test of the energy divergence at this split
    confidence: float  # 1 - p_value

    def to_dict(self) -> dict:
        return asdict(self)


def detect_change_points(
    values,
    *,
    method: str = "e_divisive",
    alpha: float = 0.05,
    min_size: int = 5,
    permutations: int = 199,
    seed: int = 0,
    min_shift_pct: float = 0.0,
) -> list[ChangePoint]:
    """Change points of `values` (oldest first), in index order.

    Every reported change passed the permutation test at level `alpha` (p = (1 + #permuted
    statistics >= observed) / (permutations + 1), so 199 permutations resolve p down to 0.005)
    and the rank check (and, if set, moved the median by at least `min_shift_pct` percent).
    Deterministic for a given `seed`. Time is O(permutations * n^2) per level of splitting: a
    365-point series takes a fraction of a second, 2000 points a few seconds; memory is bounded
    by BLOCK_ELEMENTS, not n^2. `ChangePointParams(...).to_dict()` records the settings.
    """
    params = ChangePointParams(method, alpha, min_size, permutations, seed, min_shift_pct)
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("change-point detection needs finite values (got NaN or inf)")
    if x.size < 2 * min_size:
        return []
    splits = _pelt_splits(x, params) if method == "pelt" else _e_divisive_splits(x, params)
    return _describe(x, splits)


# --- the energy statistic -------------------------------------------------------------------


def q_statistics(samples: np.ndarray, min_size: int) -> np.ndarray:
    """Scaled energy divergence q(t) of every split t in [min_size, m - min_size] of each row.

    q(t) = t(m-t)/m * (2/(t(m-t)) * B - W_left / C(t,2) - W_right / C(m-t,2)), with B the sum of
    |x_i - x_j| across the split and W the sums within each side. All splits come from two
    prefix sums of the pairwise-distance rows, so a whole batch of permutations is one
    vectorized pass; distances are built in row blocks to bound memory. Shape (k, m-2*min_size+1).
    """
    y = np.atleast_2d(samples)
    k, m = y.shape
    row_total, row_lower = _total_distances(y), _earlier_distances(y)
    lower = np.concatenate([np.zeros((k, 1)), np.cumsum(row_lower, axis=1)], axis=1)
    total = np.concatenate([np.zeros((k, 1)), np.cumsum(row_total, axis=1)], axis=1)
    t = np.arange(min_size, m - min_size + 1)
    a, b = t.astype(float), (m - t).astype(float)
    within_left = lower[:, t]  # sum of |x_i - x_j| over i < j < t
    between = total[:, t] - 2.0 * within_left
    within_right = lower[:, m, None] - within_left - between
    divergence = (
        2.0 * between / (a * b)
        - within_left / (a * (a - 1.0) / 2.0)
        - within_right / (b * (b - 1.0) / 2.0)
    )
    return a * b / m * divergence


def _total_distances(y: np.ndarray) -> np.ndarray:
    """sum_j |y_i - y_j| from sorted prefix sums: O(m log m), no distance matrix."""
    k, m = y.shape
    order = np.argsort(y, axis=1)
    s = np.take_along_axis(y, order, axis=1)
    prefix = np.concatenate([np.zeros((k, 1)), np.cumsum(s, axis=1)], axis=1)
    r = np.arange(m)
    below = s * r - prefix[:, :-1]  # s_r minus each smaller value
    above = prefix[:, -1:] - prefix[:, 1:] - s * (m - r - 1)  # each larger value minus s_r
    totals = np.empty_like(y)
    np.put_along_axis(totals, order, below + above, axis=1)
    return totals


def _earlier_distances(y: np.ndarray) -> np.ndarray:
    """sum_{j<i} |y_i - y_j|: the order-dependent part, from lower-triangle blocks of distances."""
    k, m = y.shape
    lower = np.empty((k, m))
    step = max(1, BLOCK_ELEMENTS // (k * m))
    for start in range(0, m, step):
        end = min(m, start + step)
        rows = np.arange(start, end)
        distances = np.subtract(y[:, start:end, None], y[:, None, :end])
        np.abs(distances, out=distances)
        earlier = (np.arange(end) < rows[:, None]).astype(float)
        lower[:, start:end] = np.einsum("kij,ij->ki", distances, earlier)
    return lower


def _permutation_maxima(segment: np.ndarray, min_size: int, permutations: int, rng) -> np.ndarray:
    """max_t q(t) of each of `permutations` shuffles of the segment: its null distribution."""
    shuffled = rng.permuted(np.broadcast_to(segment, (permutations, segment.size)), axis=1)
    return q_statistics(shuffled, min_size).max(axis=1)


# --- E-divisive: hierarchical bisection -------------------------------------------------------


@dataclass
class _Segment:
    """A regime under consideration: its split statistics and permutation null, computed once."""

    start: int
    end: int
    q: np.ndarray  # q of split start + min_size + i
    null: np.ndarray  # permutation maxima of max q
    banned: set[int] = field(default_factory=set)  # splits that failed the rank check

    def best(self, min_size: int) -> tuple[float, int] | None:
        q = self.q.copy()
        q[[i - self.start - min_size for i in self.banned]] = -np.inf
        if q.size == 0 or not np.isfinite(q.max()):
            return None
        i = int(np.argmax(q))
        return float(q[i]), self.start + min_size + i


def _segment(x: np.ndarray, start: int, end: int, params: ChangePointParams) -> _Segment | None:
    if end - start < 2 * params.min_size:
        return None
    part = x[start:end]
    rng = np.random.default_rng([params.seed, start, end])  # whatever order the splits came in
    return _Segment(
        start=start,
        end=end,
        q=q_statistics(part, params.min_size)[0],
        null=_permutation_maxima(part, params.min_size, params.permutations, rng),
    )


def _p_value(null: np.ndarray, q: float) -> float:
    return float((1 + np.count_nonzero(null >= q)) / (null.size + 1))


def _e_divisive_splits(x: np.ndarray, params: ChangePointParams) -> dict[int, float]:
    """Split index -> p-value, bisecting until the best remaining split is not significant.

    As in Matteson & James, the test of each new split permutes within every current regime
    at once and compares the observed maximum of q over all regimes with the permuted maxima.
    A split that fails the rank check is set aside and the next best one is tested. Like
    MongoDB's and Otava's implementations, each split compares a regime's two ends (the
    paper also searches an inner end point, several times slower here): a short excursion in
    the middle of a long regime is not isolated; PELT finds those.
    """
    segments = [s for s in [_segment(x, 0, x.size, params)] if s]
    splits: dict[int, float] = {}
    while segments:
        candidates = [(c, s) for s in segments if (c := s.best(params.min_size)) is not None]
        if not candidates:
            break
        (q, split), seg = max(candidates, key=lambda cs: cs[0][0])
        p = _p_value(np.max([s.null for s in segments], axis=0), q)
        if p > params.alpha:
            break
        if not _confirmed(x[seg.start : split], x[split : seg.end], params):
            seg.banned.add(split)
            continue
        splits[split] = p
        segments.remove(seg)
        children = (_segment(x, a, b, params) for a, b in ((seg.start, split), (split, seg.end)))
        segments.extend(c for c in children if c is not None)
    return splits


# --- the outlier rule -----------------------------------------------------------------------


def _confirmed(before: np.ndarray, after: np.ndarray, params: ChangePointParams) -> bool:
    """The two sides of a split differ by rank: location (Mann-Whitney) or spread (Fligner).

    Each test runs at alpha/2 (Bonferroni). Ranks give a lone outlier the weight of one point,
    so a split that the energy statistic places next to an outlier fails here, while a real
    shift of level or of spread of min_size or more points passes. With `min_shift_pct` set,
    the medians must also differ by that much (a spread-only change then never passes).
    """
    from scipy.stats import fligner, mannwhitneyu  # scipy.stats takes 1.5 s to import

    if np.ptp(np.concatenate([before, after])) == 0.0:
        return False
    m0, m1 = np.median(before), np.median(after)
    if abs(m1 - m0) < params.min_shift_pct / 100.0 * abs(m0):
        return False
    level = params.alpha / 2.0
    if mannwhitneyu(before, after, alternative="two-sided").pvalue <= level:
        return True
    mads = np.array([np.median(np.abs(before - m0)), np.median(np.abs(after - m1))])
    wider = mads.max() >= SPREAD_RATIO * mads.min() and mads.max() > 0.0
    return bool(wider and fligner(before, after).pvalue <= level)


# --- PELT: penalised normal mean-shift segmentation --------------------------------------------


def _pelt_splits(x: np.ndarray, params: ChangePointParams) -> dict[int, float]:
    """PELT (Killick et al. 2012) changes that survive the same checks as E-divisive splits.

    Cost of a segment: its squared deviations from its mean over sigma^2, with sigma from the
    MAD of first differences (robust to the shifts themselves). Penalty per change: 3 ln n, the
    per-change term of the modified BIC (Zhang & Siegmund 2007) that R's changepoint uses by
    default. Each change is then tested on its two neighbouring regimes: permutation test of
    q (null: max of q over that window) and the rank check. The weakest failing change is
    dropped and its neighbours re-tested on their merged regime, until all pass.
    """
    diffs = np.diff(x)
    sigma = MAD_TO_SD * np.median(np.abs(diffs - np.median(diffs))) / np.sqrt(2.0)
    z = (x - np.median(x)) / max(sigma, 1e-12 * max(1.0, abs(float(np.median(x)))))
    changes = _pelt(z, 3.0 * np.log(x.size), params.min_size)
    tested: dict[tuple[int, int, int], tuple[float, bool]] = {}
    while True:
        bounds = [0, *changes, x.size]
        windows = list(zip(bounds, bounds[1:], bounds[2:], strict=False))
        for w in windows:
            if w not in tested:
                tested[w] = _window_test(x, *w, params)
        failing = [(tested[w][0], w[1]) for w in windows if not tested[w][1]]
        if not failing:
            return {w[1]: tested[w][0] for w in windows}
        changes.remove(max(failing)[1])


def _window_test(
    x: np.ndarray, prev: int, split: int, nxt: int, params: ChangePointParams
) -> tuple[float, bool]:
    """(p, passed) for a change at `split` between the regimes [prev, split) and [split, nxt)."""
    window = _segment(x, prev, nxt, params)
    p = _p_value(window.null, window.q[split - prev - params.min_size])
    return p, p <= params.alpha and _confirmed(x[prev:split], x[split:nxt], params)


def _pelt(z: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """Optimal partition of z under sum of squared deviations + penalty per change.

    The recursion over end points is sequential; each step is vectorized over the surviving
    candidate starts. A start that loses at t can still win for ends before t + min_size (the
    segment from t would be too short), so it is dropped only then: the pruning stays exact.
    """
    n = z.size
    s1 = np.concatenate([[0.0], np.cumsum(z)])
    s2 = np.concatenate([[0.0], np.cumsum(z * z)])
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    last = np.zeros(n + 1, dtype=int)
    starts = np.empty(0, dtype=int)
    pruned: dict[int, np.ndarray] = {}  # end point -> starts to drop there
    for t in range(min_size, n + 1):
        if t in pruned:
            starts = np.setdiff1d(starts, pruned.pop(t), assume_unique=True)
        if np.isfinite(best[t - min_size]):
            starts = np.append(starts, t - min_size)
        cost = s2[t] - s2[starts] - (s1[t] - s1[starts]) ** 2 / (t - starts)
        total = best[starts] + cost
        i = int(np.argmin(total))
        best[t], last[t] = total[i] + penalty, starts[i]
        pruned[t + min_size] = starts[total > best[t]]
    changes, t = [], n
    while t > 0:
        t = int(last[t])
        changes.append(t)
    return sorted(changes)[1:]


# --- describing the regimes -------------------------------------------------------------------


def _describe(x: np.ndarray, splits: dict[int, float]) -> list[ChangePoint]:
    """Medians and shifts between each pair of neighbouring final regimes."""
    order = sorted(splits)
    bounds = [0, *order, x.size]
    points = []
    for prev, split, nxt in zip(bounds, bounds[1:], bounds[2:], strict=False):
        before, after = x[prev:split], x[split:nxt]
        m0, m1 = float(np.median(before)), float(np.median(after))
        spread = np.concatenate([before - m0, after - m1])
        sd = MAD_TO_SD * float(np.median(np.abs(spread)))
        p = splits[split]
        points.append(
            ChangePoint(
                index=split,
                before_median=m0,
                after_median=m1,
                shift_pct=_ratio(100.0 * (m1 - m0), abs(m0)),
                shift_sd=_ratio(m1 - m0, sd),
                p_value=p,
                confidence=1.0 - p,
            )
        )
    return points


def _ratio(num: float, den: float) -> float:
    if den > 0.0:
        return num / den
    return 0.0 if num == 0.0 else float(np.copysign(np.inf, num))


def change_points_of(values) -> list[tuple[int, ChangePoint]]:
    """Change points over a whole drift series, each with its position in `values`: sessions
    that lack the metric (None or NaN) are skipped, not treated as a level."""
    y = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    index = np.flatnonzero(np.isfinite(y))
    if index.size == 0:
        return []
    return [(int(index[p.index]), p) for p in detect_change_points(y[index])]

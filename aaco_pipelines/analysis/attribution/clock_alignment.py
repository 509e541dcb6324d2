"""Clock alignment: the offset from a GPU profiler's host clock to ONNX Runtime's profile clock.

rocprofv3 stamps the HIP API calls that launch kernels on its own host clock; ONNX Runtime's
profile stamps its node windows on another. The offset is estimated, not assumed: the one that
puts the most launch calls inside node windows (`estimate_clock_offset`), searched coarse to
fine with numpy over sorted arrays (searchsorted), no per-launch Python. The GPU kernel
attribution (`gpu_kernels`) moves each launch onto the profile's clock by it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClockAlignment:
    """Add `offset_ns` to profiler host times to get ONNX Runtime profile times."""

    offset_ns: int
    method: str
    matched_fraction: float  # of launch calls inside some node window at that offset
    residual_ns: float  # median distance of the launches outside every window to the nearest


_SAMPLE = 4096  # launches scored per candidate offset (fewer where a level's work would pass _WORK)
_FINE_NS = 100  # the last level's step
_SHRINK = 8  # step ratio between levels
_KEEP = 0.01  # a level keeps the offsets scoring within 1% of its best
# ...or within this many launches: at coarse steps windows are widened by half the step, and a
# few stray launches (from outside the profiled runs) can lift a wrong offset that much.
_KEEP_LAUNCHES = 3
_BUDGET = 32_768  # candidate offsets a level aims at: a wide kept range takes a coarser step
# Every kept offset is searched at the next level, though, up to this many: while the step is
# coarser than the gaps between windows, the widened windows cover a long trace almost whole and
# about 1% of it either side of the true offset scores within 1% of the best, more than the budget
# holds at half the step. Cutting that range to the budget cut the true offset away (simulated
# 10M-kernel traces aligned 0.4 s off, 2 runs in 16). Past this many (a trace whose windows leave
# no gaps to align on), a level takes its best-scoring runs first.
_MAX_CANDIDATES = 16 * _BUDGET
_WORK = 20_000_000  # launch tests per level: a bigger level scores a thinner sample...
_MIN_SAMPLE = 512  # ...but of at least this many launches (1% of them is 5)
_PAIRS = 2_000_000  # (launch, interval) pairs laid onto the offsets at a time
_LATTICE_TABLE = 1 << 22  # most lattice points tabled to find an offset by arithmetic
_LONG_WINDOW = 4  # windows over 4x the median length are not scored
# ONNX Runtime's profile has microsecond timestamps, so a window's edges are known to about
# 1 µs: a launch that close outside still counts. Without this slack, short regular windows
# let an offset one node off fit a few launches better than the true one.
_EDGE_NS = 1_000


def estimate_clock_offset(
    launch_starts_ns: np.ndarray,
    node_starts_ns: np.ndarray,
    node_ends_ns: np.ndarray,
    search: tuple[int, int] | None = None,
) -> ClockAlignment:
    """The offset putting the most launch calls inside node windows, searched coarse to fine.

    The first grid spans every offset at which the two traces overlap at all, from the
    differences of the first and last launch and window times; each candidate offset is scored
    by how many of a sample of launches then fall inside a window, with windows widened by half
    the grid step so that the grid cannot step over the best offset, and by the 1 µs the
    profile's timestamps are uncertain. Each next level searches, up to 8x finer, around every
    offset within 1% of the best (never a part of them only: a trace's true offset can lie
    anywhere in that range), down to 100 ns; the answer is the middle of the best plateau, which
    makes it robust to jitter and to launches outside every window. Windows over 4x the median
    length are not scored: a stall or a synchronizing node would take launches at almost any
    offset. See `_scores` for how a level's launches are counted.

    `search` (low, high) narrows the offsets searched. Pass it when the launches cover much
    more than the profile (rocprofv3 tracing unprofiled runs too): runs of the same model look
    alike, and with tiny dense windows a wrong run can then score as well as the right one.
    """
    launches = np.sort(np.asarray(launch_starts_ns, dtype=np.int64))
    node_starts = np.asarray(node_starts_ns, dtype=np.int64)
    node_ends = np.asarray(node_ends_ns, dtype=np.int64)
    if len(launches) == 0 or len(node_starts) == 0:
        return ClockAlignment(0, "none", 0.0, 0.0)
    starts, ends = _union(node_starts, node_ends)
    length = node_ends - node_starts
    short = length <= _LONG_WINDOW * max(float(np.median(length)), 1.0)
    scored = _union(node_starts[short], node_ends[short])
    sample = launches[np.unique(np.linspace(0, len(launches) - 1, _SAMPLE).astype(np.int64))]
    lo, hi = search or (int(starts[0] - launches[-1]), int(ends[-1] - launches[0]))
    step = max((hi - lo) // _BUDGET, _FINE_NS)
    offset = _refine(sample, [(lo, hi, 0)], step, scored)
    inside, distance = _miss_distance(launches + offset, starts, ends)
    return ClockAlignment(
        offset_ns=offset,
        method="containment_search",
        matched_fraction=float(inside.mean()),
        residual_ns=float(np.median(distance[~inside])) if not inside.all() else 0.0,
    )


def _refine(sample, runs, step, scored) -> int:
    """Coarse to fine over the runs: each level keeps the offsets within 1% of its best and
    searches around all of them up to 8x finer (coarser when the kept range is too wide for the
    budget, but at least 2x finer), down to 100 ns; then the middle of the best plateau."""
    while True:
        offsets = _grid(runs, step)
        widened = _widen(*scored, step // 2 + _EDGE_NS)
        scores, counted = _scores(sample, offsets, step, *widened)
        if step == _FINE_NS:
            return _plateau_centre(offsets, scores)
        keep = scores >= scores.max() - max(_KEEP * counted, _KEEP_LAUNCHES)
        runs = _runs(offsets, scores, keep, step)
        width = sum(hi - lo for lo, hi, _ in runs)
        step = max(min(max(step // _SHRINK, -(-width // _BUDGET)), step // 2), _FINE_NS)


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint intervals covering the same time as the given (possibly overlapping) ones."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order].astype(np.int64), ends[order].astype(np.int64)
    if len(starts) == 0:
        return starts, ends
    reach = np.maximum.accumulate(ends)
    firsts = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    lasts = np.r_[firsts[1:] - 1, len(starts) - 1]
    return starts[firsts], reach[lasts]


def _widen(starts: np.ndarray, ends: np.ndarray, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint intervals, each widened by `reach` either side, those that then meet merged
    (`_union` of the widened intervals, without sorting again)."""
    firsts = np.flatnonzero(np.r_[True, starts[1:] - ends[:-1] > 2 * reach])
    lasts = np.r_[firsts[1:] - 1, len(starts) - 1]
    return starts[firsts] - reach, ends[lasts] + reach


def _scores(sample, offsets, step, starts, ends) -> tuple[np.ndarray, int]:
    """Launches of the (sorted) sample inside the disjoint sorted intervals, per candidate
    offset (sorted, on a lattice `step` apart from the first), and how many launches were scored.

    The cheaper of two ways: each launch looked up among the intervals at each offset, or, when a
    launch meets fewer intervals over the offsets' span than twice the offsets (at coarse steps
    the widened windows merge into few intervals), each such interval laid onto the offsets at
    which it holds the launch. Where that would take more than _WORK tests (a lookup, or an
    interval laid) the sample is thinned, to no fewer than _MIN_SAMPLE launches.
    """
    first = np.searchsorted(ends, sample + offsets[0], side="left")
    met = np.searchsorted(starts, sample + offsets[-1], side="right") - first
    per_launch = max(float(met.mean()), 1.0)
    # Laying an interval takes about 30 ns; a lookup among the intervals 40 ns, or 80-200 ns
    # among the millions of a 10M-kernel trace's windows.
    by_interval = per_launch < 2 * len(offsets)
    wanted = _WORK // (per_launch if by_interval else len(offsets))
    stride = -(-len(sample) // min(len(sample), max(int(wanted), _MIN_SAMPLE)))
    sample, first, met = sample[::stride], first[::stride], met[::stride]
    if by_interval:
        scores = _scores_by_interval(sample, offsets, step, starts, ends, first, met)
        return scores, len(sample)
    rows = max(1, 4_000_000 // len(sample))
    scores = np.empty(len(offsets), dtype=np.int64)
    for i in range(0, len(offsets), rows):
        points = sample[None, :] + offsets[i : i + rows, None]
        index = np.searchsorted(starts, points, side="right") - 1
        inside = (index >= 0) & (points <= ends[np.maximum(index, 0)])
        scores[i : i + rows] = inside.sum(axis=1)
    return scores, len(sample)


def _scores_by_interval(sample, offsets, step, starts, ends, first, met) -> np.ndarray:
    """As `_scores`, from each launch's intervals `first[i]` .. `first[i] + met[i]`: interval
    [s, e] holds launch t at the offsets in [s - t, e - t], a run of the sorted offsets, so each
    (launch, interval) pair adds one over a run of offsets (a difference array, then a cumsum).
    The intervals are disjoint, so no offset counts a launch twice. The runs' ends are found by
    arithmetic on the lattice (through a table of the offsets below each lattice point where the
    offsets leave gaps), by binary search only when that table would be too big."""
    origin = int(offsets[0])
    lattice = (offsets - origin) // step
    span = int(lattice[-1]) + 2  # lattice points 0 .. one past the last offset
    gaps = span - 1 > len(offsets)  # the offsets skip lattice points (several runs)
    table = np.searchsorted(lattice, np.arange(span)) if gaps and span <= _LATTICE_TABLE else None

    def below(times: np.ndarray, side: str) -> np.ndarray:
        """How many offsets are below `times` (left), or not above them (right)."""
        if gaps and table is None:
            return np.searchsorted(offsets, times, side=side)
        k = -((origin - times) // step) if side == "left" else (times - origin) // step + 1
        k = np.clip(k, 0, span - 1)  # lattice point of the first offset not counted
        return table[k] if gaps else k

    diff = np.zeros(len(offsets) + 1, dtype=np.int64)
    total = np.cumsum(met)
    i = 0
    while i < len(sample):
        done = int(total[i - 1]) if i else 0
        j = max(int(np.searchsorted(total, done + _PAIRS, side="right")), i + 1)
        count = met[i:j]
        launch = np.repeat(sample[i:j], count)
        interval = np.repeat(first[i:j] - (np.cumsum(count) - count), count)
        interval += np.arange(len(interval))
        lo = below(starts[interval] - launch, "left")
        hi = below(ends[interval] - launch, "right")
        diff += np.bincount(lo, minlength=len(diff))
        diff -= np.bincount(hi, minlength=len(diff))
        i = j
    return np.cumsum(diff[:-1])


def _grid(runs: list[tuple[int, int, int]], step: int, limit: int = _MAX_CANDIDATES) -> np.ndarray:
    """Candidate offsets over all the runs, on one lattice `step` apart; past `limit` candidates
    (a last resort), over the best-scoring runs first."""
    origin = min(lo for lo, _, _ in runs)
    pieces, total = [], 0
    for lo, hi, _ in sorted(runs, key=lambda run: -run[2]):
        first = (lo - origin) // step
        count = min((hi - origin) // step - first + 1, limit - total)
        pieces.append(first + np.arange(count, dtype=np.int64))
        total += count
        if total >= limit:
            break
    return origin + step * np.unique(np.concatenate(pieces))


def _runs(offsets, scores, keep, step) -> list[tuple[int, int, int]]:
    """Maximal runs of kept neighbouring offsets, widened by one step: (low, high, best score)."""
    kept = np.flatnonzero(keep)
    breaks = np.flatnonzero(np.diff(offsets[kept]) > step)
    firsts, lasts = np.r_[0, breaks + 1], np.r_[breaks, len(kept) - 1]
    best = np.maximum.reduceat(scores[kept], firsts)
    return [
        (int(offsets[kept[f]] - step), int(offsets[kept[la]] + step), int(b))
        for f, la, b in zip(firsts, lasts, best, strict=True)
    ]


def _plateau_centre(offsets: np.ndarray, scores: np.ndarray) -> int:
    """Middle of the run of offsets around the best that score within one launch of it."""
    best = int(np.argmax(scores))
    good = scores >= scores[best] - 1
    contiguous = np.r_[True, np.diff(offsets) <= _FINE_NS]
    lo = best
    while lo > 0 and good[lo - 1] and contiguous[lo]:
        lo -= 1
    hi = best
    while hi + 1 < len(offsets) and good[hi + 1] and contiguous[hi + 1]:
        hi += 1
    return int((offsets[lo] + offsets[hi]) // 2)


def _miss_distance(points, starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Whether each point is inside the disjoint sorted intervals, and else how far outside."""
    index = np.searchsorted(starts, points, side="right") - 1
    before = np.where(index >= 0, points - ends[np.maximum(index, 0)], np.iinfo(np.int64).max)
    after_index = np.minimum(index + 1, len(starts) - 1)
    after = np.where(index + 1 < len(starts), starts[after_index] - points, np.iinfo(np.int64).max)
    inside = (index >= 0) & (before <= 0)
    return inside, np.where(inside, 0, np.minimum(before, after))

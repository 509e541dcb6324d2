"""How sure the ranking of ops is: a bootstrap over the profiled iterations.

The top op is the one with the largest median time per profiled iteration (op_breakdown's
order). Measured five minutes apart on a shared host, the same model named stem/conv (52 %) and
then block0/1/conv (45 %) as its top op: with ten iterations, two ops a few percent apart swap
places from run to run. So the profiled iterations are resampled with replacement RESAMPLES
times (numpy, all resamples at once, a fixed seed), each resample's medians ranked again, and

  p_top             an op's share of resamples in which it comes first
  p_top3            an op's share of resamples in which it is among the first three
  top_op_stability  p_top of the observed top op
  top3_stability    share of resamples whose first three are the observed three, as a set

Below STABLE the report and `aaco run` say the top op (or the top three) is uncertain instead of
naming one as if it were settled.

Some ops are tied for good: compute_bound's four identical MatMuls, resnet_cnn's convolutions
within 1-5 % of each other, llama_decoder's qk_matmul and rotate_half 11-14 % apart, whose order
swapped between quiet runs even where every resample of one run agreed (the bootstrap sees one
run's iterations, not the host's mood from run to run). So the ops within TIE of the top op's
median time (or one tick of the profiler's clock, 1 µs), or first in at least 1 - STABLE of
the resamples, are named with it as tied (tied_with_top): which of them comes first is the
run's luck, not the model's. With fewer than MIN_ITERATIONS profiled iterations nothing is
judged (None): a bootstrap of one or two iterations would call any ranking stable.

Nor does the bootstrap see the host from run to run: analysis/across_sessions holds the top
op against the same version's other sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RESAMPLES = 1000
MIN_ITERATIONS = 5
STABLE = 0.9
TIE = 0.15  # an op within 15 % of the top op's median time is tied with it
# ... or within one tick of the clock that timed it: ONNX Runtime's profiler reports whole
# microseconds, so a 4 µs and a 5 µs op (launch_bound's) may be 4.9 and 4.1
TICK_NS = 1_000.0
TOP = 3
CELLS_PER_CHUNK = 1 << 22  # resample x iteration x op cells held at once (32 MiB of float64)
LEVELS = {"node": "name", "op_type": "op_type"}  # op_breakdown level -> its per_node column


@dataclass(frozen=True)
class RankingStability:
    p_top: np.ndarray  # per op, in the order of the columns given
    p_top3: np.ndarray
    top_op_stability: float
    top3_stability: float


def ranking_stability(
    times: np.ndarray, resamples: int = RESAMPLES, seed: int = 0
) -> RankingStability | None:
    """The stability of the ranking of `times` (iterations x ops: each op's time in each
    iteration) by median, ties by mean; None below MIN_ITERATIONS iterations."""
    n, ops = times.shape
    if n < MIN_ITERATIONS or ops == 0:
        return None
    top = min(TOP, ops)
    order = np.lexsort((-times.mean(axis=0), -np.median(times, axis=0)))  # observed ranking
    ranked = order[_contenders(times[:, order], top)]  # still in observed order
    medians = resampled_medians(times[:, ranked], resamples, seed)
    firsts = np.argsort(-medians, axis=1, kind="stable")[:, :top]  # ties keep observed order
    p_top, p_top3 = np.zeros(ops), np.zeros(ops)
    p_top[ranked] = np.bincount(firsts[:, 0], minlength=len(ranked)) / resamples
    p_top3[ranked] = np.bincount(firsts.ravel(), minlength=len(ranked)) / resamples
    same_three = np.all(firsts < top, axis=1)  # the observed top three are ranked[:top]
    return RankingStability(p_top, p_top3, float(p_top[order[0]]), float(same_three.mean()))


def _contenders(times: np.ndarray, top: int) -> np.ndarray:
    """Which ops (columns) can reach the first `top` places in some resample: a resample's
    median lies between an op's fastest and slowest iteration, so an op slower in every
    iteration than `top` others are in every one of theirs never can. Keeps the resampled
    array small for a model of thousands of nodes."""
    floor = np.sort(times.min(axis=0))[-top]
    return np.flatnonzero(times.max(axis=0) >= floor)


def resampled_medians(times: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Each op's median over `resamples` resamples of the iterations (resamples x ops); also
    the structural diff's bootstrap of each node's time (analysis/structural_diff)."""
    n, ops = times.shape
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    step = max(1, CELLS_PER_CHUNK // max(n * ops, 1))
    return np.concatenate(
        [np.median(times[picks[i : i + step]], axis=1) for i in range(0, resamples, step)]
    )


def per_iteration_times(per_node: pa.Table, column: str) -> tuple[list[str], np.ndarray]:
    """The names in `column` of attribution's per-iteration table (name, op_type, iteration,
    ns; only where a name ran) and their time in every iteration that ran a kernel, 0 where a
    name did not run: iterations x names."""
    names = pc.dictionary_encode(per_node[column]).combine_chunks()
    iterations, row = np.unique(per_node["iteration"].to_numpy(), return_inverse=True)
    width = len(names.dictionary)
    cell = row * width + names.indices.to_numpy()
    times = np.bincount(cell, weights=per_node["ns"].to_numpy(), minlength=len(iterations) * width)
    return names.dictionary.to_pylist(), times.reshape(len(iterations), width)


def tied_with_top(nodes: list[dict]) -> list[dict]:
    """The ops tied with the top op, the first of `nodes` (ranked by median time, with p50_ns
    and p_top): within TIE of its median time or one TICK_NS, or first in at least 1 - STABLE
    of the resamples; in the order given."""
    if not nodes or not nodes[0].get("p50_ns"):
        return []
    top = nodes[0]["p50_ns"]
    floor = min((1.0 - TIE) * top, top - TICK_NS)
    return [
        node
        for node in nodes[1:]
        if (node.get("p50_ns") or 0.0) >= floor or (node.get("p_top") or 0.0) >= 1.0 - STABLE
    ]


RANKS = pa.schema(
    [("level", pa.string()), ("name", pa.string()), ("p_top", pa.float64()),
     ("p_top3", pa.float64())]
)  # fmt: skip


def session_ranking(per_node: pa.Table) -> tuple[pa.Table, RankingStability | None]:
    """Each node's and op type's p_top and p_top3 (RANKS rows, none when not judged) and the
    stability of the node ranking, from attribution's per-iteration table."""
    judged = {}
    for level, column in LEVELS.items():
        names, times = per_iteration_times(per_node, column)
        judged[level] = (names, ranking_stability(times) if names else None)
    parts = [
        pa.Table.from_pydict(
            {
                "level": [level] * len(names),
                "name": names,
                "p_top": found.p_top,
                "p_top3": found.p_top3,
            },
            schema=RANKS,
        )  # fmt: skip
        for level, (names, found) in judged.items()
        if found is not None
    ]
    return (pa.concat_tables(parts) if parts else RANKS.empty_table()), judged["node"][1]


def stability_metrics(stability: RankingStability | None) -> dict[str, float]:
    """The node ranking's stability as derived metrics (none when not judged)."""
    if stability is None:
        return {}
    return {
        "top_op_stability": stability.top_op_stability,
        "top3_stability": stability.top3_stability,
    }

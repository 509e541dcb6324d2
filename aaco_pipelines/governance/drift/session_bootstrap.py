"""The hierarchical bootstrap of a session's figures against baseline sessions.

A session's figure (latency p50 and p99, throughput; a generation session's TTFT and TPOT p50)
is compared with a baseline of one or more sessions. Resampling the baseline's sessions, then the
samples within them (measured iterations, or requests), puts its session-to-session spread in
the interval, not only its noise within a session; the current session's samples are resampled
as one session's, and each resample is moved by a draw of the session-to-session shift (log-
normal, one draw for all its figures; its sd is how much the baseline sessions' medians differ,
at least each figure's floor where one is given): the current session is one session among
many, and a median that moves 5 % from session to session cannot show a 3 % change in a single
one. The shift is read from medians, not from p99s or means: a session with one stall has a
mean far off its neighbours' while its level is the same, and the current session's own stalls
are in its resampled iterations already. Both the named-baseline comparison and the CI gate use
it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake

BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000  # bounds each block of resampled values to ~32 MB

# Iteration figures, in EffectSamples column order: metric -> higher is worse.
ITERATION_FIGURES = {
    "latency_p50_ns": True,
    "latency_p99_ns": True,
    "throughput_per_s": False,
}
# A generation session's request figures (its headline scenario's requests), in column order.
REQUEST_FIGURES = {
    "ttft_p50_ns": True,
    "tpot_p50_ns": True,
}

ITERATIONS_SQL = """
SELECT session_id, latency_ns::DOUBLE AS latency_ns FROM iterations
WHERE pass = 'measured' AND session_id IN (SELECT unnest($ids)) ORDER BY session_id, iteration
"""
# A request's TPOT is null when it made one token: NaN, left out of its medians.
REQUESTS_SQL = """
SELECT session_id, ttft_ns::DOUBLE AS ttft_ns, coalesce(tpot_ns, 'NaN'::DOUBLE) AS tpot_ns
FROM requests WHERE run = $scenario AND session_id IN (SELECT unnest($ids))
ORDER BY session_id, request_id
"""


@dataclass(frozen=True)
class EffectSamples:
    """Current against baseline on some figures: each side's figures over its pooled samples
    and the bootstrap distribution of the effect in %, one row per resample, one column per
    figure."""

    baseline: np.ndarray
    current: np.ndarray
    effects: np.ndarray  # resamples x figures
    sizes: dict  # baseline sessions and samples, current samples


@dataclass(frozen=True)
class _Pooled:
    """Samples of several sessions, one row each, grouped by session."""

    values: np.ndarray  # samples x columns
    offsets: np.ndarray  # first row of each session
    counts: np.ndarray  # rows of each session


def bootstrap_effects(
    lake: TraceLake, baseline, session_id: str, resamples: int, seed: int,
    floors: dict[str, float] | None = None,
) -> EffectSamples:  # fmt: skip
    """The effect on ITERATION_FIGURES of a session against a baseline (anything with a `name`
    and `session_ids`: a stored Baseline, or the gate's ad-hoc reference), from the measured
    iterations."""
    base = _pooled(lake, ITERATIONS_SQL, {"ids": list(baseline.session_ids)})
    if base.values.size == 0:
        raise AacoInputError(
            f"the sessions of baseline {baseline.name!r} have no measured iterations left",
            fix="recreate the baseline (replace=True) from sessions still in the TraceLake",
        )
    current = _pooled(lake, ITERATIONS_SQL, {"ids": [session_id]})
    if current.values.size == 0:
        raise AacoInputError(
            f"session {session_id!r} has no measured iterations",
            fix="compare a session that was measured (an ingested trace alone has none)",
        )
    spread = _floors(ITERATION_FIGURES, floors)
    levels = np.zeros(len(ITERATION_FIGURES), dtype=int)  # every figure shifts with the p50
    return _bootstrap(
        base, current, iteration_figures, resamples, seed, "iterations", spread, levels
    )


def bootstrap_request_effects(
    lake: TraceLake, baseline_ids: Sequence[str], session_id: str, scenario: str,
    resamples: int, seed: int, floors: dict[str, float] | None = None,
) -> EffectSamples | None:  # fmt: skip
    """The effect on REQUEST_FIGURES of a generation session against baseline sessions, from
    the requests of `scenario`; None when either side has none."""
    base = _pooled(lake, REQUESTS_SQL, {"ids": list(baseline_ids), "scenario": scenario})
    current = _pooled(lake, REQUESTS_SQL, {"ids": [session_id], "scenario": scenario})
    if base.counts.size == 0 or current.counts.size == 0:
        return None
    spread = _floors(REQUEST_FIGURES, floors)
    levels = np.arange(len(REQUEST_FIGURES))  # TTFT and TPOT p50: each a median itself
    return _bootstrap(base, current, request_figures, resamples, seed, "requests", spread, levels)


def iteration_figures(latency: np.ndarray) -> np.ndarray:
    """Per row of latencies (rows x samples x 1): p50, p99 (as the sessions table computes
    them) and throughput (1e9 / mean)."""
    samples = latency[..., 0]
    p50, p99 = np.percentile(samples, [50, 99], axis=1)
    return np.column_stack([p50, p99, 1e9 / samples.mean(axis=1)])


def request_figures(requests: np.ndarray) -> np.ndarray:
    """Per row of requests (rows x samples x [ttft, tpot]): the TTFT and TPOT medians."""
    with warnings.catch_warnings():  # a resample of one-token requests has no TPOT: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(requests, axis=1)


def _floors(figures: dict[str, bool], floors: dict[str, float] | None) -> np.ndarray:
    return np.array([(floors or {}).get(name, 0.0) for name in figures])


def _bootstrap(
    base: _Pooled, current: _Pooled, figures: Callable[[np.ndarray], np.ndarray],
    resamples: int, seed: int, unit: str, floors: np.ndarray, levels: np.ndarray,
) -> EffectSamples:  # fmt: skip
    rng = np.random.default_rng(seed)
    base_stats = _resampled(base, figures, resamples, rng)
    spread = np.maximum(session_spread(base, figures)[levels], floors)
    current_stats = _resampled(current, figures, resamples, rng)
    shift = rng.standard_normal((current_stats.shape[0], 1))  # one session, one shift
    current_stats = current_stats * np.exp(shift * spread)
    with np.errstate(all="ignore"):
        effects = (current_stats - base_stats) / base_stats * 100.0
    return EffectSamples(
        baseline=figures(base.values[None])[0],
        current=figures(current.values[None])[0],
        effects=effects,
        sizes={
            "baseline_sessions": int(base.counts.size),
            f"baseline_{unit}": int(base.counts.sum()),
            f"current_{unit}": int(current.counts.sum()),
        },
    )


def session_spread(pooled: _Pooled, figures: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Per figure, the sd of its log over the pooled sessions (0 with one session): how much
    one session's figure varies from another's."""
    if pooled.counts.size < 2:
        return np.zeros(figures(pooled.values[None, :1]).shape[1])
    per_session = np.vstack([
        figures(pooled.values[None, start : start + count])
        for start, count in zip(pooled.offsets, pooled.counts, strict=True)
    ])  # fmt: skip  # one row per baseline session: a handful
    with np.errstate(all="ignore"):
        spread = np.nanstd(np.log(per_session), axis=0, ddof=1)
    return np.nan_to_num(spread)


def _resampled(
    pooled: _Pooled,
    figures: Callable[[np.ndarray], np.ndarray],
    resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Figures of `resamples` hierarchical resamples of the pooled samples' size: sessions
    drawn with replacement, then samples within them."""
    counts, offsets = pooled.counts, pooled.offsets
    sessions, size = counts.size, int(counts.sum())
    rows = max(1, BOOTSTRAP_CHUNK_ELEMENTS // (size * pooled.values.shape[1]))
    blocks = []
    for start in range(0, resamples, rows):
        n = min(rows, resamples - start)
        chosen = rng.integers(0, sessions, size=(n, sessions))
        pick = np.take_along_axis(chosen, rng.integers(0, sessions, size=(n, size)), axis=1)
        within = (rng.random((n, size)) * counts[pick]).astype(np.int64)
        blocks.append(figures(pooled.values[offsets[pick] + within]))
    return np.concatenate(blocks)


def _pooled(lake: TraceLake, sql: str, params: dict) -> _Pooled:
    """A query's rows (session_id first, then the sample's values) grouped by session."""
    table = lake.query(sql, params)
    sid = table["session_id"].to_numpy(zero_copy_only=False)
    values = np.column_stack(
        [table[c].to_numpy(zero_copy_only=False).astype(np.float64) for c in table.column_names[1:]]
    ) if table.num_rows else np.empty((0, table.num_columns - 1))  # fmt: skip
    starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]]) if sid.size else np.empty(0, int)
    return _Pooled(values, starts, np.diff(np.r_[starts, sid.size]).astype(np.int64))

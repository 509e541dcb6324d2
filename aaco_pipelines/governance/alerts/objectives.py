"""Objectives judged: is a session's figure within the limit a team set (registry.objectives)?

A limit is *breached* only when the figure's 95 % interval lies beyond it, *met* when the
interval lies on its side, and *uncertain* in between: one noisy session is not a breach.
- Quantiles (p50 ... p99): a distribution-free interval from the order statistics
  (scipy.stats.quantile_test): right whatever the latencies' shape, and open-ended where the
  samples are too few (a p99's upper bound needs 367 samples at 95 %), so a short pass cannot
  claim to meet a p99 objective.
- Means and rates: the mean's t-interval (a pass has tens to thousands of samples, so the
  mean is near normal; a bootstrap's jackknife would cost n^2 at 10^4 iterations).
- Peak memory: one reading, no interval.
Then the interval is widened by how much the figure moves from session to session (the log-sd
of the model's last sessions on this target, from 3 of them on), as `session_bootstrap` widens
a comparison: a session is one draw of many. A breach measured on a host the quality check
calls suspect (analysis.metrics.measurement_quality: contention, a bimodal pass) is labelled so and is
never a confirmed one: it is shown, and the asset check warns instead of failing; unless it lies
beyond what the contention measured can explain (its slowdown bound: a p50 640x over its limit
on a host 81 % busy, which can stretch times 10.5x at most), or contention cannot move the
figure at all (peak memory): then it is acted on, and its basis says why.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality
from aaco_pipelines.registry.objectives import OBJECTIVE_KINDS, ObjectiveKind
from aaco_pipelines.tracelake.queries import measurement_quality_row
from aaco_pipelines.tracelake.schema import OBJECTIVE_VERDICTS

CONFIDENCE = 0.95
SPREAD_SESSIONS = 8  # the model's latest sessions read for the session-to-session spread
MIN_SPREAD_SESSIONS = 3
TO_UNIT = {"ms": 1e-6, "per_s": 1.0, "MB": 1.0 / 2**20}  # from ns, per second, bytes

# The sessions whose samples a judgement reads: the judged one, then the model's latest
# completed sessions on its target (for the spread).
SESSIONS_SQL = """
SELECT s.session_id, s.workload, s.scenario FROM session_records s
WHERE s.session_id = $sid
UNION ALL
SELECT * FROM (
    SELECT p.session_id, p.workload, p.scenario FROM session_records p
    JOIN session_records s ON s.session_id = $sid
    WHERE p.model_slug = s.model_slug AND p.target IS NOT DISTINCT FROM s.target
      AND p.session_id <> s.session_id AND p.started_at <= s.started_at
      AND p.workload IS NOT DISTINCT FROM s.workload
      AND p.scenario IS NOT DISTINCT FROM s.scenario
      AND p.session_id IN (SELECT session_id FROM completed_sessions)
    ORDER BY p.started_at DESC LIMIT $n
)
"""
ITERATIONS_SQL = """
SELECT session_id, latency_ns::DOUBLE AS value FROM iterations
WHERE pass = 'measured' AND session_id IN (SELECT unnest($ids))
"""
# The headline scenario's requests. A generation session's latency is its requests' end to end
# (as its sessions row says), so latency objectives read e2e there.
REQUESTS_SQL = """
SELECT r.session_id, r.ttft_ns::DOUBLE AS ttft_ns, r.tpot_ns, r.e2e_ns::DOUBLE AS e2e_ns,
       r.output_tokens::DOUBLE AS output_tokens,
       (r.ttft_ns <= $ttft_ns AND coalesce(r.tpot_ns, 0) <= $tpot_ns)::DOUBLE AS within_slo,
       (max(r.end_ns) OVER w - min(r.arrival_ns) OVER w) / 1e9 AS duration_s
FROM requests r JOIN session_records s USING (session_id)
WHERE r.run = s.scenario AND r.session_id IN (SELECT unnest($ids))
WINDOW w AS (PARTITION BY r.session_id)
"""
# Inter-token latencies: each decode step gives every sequence of its batch one token.
ITL_SQL = """
SELECT g.session_id, (g.end_ns - lag(g.end_ns) OVER w)::DOUBLE AS value, g.batch_size, g.step
FROM generation_steps g JOIN session_records s USING (session_id)
WHERE g.run = s.scenario AND g.session_id IN (SELECT unnest($ids))
WINDOW w AS (PARTITION BY g.session_id, g.run, g.batch_id ORDER BY g.step)
QUALIFY g.step > 0
"""


@dataclass(frozen=True)
class Figure:
    """A figure of one session, in its objective's unit, with its interval."""

    value: float | None
    low: float | None
    high: float | None
    samples: int
    note: str = ""


def judge_objectives(
    lake,
    session_id: str,
    objectives: dict[str, float],
    *,
    peak_memory_bytes: int | None = None,
    slo_ns: tuple[float, float] = (float("inf"), float("inf")),
    context: dict | None = None,
) -> pa.Table:
    """OBJECTIVE_VERDICTS rows of one session for its objectives ({key: limit}). `slo_ns`: the
    generation SLO's TTFT and TPOT limits (goodput counts requests within both); `context`:
    the row's model_slug and target."""
    if not objectives:
        return OBJECTIVE_VERDICTS.empty_table()
    samples = _Samples(lake, session_id, slo_ns)
    quality = measurement_quality_row(lake, session_id)
    quality = MeasurementQuality.from_row(quality) if quality is not None else None
    rows = []
    for key, limit in sorted(objectives.items()):
        kind = OBJECTIVE_KINDS[key]
        if kind.source == "peak_memory":
            figure = _reading(peak_memory_bytes, kind)
            spread, sessions = None, 0
        else:
            figure = samples.figure(session_id, kind)
            spread, sessions = samples.spread(kind)
        rows.append(_row(session_id, key, kind, limit, figure, spread, sessions, quality, context))
    return pa.Table.from_pylist(rows, schema=OBJECTIVE_VERDICTS)


def _row(sid, key, kind, limit, figure, spread, sessions, quality, context) -> dict:
    low, high = figure.low, figure.high
    if spread is not None and low is not None:
        widen = np.exp(stats.norm.ppf(0.5 + CONFIDENCE / 2) * spread)
        low, high = low / widen, (high * widen if high is not None else None)
    verdict = _verdict(kind.bound, limit, figure.value, low, high)
    basis = [figure.note] if figure.note else []
    suspect = quality is not None and quality.suspect and verdict == "breached"
    if suspect and (beyond := _beyond_contention(kind, limit, low, high, quality)):
        suspect = False
        basis.append(beyond)
    if spread is not None:
        basis.append(f"widened by the session-to-session spread ({spread:.1%} over {sessions})")
    elif kind.source != "peak_memory" and figure.value is not None:
        basis.append(f"session-to-session spread unknown ({sessions} earlier sessions, needs 3)")
    return {
        "session_id": sid,
        **(context or {}),
        "objective": key,
        "bound": kind.bound,
        "limit_value": limit,
        "unit": kind.unit,
        "value": figure.value,
        "ci_low": low,
        "ci_high": high,
        "samples": figure.samples,
        "spread_pct": None if spread is None else spread * 100.0,
        "spread_sessions": sessions,
        "verdict": verdict,
        "suspect": suspect,
        "basis": "; ".join(basis),
    }


def _beyond_contention(kind: ObjectiveKind, limit, low, high, quality) -> str | None:
    """Why a breach on a suspect measurement is acted on anyway, or None: contention cannot
    move the figure (peak memory), or the breach is beyond the slowdown its measured contention
    can cause (the interval's near end against the limit)."""
    if kind.source == "peak_memory":
        return "acted on: other processes do not move this process's peak memory"
    bound = quality.slowdown_bound()
    if bound is None or not limit:
        return None
    near = low if kind.bound == "max" else high
    if near is None or not np.isfinite(near) or near <= 0:
        return None
    factor = near / limit if kind.bound == "max" else limit / near
    if factor <= bound:
        return None
    return (
        f"acted on: {factor:.3g}x beyond its limit, more than the {bound:.3g}x the measured "
        f"contention ({quality.host_contention:.0%} of the host's CPU) can explain"
    )


def _verdict(bound: str, limit: float, value, low, high) -> str:
    """met | breached | uncertain | no_data, by where the interval lies (NaN/None: open)."""
    if value is None:
        return "no_data"
    low = -np.inf if low is None or np.isnan(low) else low
    high = np.inf if high is None or np.isnan(high) else high
    over, under = low > limit, high < limit
    if bound == "max":
        return "breached" if over else "met" if high <= limit else "uncertain"
    return "breached" if under else "met" if low >= limit else "uncertain"


def _reading(peak_bytes: int | None, kind: ObjectiveKind) -> Figure:
    if peak_bytes is None:
        return Figure(None, None, None, 0, "no peak memory recorded (an ingested trace)")
    value = peak_bytes * TO_UNIT[kind.unit]
    return Figure(
        value, value, value, 1, "one reading: the measuring process's peak resident memory"
    )


class _Samples:
    """The samples of the judged session and of its model's latest sessions, read once each."""

    def __init__(self, lake, session_id: str, slo_ns: tuple[float, float]):
        self.lake, self.session_id, self.slo_ns = lake, session_id, slo_ns
        sessions = lake.query(SESSIONS_SQL, {"sid": session_id, "n": SPREAD_SESSIONS})
        self.ids = sessions["session_id"].to_pylist()
        self.generation = sessions["workload"][0].as_py() == "generation"
        self._read: dict[str, pa.Table] = {}

    def table(self, source: str) -> pa.Table:
        if source not in self._read:
            sql = {"iterations": ITERATIONS_SQL, "requests": REQUESTS_SQL, "itl": ITL_SQL}[source]
            params = {"ids": self.ids}
            if source == "requests":
                params |= {"ttft_ns": self.slo_ns[0], "tpot_ns": self.slo_ns[1]}
            self._read[source] = self.lake.query(sql, params)
        return self._read[source]

    def figure(self, session_id: str, kind: ObjectiveKind) -> Figure:
        source, column = kind.source, kind.column
        if source == "iterations" and self.generation:  # its latency is its requests'
            if kind.statistic == "rate":
                return Figure(
                    None, None, None, 0, "a generation session: use output_tokens_per_s_min"
                )
            source, column = "requests", "e2e_ns"
        if source in ("requests", "itl") and not self.generation:
            return Figure(None, None, None, 0, "a forward session has no requests")
        table = self.table(source)
        mine = table.filter(pc.equal(table["session_id"], session_id))
        values = _values(mine, column or "value", source)
        if values.size == 0:
            return Figure(None, None, None, 0, f"no {source} samples")
        scale = TO_UNIT[kind.unit]
        if kind.statistic == "quantile":
            return _quantile(values, kind.quantile, scale)
        if kind.statistic == "mean":
            return _mean(values, scale)
        duration = mine["duration_s"][0].as_py() if source == "requests" else None
        return _rate(values, duration)

    def spread(self, kind: ObjectiveKind) -> tuple[float | None, int]:
        """The log-sd of the figure over the earlier sessions (None below 3 of them)."""
        earlier = [f.value for f in (self.figure(sid, kind) for sid in self.ids[1:]) if f.value]
        if len(earlier) < MIN_SPREAD_SESSIONS:
            return None, len(earlier)
        return float(np.std(np.log(earlier), ddof=1)), len(earlier)


def _values(table: pa.Table, column: str, source: str) -> np.ndarray:
    values = table[column].to_numpy(zero_copy_only=False).astype(np.float64)
    if source == "itl":  # one token per sequence of the step's batch
        values = np.repeat(values, table["batch_size"].to_numpy(zero_copy_only=False))
    return values[~np.isnan(values)]


def _quantile(values: np.ndarray, q: float, scale: float) -> Figure:
    value = float(np.percentile(values, q * 100))
    with warnings.catch_warnings():  # too few samples for a bound: NaN, an open interval
        warnings.simplefilter("ignore", RuntimeWarning)
        interval = stats.quantile_test(values, q=value, p=q).confidence_interval(CONFIDENCE)
    low, high = (None if np.isnan(b) else float(b) * scale for b in interval)
    note = "" if high is not None else f"too few samples ({values.size}) to bound it from above"
    return Figure(value * scale, low, high, int(values.size), note)


def _mean_interval(values: np.ndarray) -> tuple[float, float]:
    mean = float(values.mean())
    if values.size < 2:
        return mean, mean
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, values.size - 1) * stats.sem(values)
    return mean - half, mean + half


def _mean(values: np.ndarray, scale: float) -> Figure:
    low, high = _mean_interval(values)
    return Figure(float(values.mean()) * scale, low * scale, high * scale, int(values.size))


def _rate(values: np.ndarray, duration_s: float | None) -> Figure:
    """Per second: of iterations, 1e9 / their mean latency; of requests, the sum of a column
    (tokens, requests within the SLO) over the scenario's duration."""
    low, high = _mean_interval(values)
    if duration_s is None:
        fastest = 1e9 / low if low > 0 else None
        return Figure(1e9 / values.mean(), 1e9 / high, fastest, int(values.size))
    per = values.size / duration_s
    return Figure(values.mean() * per, low * per, high * per, int(values.size))

"""What changed in a generation session against its baseline, and where a TTFT change went.

The figures compare the current session with the median of the baseline's sessions; the TTFT
split compares it with their mean, so that the parts add up.

A request's time to first token is its queueing (arrival to prefill start) plus its prefill span
(prefill start to first token), exactly, so their means add up to the mean TTFT. The prefill span
splits into kernel time and host time by the profiled pass: the share of a prefill step that its
kernels took (phase_breakdown's prefill kernel time over the profiled prefill steps' span),
applied to the measured prefill span. A TTFT regression is then told apart as queueing (more
load or slower earlier batches), prefill kernels (slower or more kernels) or host time (the
runtime, sampling, bindings).
"""

from __future__ import annotations

import numpy as np

FIGURES = ("ttft_p50_ns", "tpot_p50_ns", "itl_p99_ns", "output_tokens_per_s")
PARTS = ("queueing", "prefill_kernel", "host")

FIGURES_SQL = """
SELECT g.session_id, g.metric, g.value
FROM session_records s JOIN generation_metrics g
  ON g.session_id = s.session_id AND g.run = s.scenario AND g.batch_size IS NULL
 AND g.source = 'aaco'
WHERE s.session_id IN (SELECT unnest($ids)) AND s.scenario = $scenario
UNION ALL
SELECT k.session_id, 'prefill_kernel_fraction', least(1.0, k.kernel_ns / p.span_ns)
FROM (SELECT session_id, sum(mean_ns) AS kernel_ns FROM phase_breakdown
      WHERE phase = 'prefill' AND level = 'op_type' AND session_id IN (SELECT unnest($ids))
      GROUP BY session_id) k
JOIN (SELECT session_id, avg(end_ns - start_ns) AS span_ns FROM generation_steps
      WHERE run = 'profiled' AND iteration >= 0 AND phase = 'prefill'
        AND session_id IN (SELECT unnest($ids))
      GROUP BY session_id) p USING (session_id)
"""


def generation_effects(lake, baseline_ids: list[str], current: str) -> dict | None:
    """TTFT, TPOT, ITL and tokens/s of the current session against the baseline's medians, and
    the TTFT change split into queueing, prefill kernel and host time; None unless the current
    session is a generation one and the baseline ran its headline scenario."""
    scenario = lake.query(
        "SELECT scenario FROM session_records WHERE session_id = $sid", {"sid": current}
    )["scenario"][0].as_py()
    if scenario is None:
        return None
    rows = lake.query(FIGURES_SQL, {"ids": [*baseline_ids, current], "scenario": scenario})
    before = _over_sessions(rows, set(baseline_ids), np.median)
    after = _over_sessions(rows, {current}, np.median)
    if "ttft_mean_ns" not in before or "ttft_mean_ns" not in after:
        return None
    return {
        "scenario": scenario,
        **{name: _change(before.get(name), after.get(name)) for name in FIGURES},
        # means over the baseline's sessions: a mean of sums is the sum of the means
        "ttft_explained": ttft_explained(_over_sessions(rows, set(baseline_ids), np.mean), after),
    }


def ttft_explained(before: dict, after: dict) -> dict:
    """The mean TTFT's change (ms) as the sum of its parts' changes, and the largest part."""
    parts_before, parts_after = _ttft_parts(before), _ttft_parts(after)
    deltas = {part: (parts_after[part] - parts_before[part]) / 1e6 for part in PARTS}
    total = (after["ttft_mean_ns"] - before["ttft_mean_ns"]) / 1e6
    known = {p: d for p, d in deltas.items() if not np.isnan(d)}
    dominant = max(known, key=lambda p: abs(known[p])) if known else None
    return {
        "ttft_mean_delta_ms": total,
        **{f"{part}_ms": None if np.isnan(d) else d for part, d in deltas.items()},
        "dominant": dominant,
        "baseline_ms": {p: _ms(v) for p, v in parts_before.items()},
        "current_ms": {p: _ms(v) for p, v in parts_after.items()},
    }


def _ttft_parts(figures: dict) -> dict[str, float]:
    """Mean queueing, prefill kernel and host time (ns) of one side; NaN where unknown."""
    prefill = figures.get("prefill_mean_ns", np.nan)
    fraction = figures.get("prefill_kernel_fraction", np.nan)
    return {
        "queueing": figures.get("queue_mean_ns", np.nan),
        "prefill_kernel": prefill * fraction,
        "host": prefill * (1.0 - fraction),
    }


def _over_sessions(rows, ids: set[str], statistic) -> dict[str, float]:
    """metric -> `statistic` of its values over the sessions `ids`."""
    values: dict[str, list[float]] = {}
    for sid, metric, value in zip(*(rows[c].to_pylist() for c in rows.column_names), strict=True):
        if sid in ids and value is not None:
            values.setdefault(metric, []).append(value)
    return {metric: float(statistic(v)) for metric, v in values.items()}


def _change(before: float | None, after: float | None) -> dict | None:
    if before is None or after is None or before == 0:
        return None
    return {"baseline": before, "current": after, "effect_pct": (after - before) / before * 100.0}


def _ms(value: float) -> float | None:
    return None if np.isnan(value) else value / 1e6

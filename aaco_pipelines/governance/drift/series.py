"""Drift series: one point per session of a model on one target, per metric, in time order,
with markers where the model version or the runtime fingerprint changed; and their verdicts.

Metrics: latency p50 and p99 (higher is worse), throughput (lower is worse), and the mean time
per iteration of the current session's top op types (higher is worse). A generation session's
latency and throughput are its headline scenario's requests (end to end, requests/s), and its
series add that scenario's TTFT, TPOT and ITL percentiles (higher is worse) and output tokens/s
(lower is worse), against the sessions that ran the same scenario.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.governance.drift.changepoint import ChangePoint, change_points_of
from aaco_pipelines.governance.drift.robust_scale import robust_reference
from aaco_pipelines.governance.drift.verdict import (
    DriftVerdict,
    VerdictPolicy,
    drift_verdict,
    predictive_p_value,
)
from aaco_pipelines.tracelake.queries import noise_sessions
from aaco_pipelines.tracelake.store import reads_together

TOP_OPS = 3
# The noise floor of each metric's baseline scale, as a fraction of its median: a series quieter
# than this is judged as if it had this much noise. Measured session-to-session spread of the zoo
# on a shared 2-core host: p50 within ±4%, throughput (1/mean) ±8%, p99 ±20%. A noisier series
# gets its own (Qn) scale whatever the floor, so the floor only decides how sensitive a quiet
# series is: p50's 1% lets a 5% step on a 1%-noise series be a 4-5 sd one, found in 2-3 nights
# even after FDR (benchmarks/drift_nightly.py); at 2% it is 2.5 sd, 4+ nights, and lost to FDR.
NOISE_FLOORS = {
    "latency_p50_ns": 0.01,
    "latency_p99_ns": 0.10,
    "throughput_per_s": 0.05,
    "op_time_ns": 0.05,
    # Generation: a request's TTFT and TPOT are medians over many steps, steadier than one
    # forward pass; p99s and tokens/s are as noisy as their forward-pass counterparts.
    "ttft_p50_ns": 0.02,
    "tpot_p50_ns": 0.02,
    "itl_p99_ns": 0.10,
    "output_tokens_per_s": 0.05,
}
DEFAULT_POLICY = VerdictPolicy()
# The headline metrics a confirmed regression fails a run on; op-level verdicts are reported.
GATED_METRICS = (
    "latency_p50_ns", "latency_p99_ns", "throughput_per_s", "ttft_p50_ns", "tpot_p50_ns",
)  # fmt: skip
CONFIRM_SESSIONS = 2  # consecutive sessions with the same verdict, unless a known change
# metric (generation_metrics of the headline scenario) -> higher is worse
GENERATION_SERIES = {
    "ttft_p50_ns": True,
    "tpot_p50_ns": True,
    "itl_p99_ns": True,
    "output_tokens_per_s": False,
}
SESSION_METRICS = {  # metric -> (sessions column, higher is worse)
    "latency_p50_ns": ("latency_p50_ns", True),
    "latency_p99_ns": ("latency_p99_ns", True),
    "throughput_per_s": ("throughput_per_s", False),
}

# A model's history on the judged session's target (a CPU and a GPU are two series): its
# completed sessions there, and the session being judged (not complete yet).
SESSIONS_SQL = """
SELECT session_id, started_at, model_sha256, runtime_fingerprint,
       latency_p50_ns, latency_p99_ns, throughput_per_s
FROM session_records WHERE model_slug = $slug
  AND target IS NOT DISTINCT FROM (SELECT target FROM session_records WHERE session_id = $sid)
  AND started_at <= (SELECT started_at FROM session_records WHERE session_id = $sid)
  AND (session_id = $sid OR session_id IN (SELECT session_id FROM completed_sessions))
ORDER BY started_at, session_id
"""

OP_SERIES_SQL = """
SELECT s.session_id, b.name AS op_type, b.mean_ns
FROM session_records s JOIN op_breakdown b ON b.session_id = s.session_id AND b.level = 'op_type'
WHERE s.model_slug = $slug AND b.name IN (SELECT unnest($ops))
  AND (s.session_id = $sid OR s.session_id IN (SELECT session_id FROM completed_sessions))
"""


GENERATION_SERIES_SQL = """
SELECT g.session_id, g.metric, g.value
FROM generation_metrics g JOIN session_records s USING (session_id)
WHERE s.model_slug = $slug AND g.run = $scenario AND s.scenario = $scenario
  AND g.source = 'aaco' AND g.batch_size IS NULL AND g.metric IN (SELECT unnest($metrics))
"""


def model_series(lake, model_slug: str, session_id: str) -> dict[str, dict]:
    """Every drift series of a model up to and including `session_id` (the current point)."""
    sessions = lake.query(SESSIONS_SQL, {"slug": model_slug, "sid": session_id})
    ids = sessions["session_id"].to_pylist()
    markers = _markers(sessions)
    series = {
        metric: {
            "values": sessions[column].to_numpy().astype(np.float64),
            "higher_is_worse": worse,
        }
        for metric, (column, worse) in SESSION_METRICS.items()
    }
    top = lake.query(
        "SELECT name FROM op_breakdown WHERE session_id = $sid AND level = 'op_type' "
        "ORDER BY mean_ns DESC LIMIT $n",
        {"sid": session_id, "n": TOP_OPS},
    )["name"].to_pylist()
    if top:
        ops = lake.query(OP_SERIES_SQL, {"slug": model_slug, "ops": top, "sid": session_id})
        position = {sid: i for i, sid in enumerate(ids)}
        for op in top:
            values = np.full(len(ids), np.nan)
            rows = ops.filter(pc.equal(ops["op_type"], op))
            for sid, mean_ns in zip(
                rows["session_id"].to_pylist(), rows["mean_ns"].to_pylist(), strict=True
            ):
                if sid in position:
                    values[position[sid]] = mean_ns
            series[f"op_time_ns:{op}"] = {"values": values, "higher_is_worse": True}
    series.update(_generation_series(lake, model_slug, session_id, ids))
    noise = noise_sessions(lake, model_slug, session_id)
    for metric, entry in series.items():
        entry["session_ids"] = ids
        entry["markers"] = markers
        # sessions of an alert people marked invalid (noise) are gaps: they move no baseline
        left_out = [i for i, sid in enumerate(ids[:-1]) if sid in noise.get(metric, ())]
        entry["values"][left_out] = np.nan
    return series


def _generation_series(lake, model_slug: str, session_id: str, ids: list[str]) -> dict:
    """The generation series of the current session's headline scenario (none for a forward
    session); sessions of another scenario or workload are gaps (NaN), skipped when judged."""
    scenario = lake.query(
        "SELECT scenario FROM session_records WHERE session_id = $sid", {"sid": session_id}
    )["scenario"][0].as_py()
    if scenario is None:
        return {}
    rows = lake.query(
        GENERATION_SERIES_SQL,
        {"slug": model_slug, "scenario": scenario, "metrics": list(GENERATION_SERIES)},
    )
    position = {sid: i for i, sid in enumerate(ids)}
    series = {
        metric: {"values": np.full(len(ids), np.nan), "higher_is_worse": worse}
        for metric, worse in GENERATION_SERIES.items()
    }
    for sid, metric, value in zip(*(rows[c].to_pylist() for c in rows.column_names), strict=True):
        if sid in position:
            series[metric]["values"][position[sid]] = value
    return series


def _markers(sessions: pa.Table) -> list[list[str]]:
    """Per point: what changed since the previous point ("model_version", "runtime")."""
    sha = sessions["model_sha256"].to_pylist()
    fingerprint = sessions["runtime_fingerprint"].to_pylist()
    markers: list[list[str]] = [[]]
    for i in range(1, len(sha)):
        markers.append(
            [
                name
                for name, col in (("model_version", sha), ("runtime", fingerprint))
                if col[i] != col[i - 1]
            ]
        )
    return markers[: len(sha)]


def judge_series(
    entry: dict, current_samples: np.ndarray | None = None, policy: VerdictPolicy = DEFAULT_POLICY
) -> DriftVerdict:
    """The verdict on the newest point of one series (points a session lacks are skipped).

    On a shared host one session in ten can run 10-60% slow for reasons outside the model, so a
    regression or improvement is confirmed only when the previous session (or, past a noisy or
    outlying one, the session before it) was already beyond the minimum effect the same way and
    at the same level (two slow sessions 20% apart are two bad nights, not one shift), or when
    the model version or the runtime changed at this point (a known cause is reported at once).
    That session need not have had a verdict of its own: the current one's CUSUM and EWMA
    already weigh it. Until then the verdict stays
    no_change, decided_by "awaiting_confirmation", with its effect and CI reported. A confirmed
    verdict's p-value covers the run of sessions since the shift (`_confirmed_p_value`).
    """
    values = entry["values"][~np.isnan(entry["values"])]
    verdict = drift_verdict(
        values,
        higher_is_worse=entry["higher_is_worse"],
        current_samples=current_samples,
        policy=policy,
    )
    if verdict.verdict not in ("regression", "improvement") or entry["markers"][-1]:
        return _with_confirmation(verdict, "known_change" if entry["markers"][-1] else "not_needed")
    how = _confirmation(values, verdict, policy)
    if how == "confirmed_by_previous_session":
        return _with_confirmation(_confirmed_p_value(verdict, values, policy), how)
    unconfirmed = _with_confirmation(verdict, how)
    return dataclasses.replace(unconfirmed, verdict="no_change", decided_by="awaiting_confirmation")


def _confirmation(values: np.ndarray, verdict: DriftVerdict, policy: VerdictPolicy) -> str:
    """Whether the previous session backs the current verdict: beyond the minimum effect from
    the same baseline the same way, and within z_threshold sds of a two-point difference of the
    current session (a real shift moves both to one level, two outliers land anywhere). When the
    previous session is a shifted one pulled short of the minimum effect by noise (still half of
    it the same way) or a shared-host outlier even further out, the one before it is asked."""
    median, scale = verdict.baseline["median"], verdict.baseline["scale"]
    limit = policy.z_threshold * scale * np.sqrt(2.0)
    sign = np.sign(verdict.effect_pct)
    for previous in values[-2:-4:-1]:
        effect = sign * (previous - median) / abs(median) * 100.0
        if effect < policy.min_effect_pct / 2.0:
            return "awaiting_confirmation"
        if effect >= policy.min_effect_pct and abs(values[-1] - previous) <= limit:
            return "confirmed_by_previous_session"
        if effect >= policy.min_effect_pct and sign * (previous - values[-1]) < 0.0:
            return "previous_session_at_another_level"  # between the baseline and the current
    return "awaiting_confirmation"


def _confirmed_p_value(
    verdict: DriftVerdict, values: np.ndarray, policy: VerdictPolicy
) -> DriftVerdict:
    """A confirmed verdict rests on the sessions since the shift, so its p-value does: the mean
    of that run against the history before it (the verdict's own baseline window already holds
    the run's earlier sessions). Against 30 points one session 4 sd out gives p ~ 1e-3, a run of
    two ~ 3e-5, of three ~ 3e-6: what survives Benjamini-Hochberg over hundreds of series."""
    r = _run_length(values, verdict, policy)
    history = values[:-r][-policy.history_window :]
    if history.size < policy.min_history:
        return verdict
    baseline = robust_reference(history, policy.floor_fraction)
    z = (float(np.mean(values[-r:])) - baseline.median) / baseline.scale
    p = predictive_p_value(z, history.size, not baseline.floored, points=r)
    parameters = verdict.parameters | {
        "p_value": p,
        "p_value_sessions": r,
        "p_value_current_session": verdict.p_value,
    }
    return dataclasses.replace(verdict, p_value=p, parameters=parameters)


def _run_length(values: np.ndarray, verdict: DriftVerdict, policy: VerdictPolicy) -> int:
    """The confirming sessions, and before them every consecutive session at least the minimum
    effect beyond the baseline (of the history before the confirming ones) the same way."""
    before = values[:-CONFIRM_SESSIONS][-policy.history_window :]
    if before.size < policy.min_history:
        return CONFIRM_SESSIONS
    median = robust_reference(before, policy.floor_fraction).median
    sign = np.sign(verdict.effect_pct)
    effect = sign * (values[:-CONFIRM_SESSIONS] - median) / abs(median) * 100.0
    limit = min(policy.history_window, values.size - CONFIRM_SESSIONS - policy.min_history)
    beyond = effect[::-1][: max(limit, 0)] >= policy.min_effect_pct
    extra = int(np.argmin(beyond)) if not beyond.all() else beyond.size
    return CONFIRM_SESSIONS + extra


def _with_confirmation(verdict: DriftVerdict, how: str) -> DriftVerdict:
    parameters = {**verdict.parameters, "confirmation": how, "confirm_sessions": CONFIRM_SESSIONS}
    return dataclasses.replace(verdict, parameters=parameters)


def metric_policy(metric: str, policy: VerdictPolicy = DEFAULT_POLICY) -> VerdictPolicy:
    """`policy` with the metric's noise floor ("op_time_ns:MatMul" uses op_time_ns's)."""
    floor = NOISE_FLOORS[metric.split(":")[0]]
    return dataclasses.replace(policy, floor_fraction=max(policy.floor_fraction, floor))


@reads_together
def drift_verdict_rows(
    lake, model_slug: str, session_id: str, policy: VerdictPolicy = DEFAULT_POLICY
) -> pa.Table:
    """DRIFT_VERDICTS rows for the session: one per metric series."""
    series = model_series(lake, model_slug, session_id)
    samples = current_samples(lake, session_id)
    rows = []
    for metric, entry in series.items():
        verdict = judge_series(entry, samples.get(metric), metric_policy(metric, policy))
        rows.append(
            {
                "session_id": session_id,
                "model_slug": model_slug,
                "metric": metric,
                "verdict": verdict.verdict,
                "effect_pct": verdict.effect_pct,
                "ci_low": verdict.ci_low,
                "ci_high": verdict.ci_high,
                "z": verdict.z,
                "p_value": verdict.p_value,
                "decided_by": verdict.decided_by,
                "history_points": verdict.history_points,
                "baseline_json": json.dumps(verdict.baseline),
                "parameters_json": json.dumps(verdict.parameters, default=str),
                "series_json": json.dumps(
                    {
                        "session_ids": entry["session_ids"],
                        "values": [None if np.isnan(v) else float(v) for v in entry["values"]],
                        "markers": entry["markers"],
                        "change_points": [
                            {"session_id": entry["session_ids"][at], **point.to_dict()}
                            for at, point in change_points_of(entry["values"])
                        ],
                    }
                ),
            }
        )
    return pa.Table.from_pylist(rows)


# The current session's own samples behind a median metric: its measured iterations (a
# generation session's are its headline requests), and a generation session's per-request
# TTFT and TPOT.
SAMPLES_SQL = """
SELECT 'latency_p50_ns' AS metric, latency_ns::DOUBLE AS value
FROM iterations WHERE session_id = $sid AND pass = 'measured'
UNION ALL
SELECT m.metric, CASE m.metric WHEN 'ttft_p50_ns' THEN r.ttft_ns::DOUBLE ELSE r.tpot_ns END
FROM requests r JOIN session_records s ON s.session_id = r.session_id AND r.run = s.scenario
CROSS JOIN (VALUES ('ttft_p50_ns'), ('tpot_p50_ns')) m(metric)
WHERE r.session_id = $sid
"""


def current_samples(lake, session_id: str) -> dict[str, np.ndarray]:
    """metric -> the current session's samples of it (see SAMPLES_SQL)."""
    rows = lake.query(SAMPLES_SQL, {"sid": session_id})
    metrics = rows["metric"].to_numpy(zero_copy_only=False)
    values = rows["value"].to_numpy(zero_copy_only=False).astype(np.float64)
    return {
        metric: values[(metrics == metric) & ~np.isnan(values)] for metric in np.unique(metrics)
    }


def series_change_points(series: dict) -> list[tuple[int, ChangePoint]]:
    """The change points of a stored series (a drift_verdicts row's series_json), each with
    its position: as drift_verdict_rows found them, or found now for rows stored before it kept them."""
    if "change_points" not in series:
        return change_points_of(series["values"])
    position = {sid: i for i, sid in enumerate(series["session_ids"])}
    return [
        (
            position[point["session_id"]],
            ChangePoint(**{k: v for k, v in point.items() if k != "session_id"}),
        )
        for point in series["change_points"]
    ]

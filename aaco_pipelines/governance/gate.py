"""The CI gate: one answer to "is this session a regression against its baseline?", shaped for a
CI job (regression, severity, confidence, deltas with CIs, suspected cause, what to do next).

Decision. The p50 latency effect of the current session against the baseline, with the
hierarchical bootstrap CI of `governance.baselines` (baseline sessions, then their iterations;
the current session's iterations). A regression needs both: the CI excludes 0 on the slower side
(the slowdown is real) and the effect is at least `threshold_pct` (it is worth failing a build).

Severity is the p50 effect in multiples of the threshold T: minor [T, 2T), major [2T, 5T),
critical >= 5T (with T = 3 %: 3-6 %, 6-15 %, 15 % and more); "none" when not a regression.

Confidence is the bootstrap probability of the verdict: the share of resampled p50 effects at or
above the threshold for a regression, below it otherwise (0.5: a coin flip at the threshold).

Baseline, the first that applies: `baseline` names a stored baseline; else it is a session id
(a one-session baseline) or a list of ids; else the pinned baseline of the model+target; else the
PREVIOUS_SESSIONS measured sessions of the model+target started before the current one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.baselines import (
    bootstrap_effects,
    check_comparable,
    list_baselines,
    pinned_baseline,
)
from aaco_pipelines.governance.generation_effects import generation_effects
from aaco_pipelines.governance.root_cause import Suspect, explain_change
from aaco_pipelines.tracelake.queries import resolve_session
from aaco_pipelines.tracelake.store import TraceLake

PREVIOUS_SESSIONS = 5  # the baseline when nothing names one and none is pinned
SEVERITY_BANDS = ((5.0, "critical"), (2.0, "major"), (1.0, "minor"))  # multiples of threshold
TOP_SUSPECTS = 3
P50, THROUGHPUT = 0, 2  # columns of baselines.EffectSamples

RECOMMENDATIONS = {
    "model_version": "bisect the model change ({before} -> {after}): compare the two versions' "
    "graphs and op times to find the layer that got slower",
    "runtime": "pin ROCm / ONNX Runtime / the driver to the baseline's version ({before}) and "
    "re-run to confirm the runtime upgrade ({after}) is the cause",
    "execution_provider": "check why the execution providers changed ({before} -> {after}): a "
    "provider that fails to load falls back to a slower one",
    "clocks": "check throttling and the power cap ({name}: {before} -> {after}), then re-run on "
    "an idle, cool device",
    "host_contention": "measure again with the host to itself: other processes took {before} "
    "of its CPU while the baseline was measured and {after} while this session was",
    "op_time": "profile op type {name} ({before} -> {after} per iteration): its kernels or "
    "their selection changed",
    "kernel_count": "find why {name} launches more kernels ({before} -> {after}): a fusion or "
    "graph optimization may have been lost",
    "new_kernels": "inspect the kernels only this session runs ({name}): a different kernel "
    "choice or a fallback path",
    "vanished_kernels": "inspect the kernels this session no longer runs ({name}): a fast path "
    "may have been lost",
    "noise": "re-run; the difference is within session-to-session noise (more iterations or "
    "--laboratory make the next verdict sharper)",
    "unexplained": "re-run with profiling in laboratory mode: none of the recorded changes "
    "(model, runtime, providers, clocks, ops, kernels) explains the slowdown",
}


@dataclass(frozen=True)
class Reference:
    """The sessions a verdict compares against, and where they came from."""

    source: str  # baseline | session | sessions | pinned | previous
    name: str
    model_slug: str
    target: str
    session_ids: tuple[str, ...]


@dataclass(frozen=True)
class GateVerdict:
    regression: bool
    severity: str  # none | minor | major | critical
    confidence: float  # bootstrap probability of the verdict (see the module docstring)
    session_id: str
    model_slug: str
    target: str
    threshold_pct: float
    baseline: dict  # source, name, session_ids, n_sessions
    latency_delta_pct: dict  # p50: effect_pct, ci_low, ci_high, baseline_ms, current_ms
    throughput_delta_pct: dict  # effect_pct, ci_low, ci_high, baseline_per_s, current_per_s
    suspected_cause: dict | None  # the most probable root-cause suspect
    suspects: list[dict]  # the TOP_SUSPECTS most probable
    evidence: dict  # which test decided, bootstrap settings, sessions, iterations, noise
    recommendation: str
    # a generation session's TTFT/TPOT/ITL/tokens-per-s changes and where its TTFT change went
    generation: dict | None = None
    # sessions on either side whose measurement was judged suspect: session id -> its reasons
    suspect_measurements: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def changes_not_decided(self) -> list[str]:
        """Changes the verdict does not decide on but that pass its own test (the CI clear of 0
        and the effect beyond the threshold): a throughput drop the p50 cannot see is named,
        never left under "no regression". One phrase each."""
        t, threshold = self.throughput_delta_pct, self.threshold_pct
        figure = f"throughput {t['effect_pct']:+.2f} % [{t['ci_low']:+.2f}, {t['ci_high']:+.2f}]"
        if t["ci_high"] < 0.0 and t["effect_pct"] <= -threshold and not self.regression:
            return [
                f"{figure}: the mean latency rose (a heavier tail, or stalls) where the p50 "
                "did not, and the gate decides on the p50"
            ]
        p50_faster = self.evidence.get("decided_by") == "faster"
        if t["ci_low"] > 0.0 and t["effect_pct"] >= threshold and not p50_faster:
            return [f"{figure}: the mean latency fell where the p50 did not"]
        return []


def gate_verdict(
    lake: TraceLake,
    current_session_id: str,
    *,
    baseline: str | Sequence[str] | None = None,
    threshold_pct: float = 3.0,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> GateVerdict:
    """The gate's verdict on the current session ("latest" allowed) against its baseline."""
    if not threshold_pct > 0.0:
        raise AacoInputError(f"threshold must be above 0 %, got {threshold_pct}", fix="e.g. 3")
    if not 0.0 < confidence < 1.0:
        raise AacoInputError(f"confidence must be in (0, 1), got {confidence}", fix="e.g. 0.95")
    current = resolve_session(lake, current_session_id)
    reference = resolve_reference(lake, current, baseline)
    tail = (1.0 - confidence) / 2.0
    latency, throughput, p50_effects, sizes = _effects(
        lake, reference, current, resamples, seed, tail
    )
    low, high, effect = latency["ci_low"], latency["ci_high"], latency["effect_pct"]
    regression = low > 0.0 and effect >= threshold_pct
    p_regression = float(np.mean(p50_effects >= threshold_pct))
    suspects = explain_change(lake, reference.session_ids, current)
    return GateVerdict(
        regression=regression,
        severity=severity(effect, threshold_pct) if regression else "none",
        confidence=p_regression if regression else 1.0 - p_regression,
        session_id=current,
        model_slug=reference.model_slug,
        target=reference.target,
        threshold_pct=threshold_pct,
        baseline=asdict(reference) | {"n_sessions": len(reference.session_ids)},
        latency_delta_pct=latency,
        throughput_delta_pct=throughput,
        suspected_cause=_suspect(suspects[0]),
        suspects=[_suspect(s) for s in suspects[:TOP_SUSPECTS]],
        evidence=_evidence(low, high, effect, threshold_pct, confidence, resamples, sizes)
        | {"noise_sd_pct": _noise_pct(suspects[0], latency["baseline_ms"])},
        recommendation=recommendation(regression, suspects[0], low, high, effect, threshold_pct),
        generation=generation_effects(lake, list(reference.session_ids), current),
        suspect_measurements=suspect_measurements(lake, [current, *reference.session_ids]),
    )


def suspect_measurements(lake: TraceLake, session_ids: list[str]) -> dict[str, list[str]]:
    """Of these sessions, those whose measurement was judged suspect, with the reasons."""
    rows = lake.query(
        "SELECT session_id, reasons_json FROM measurement_quality "
        "WHERE verdict = 'suspect' AND list_contains($ids, session_id)",
        {"ids": session_ids},
    ).to_pylist()
    return {r["session_id"]: json.loads(r["reasons_json"] or "[]") for r in rows}


def severity(effect_pct: float, threshold_pct: float) -> str:
    """The band of a regression's p50 effect, in multiples of the threshold."""
    for multiple, name in SEVERITY_BANDS:
        if effect_pct >= multiple * threshold_pct:
            return name
    return "none"


def recommendation(
    regression: bool, top: Suspect, low: float, high: float, effect: float, threshold: float
) -> str:
    """One sentence: what to do about the most probable cause, or why nothing needs doing."""
    if regression:
        text = RECOMMENDATIONS.get(top.kind, RECOMMENDATIONS["unexplained"])
        return text.format(name=top.name, before=top.before or "-", after=top.after or "-")
    if high < 0.0:
        return f"no action: the session is faster ({effect:+.1f} % p50)"
    if low <= 0.0:
        return f"no action: the p50 change ({effect:+.1f} %) is within the confidence interval of 0"
    return f"no action: the p50 slowdown ({effect:+.1f} %) is below the {threshold:g} % threshold"


# --- the baseline ----------------------------------------------------------------------------


def resolve_reference(
    lake: TraceLake, current: str, baseline: str | Sequence[str] | None
) -> Reference:
    """The baseline sessions (without the current one), in the order the module docstring gives."""
    row = _session_row(lake, current)
    if isinstance(baseline, str):
        reference = _named_or_session(lake, baseline)
    elif baseline is not None:
        reference = _sessions_reference(lake, list(baseline), "sessions", "sessions")
    else:
        reference = _pinned(lake, row) or _previous(lake, row)
    check_comparable(lake, current, reference)
    ids = tuple(s for s in reference.session_ids if s != current)
    if not ids:
        raise AacoInputError(
            f"baseline {reference.name!r} holds only the current session {current!r}",
            fix="compare with a baseline of other (earlier) sessions",
        )
    return Reference(reference.source, reference.name, reference.model_slug, reference.target, ids)


def _named_or_session(lake: TraceLake, name: str) -> Reference:
    named = {b.name: b for b in list_baselines(lake)}
    if name in named:
        b = named[name]
        return Reference("baseline", name, b.model_slug, b.target, b.session_ids)
    if lake.query("SELECT 1 FROM sessions WHERE session_id = ?", [name]).num_rows:
        return _sessions_reference(lake, [name], "session", f"session {name}")
    raise AacoInputError(
        f"no baseline or session named {name!r}",
        fix=f"use a baseline ({', '.join(named)}) or a session id"
        if named
        else "pass a session id, or create a baseline (aaco baseline create)",
    )


def _sessions_reference(lake: TraceLake, ids: list[str], source: str, name: str) -> Reference:
    rows = lake.query(
        "SELECT session_id, model_slug, target FROM sessions "
        "WHERE session_id IN (SELECT unnest($ids))",
        {"ids": ids},
    ).to_pylist()
    missing = sorted(set(ids) - {r["session_id"] for r in rows})
    if missing or not ids:
        raise AacoInputError(
            f"unknown baseline sessions {missing}", fix="pass ids of sessions in this TraceLake"
        )
    if len({(r["model_slug"], r["target"]) for r in rows}) > 1:
        raise AacoInputError(
            "the baseline sessions mix models or targets",
            fix="choose sessions of one model on one target",
        )
    return Reference(source, name, rows[0]["model_slug"], rows[0]["target"], tuple(ids))


def _pinned(lake: TraceLake, row: dict) -> Reference | None:
    b = pinned_baseline(lake, row["slug"], row["target"])
    return Reference("pinned", b.name, b.model_slug, b.target, b.session_ids) if b else None


def _previous(lake: TraceLake, row: dict) -> Reference:
    ids = lake.query(
        "SELECT session_id FROM sessions WHERE model_slug = $slug AND target = $target "
        "AND latency_p50_ns IS NOT NULL AND (started_at < $at OR "
        "(started_at = $at AND session_id < $sid)) ORDER BY started_at DESC, session_id DESC "
        "LIMIT $n",
        {**row, "n": PREVIOUS_SESSIONS},
    )["session_id"].to_pylist()
    if not ids:
        raise AacoInputError(
            f"no baseline for {row['slug']} on {row['target']}: no pinned baseline and no "
            f"earlier session than {row['sid']}",
            fix="measure the model again, or pass --baseline NAME|SESSION",
        )
    name = f"previous {len(ids)} sessions"
    return Reference("previous", name, row["slug"], row["target"], tuple(ids[::-1]))


def _session_row(lake: TraceLake, session_id: str) -> dict:
    """The current session as the previous-sessions query's parameters."""
    return lake.query(
        "SELECT session_id AS sid, model_slug AS slug, target, started_at AS at "
        "FROM sessions WHERE session_id = ?",
        [session_id],
    ).to_pylist()[0]


# --- effects -------------------------------------------------------------------------------


def _effects(
    lake: TraceLake, reference: Reference, current: str, resamples: int, seed: int, tail: float
) -> tuple[dict, dict, np.ndarray, dict]:
    """p50 and throughput effects (%) with their CIs, from the bootstrap compare_to_baseline
    also uses; the bootstrap distribution of the p50 effect; and the sizes the bootstrap saw."""
    sampled = bootstrap_effects(lake, reference, current, resamples, seed)
    b, c, effects = sampled.baseline, sampled.current, sampled.effects
    latency = _effect(b[P50], c[P50], effects[:, P50], tail, "ms", 1e-6)
    throughput = _effect(b[THROUGHPUT], c[THROUGHPUT], effects[:, THROUGHPUT], tail, "per_s", 1.0)
    return latency, throughput, effects[:, P50], sampled.sizes


def _effect(
    before: float, after: float, samples: np.ndarray, tail: float, unit: str, scale: float
) -> dict:
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return {
        "effect_pct": float((after - before) / before * 100.0),
        "ci_low": float(low),
        "ci_high": float(high),
        f"baseline_{unit}": float(before * scale),
        f"current_{unit}": float(after * scale),
    }


# --- reporting --------------------------------------------------------------------------------


def _evidence(
    low: float,
    high: float,
    effect: float,
    threshold: float,
    confidence: float,
    resamples: int,
    sizes: dict,
) -> dict:
    if high < 0.0:
        decided_by = "faster"  # the CI excludes 0 on the faster side
    elif low <= 0.0:
        decided_by = "ci_includes_zero"
    elif effect < threshold:
        decided_by = "below_threshold"
    else:
        decided_by = "ci_and_threshold"  # a regression
    return {
        "decided_by": decided_by,
        "test": f"hierarchical bootstrap {confidence:.0%} CI of the p50 effect, {resamples} "
        "resamples (baseline sessions, then iterations; current iterations)",
        **sizes,
    }


def _noise_pct(top: Suspect, baseline_ms: float) -> float | None:
    """The baseline's session-to-session sd of p50 (root cause's sigma), in % of the p50."""
    sigma = top.detail.get("sigma_ms")
    return float(sigma / baseline_ms * 100.0) if sigma is not None and baseline_ms else None


def _suspect(s: Suspect) -> dict:
    return {
        "kind": s.kind,
        "name": s.name,
        "before": s.before,
        "after": s.after,
        "posterior": s.posterior,
        "share": s.share,
        "explained_ms": s.explained_ms,
    }

"""The CI gate: one answer to "is this session a regression against its baseline?", shaped for a
CI job (regression, severity, confidence, each metric's change with its CI and decision, suspected
cause, what to do next). How it decides (the metrics, the Bonferroni-held bootstrap CIs, the
noise floors, severity, confidence, which baseline) is docs/concepts/gate.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.drift.series import GATED_METRICS, NOISE_FLOORS
from aaco_pipelines.governance.drift.session_bootstrap import (
    ITERATION_FIGURES,
    REQUEST_FIGURES,
    EffectSamples,
    bootstrap_effects,
    bootstrap_request_effects,
)
from aaco_pipelines.governance.gate.baselines import (
    check_comparable,
    list_baselines,
    pinned_baseline,
)
from aaco_pipelines.governance.gate.generation_effects import generation_effects
from aaco_pipelines.governance.gate.root_cause import explain_change
from aaco_pipelines.governance.gate.suspect import Suspect
from aaco_pipelines.tracelake.queries import resolve_session
from aaco_pipelines.tracelake.store import TraceLake

PREVIOUS_SESSIONS = 5  # the baseline when nothing names one and none is pinned
SEVERITY_BANDS = ((5.0, "critical"), (2.0, "major"), (1.0, "minor"))  # multiples of threshold
TOP_SUSPECTS = 3
# Moved by a preempted iteration where the median is not: on a suspect measurement, "uncertain".
TAIL_METRICS = ("latency_p99_ns", "throughput_per_s")
METRIC_UNITS = {  # metric -> (name in the figures, scale from the stored unit)
    "latency_p50_ns": ("ms", 1e-6),
    "latency_p99_ns": ("ms", 1e-6),
    "throughput_per_s": ("per_s", 1.0),
    "ttft_p50_ns": ("ms", 1e-6),
    "tpot_p50_ns": ("ms", 1e-6),
}

RECOMMENDATIONS = {
    "model_version": "bisect the model change ({before} -> {after}): compare the two versions' "
    "graphs and op times to find the layer that got slower",
    "runtime": "pin ROCm / ONNX Runtime / the driver to the baseline's version ({before}) and "
    "re-run to confirm the runtime upgrade ({after}) is the cause",
    "execution_provider": "check why the execution providers changed ({before} -> {after}): a "
    "provider that fails to load falls back to a slower one",
    "clocks": "check throttling and the power cap ({name}: {before} -> {after}), then re-run on "
    "an idle, cool device",
    "host_contention": "decide side by side (aaco diff --paired), or measure again with the host "
    "to itself: other processes took {before} of its CPU while the baseline was measured and "
    "{after} while this session was",
    "op_time": "profile op type {name} ({before} -> {after} per iteration): its kernels or "
    "their selection changed",
    "fusion_change": "restore the fusion ({name}; {before} -> {after}): check the sidecar's "
    "graph_optimization_level and disabled_optimizers, then the runtime and the model's "
    "pattern; aaco diff --structure shows every fusion that changed",
    "kernel_count": "find why {name} launches more kernels ({before} -> {after}): a fusion or "
    "graph optimization may have been lost",
    "kernel_hardware": "compare kernel {name} as the hardware counted it ({before} -> {after}): "
    "it does more work or runs fewer waves than before (a different tile size, register "
    "allocation or algorithm)",
    "new_kernels": "inspect the kernels only this session runs ({name}): a different kernel "
    "choice or a fallback path",
    "vanished_kernels": "inspect the kernels this session no longer runs ({name}): a fast path "
    "may have been lost",
    "noise": "decide side by side (aaco diff --paired), or re-run; the difference is within "
    "session-to-session noise (more iterations or --laboratory make the next verdict sharper)",
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
    # every gated metric the session has: its change, CI, threshold and decision (MetricDecision)
    metrics: dict[str, dict] = field(default_factory=dict)
    # the side-by-side re-measurement that decided instead, when asked for (governance.gate.paired)
    paired: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def regressed(self) -> list[str]:
        """The metrics that regressed, worst first."""
        return list(self.evidence.get("decided_on", []))

    @property
    def uncertain(self) -> list[str]:
        """The metrics that would have regressed on a measurement not judged suspect."""
        return [m for m, d in self.metrics.items() if d["decision"] == "uncertain"]


@dataclass(frozen=True)
class MetricDecision:
    """One gated metric's change: the effect in % with its CI, the threshold it was held to
    (the gate's, or the metric's noise floor), the bootstrap probability of a regression and
    the decision: regression | uncertain | below_threshold | no_change | improvement."""

    metric: str
    higher_is_worse: bool
    baseline: float
    current: float
    effect_pct: float
    ci_low: float
    ci_high: float
    threshold_pct: float
    p_regression: float
    decision: str
    severity: str


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
    suspect = suspect_measurements(lake, [current, *reference.session_ids])
    samples = _bootstrapped(lake, reference, current, resamples, seed)
    metrics = decide_metrics(samples, threshold_pct, confidence, current_suspect=current in suspect)
    regressed = [m for m in metrics.values() if m.decision == "regression"]
    worst = max(regressed, key=_badness, default=None)
    p50 = metrics["latency_p50_ns"]
    suspects = explain_change(lake, reference.session_ids, current)
    return GateVerdict(
        regression=worst is not None,
        severity=worst.severity if worst else "none",
        confidence=worst.p_regression if worst else _confidence_of_none(metrics),
        session_id=current,
        model_slug=reference.model_slug,
        target=reference.target,
        threshold_pct=threshold_pct,
        baseline=asdict(reference) | {"n_sessions": len(reference.session_ids)},
        latency_delta_pct=_figure(p50),
        throughput_delta_pct=_figure(metrics["throughput_per_s"]),
        suspected_cause=_suspect(suspects[0]),
        suspects=[_suspect(s) for s in suspects[:TOP_SUSPECTS]],
        evidence=_evidence(p50, confidence, resamples, samples)
        | {
            "decided_on": [m.metric for m in sorted(regressed, key=_badness, reverse=True)],
            "noise_sd_pct": _noise_pct(suspects[0], p50.baseline * 1e-6),
        },
        recommendation=recommendation(worst, suspects[0], metrics),
        generation=generation_effects(lake, list(reference.session_ids), current),
        suspect_measurements=suspect,
        metrics={name: asdict(m) for name, m in metrics.items()},
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


def recommendation(worst: MetricDecision | None, top: Suspect, metrics: dict) -> str:
    """One sentence: what to do about the most probable cause, or why nothing needs doing."""
    if worst is not None:
        text = RECOMMENDATIONS.get(top.kind, RECOMMENDATIONS["unexplained"])
        return text.format(name=top.name, before=top.before or "-", after=top.after or "-")
    uncertain = [m for m in metrics.values() if m.decision == "uncertain"]
    if uncertain:
        changes = ", ".join(f"{metric_label(m.metric)} {m.effect_pct:+.1f} %" for m in uncertain)
        return (
            f"measure again on a quiet host, or side by side (aaco diff --paired): {changes} "
            "rests on a measurement judged suspect"
        )
    p50 = metrics["latency_p50_ns"]
    effect, low, high = p50.effect_pct, p50.ci_low, p50.ci_high
    if high < 0.0:
        return f"no action: the session is faster ({effect:+.1f} % p50)"
    if low <= 0.0:
        return f"no action: the p50 change ({effect:+.1f} %) is within the confidence interval of 0"
    return (
        f"no action: the p50 slowdown ({effect:+.1f} %) is below the {p50.threshold_pct:g} % "
        "threshold"
    )


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


def _bootstrapped(
    lake: TraceLake, reference: Reference, current: str, resamples: int, seed: int
) -> dict[str, tuple[EffectSamples, int]]:
    """metric -> (its bootstrap, its column there), for every gated metric the session has."""
    sampled = bootstrap_effects(lake, reference, current, resamples, seed, NOISE_FLOORS)
    out = {metric: (sampled, i) for i, metric in enumerate(ITERATION_FIGURES)}
    scenario = lake.query(
        "SELECT scenario FROM session_records WHERE session_id = $sid", {"sid": current}
    )["scenario"][0].as_py()
    if scenario is not None:
        requests = bootstrap_request_effects(
            lake, reference.session_ids, current, scenario, resamples, seed, NOISE_FLOORS
        )
        for i, metric in enumerate(REQUEST_FIGURES if requests else ()):
            if np.isfinite(requests.baseline[i]) and np.isfinite(requests.current[i]):
                out[metric] = (requests, i)
    return {metric: out[metric] for metric in GATED_METRICS if metric in out}


def decide_metrics(
    samples: dict[str, tuple[EffectSamples, int]],
    threshold_pct: float,
    confidence: float,
    current_suspect: bool = False,
) -> dict[str, MetricDecision]:
    """Each metric's decision (see the module docstring)."""
    tail = (1.0 - confidence) / 2.0 / len(samples)  # Bonferroni: any metric may fail the build
    decisions = {}
    for metric, (sampled, column) in samples.items():
        worse = ITERATION_FIGURES.get(metric, REQUEST_FIGURES.get(metric, True))
        threshold = max(threshold_pct, NOISE_FLOORS.get(metric, 0.0) * 100.0)
        effects = sampled.effects[:, column]
        effects = effects[np.isfinite(effects)]
        low, high = (float(v) for v in np.quantile(effects, [tail, 1.0 - tail]))
        before, after = float(sampled.baseline[column]), float(sampled.current[column])
        effect = (after - before) / before * 100.0
        sign = 1.0 if worse else -1.0  # effects measured towards "worse"
        p_regression = float(np.mean(sign * effects >= threshold))
        decision = decide(sign * effect, sorted((sign * low, sign * high)), threshold)
        if decision == "regression" and current_suspect and metric in TAIL_METRICS:
            decision = "uncertain"
        decisions[metric] = MetricDecision(
            metric, worse, before, after, effect, low, high, threshold, p_regression, decision,
            severity(sign * effect, threshold) if decision == "regression" else "none",
        )  # fmt: skip
    return decisions


def decide(worse_effect: float, worse_ci: list[float], threshold: float) -> str:
    """A change towards worse (effect and CI in %, + is worse) against its threshold."""
    low, high = worse_ci
    if high < 0.0:
        return "improvement"
    if low <= 0.0:
        return "no_change"
    return "regression" if worse_effect >= threshold else "below_threshold"


SEVERITY_RANK = {"none": 0, "minor": 1, "major": 2, "critical": 3}


def _badness(m: MetricDecision) -> tuple[int, float]:
    """Worse: a higher severity, then a larger effect in multiples of its threshold."""
    worse_effect = m.effect_pct if m.higher_is_worse else -m.effect_pct
    return SEVERITY_RANK[m.severity], worse_effect / m.threshold_pct


def _confidence_of_none(metrics: dict[str, MetricDecision]) -> float:
    """No regression: the least probability, over the metrics, that it did not regress."""
    return min(1.0 - m.p_regression for m in metrics.values())


def _figure(m: MetricDecision) -> dict:
    """The effect as latency_delta_pct / throughput_delta_pct have always carried it."""
    unit, scale = METRIC_UNITS[m.metric]
    return {
        "effect_pct": m.effect_pct,
        "ci_low": m.ci_low,
        "ci_high": m.ci_high,
        f"baseline_{unit}": m.baseline * scale,
        f"current_{unit}": m.current * scale,
    }


def metric_label(metric: str) -> str:
    """A gated metric as a verdict names it: p50, p99, throughput, TTFT p50, TPOT p50."""
    return {
        "latency_p50_ns": "p50",
        "latency_p99_ns": "p99",
        "throughput_per_s": "throughput",
        "ttft_p50_ns": "TTFT p50",
        "tpot_p50_ns": "TPOT p50",
    }[metric]


# --- reporting --------------------------------------------------------------------------------


def _evidence(
    p50: MetricDecision,
    confidence: float,
    resamples: int,
    samples: dict[str, tuple[EffectSamples, int]],
) -> dict:
    """How the p50 was decided (decided_by), the test, and the sizes each bootstrap saw."""
    decided_by = {
        "improvement": "faster",  # the CI excludes 0 on the faster side
        "no_change": "ci_includes_zero",
        "below_threshold": "below_threshold",
        "regression": "ci_and_threshold",
    }[p50.decision]
    sizes = {}
    for sampled, _ in samples.values():
        sizes |= sampled.sizes
    return {
        "decided_by": decided_by,
        "test": f"hierarchical bootstrap CIs of each metric's effect, {confidence:.0%} together "
        f"(Bonferroni over {len(samples)} metrics), {resamples} resamples (baseline sessions, then "
        "iterations or requests; the current session's, with the session-to-session spread)",
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

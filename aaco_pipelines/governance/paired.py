"""The gate's side-by-side decision: the baseline's model version and the current one measured
again together, interleaved on this host now, and judged on that paired comparison.

Two sessions measured apart compare the host at two moments as much as the two versions: on a
busy host an unchanged model is "slower" whenever a neighbour woke up. Side by side
(execution.side_by_side), each round holds a block of each version run back to back, so the host
hits both alike; a round's effect is the ratio of its two medians (and of its two means, for
throughput), and the verdict rests on the median of the rounds' effects with a bootstrap CI over
rounds. A regression needs what the gate always asks: the CI clear of 0 on the slower side and
the effect at least the threshold. Where the rounds do not settle it (the interval reaches from
under the threshold to over it, a regression's included), as many rounds again are measured, up
to BATCHES batches.

Version A is the one the baseline's most recent session measured (its bundle's request.json: the
content-addressed model snapshot, inputs, providers, optimization level), version B the current
session's. They may be the same version: then the answer is whether the current session's change
came from the host, not the model.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.side_by_side import DEFAULT_ROUNDS, SideBySide, measure_side_by_side
from aaco_pipelines.governance.gate import GateVerdict, decide, severity
from aaco_pipelines.graph.store import stored_snapshot
from aaco_pipelines.tracelake.store import TraceLake

RESAMPLES = 4000
# Unsettled after its rounds (settled()), the comparison measures that many rounds again, up to
# BATCHES times in all, and decides on all of them: more rounds only where they are needed.
BATCHES = 3
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a folder name, never a path


@dataclass(frozen=True)
class PairedComparison:
    """The side-by-side measurement's figures and decision (as a gated metric's)."""

    baseline_session: str  # whose model version ran as A
    baseline_sha256: str
    current_sha256: str
    rounds: int
    block_iterations: int
    order: str
    latency_p50: dict  # effect_pct, ci_low, ci_high, baseline_ms, current_ms
    throughput: dict  # effect_pct, ci_low, ci_high, baseline_per_s, current_per_s
    threshold_pct: float
    p_regression: float
    decision: str  # regression | below_threshold | no_change | improvement
    severity: str


def unsure(verdict: GateVerdict) -> str | None:
    """Why the stored sessions cannot settle the verdict (None when they can): it is a
    regression or an uncertain one (on a busy host, a session in a slow moment looks like
    one), or the p50's interval is wider than the threshold (a change of the threshold's
    size could hide in it). `aaco diff --paired auto` decides side by side only then."""
    if verdict.regression:
        return "the stored sessions say regression"
    if verdict.uncertain:
        return "the stored sessions' verdict is uncertain"
    p50 = verdict.metrics["latency_p50_ns"]
    if (p50["ci_high"] - p50["ci_low"]) / 2.0 > p50["threshold_pct"]:
        return (
            f"the stored sessions' p50 interval (+-{(p50['ci_high'] - p50['ci_low']) / 2:.1f} %) "
            f"is wider than the {p50['threshold_pct']:g} % threshold"
        )
    return None


def judge_side_by_side(
    verdict: GateVerdict,
    lake: TraceLake,
    paths: AacoPaths,
    *,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = 0.95,
    seed: int = 0,
) -> GateVerdict:
    """The verdict decided again on a side-by-side measurement of the two versions: its
    regression, severity and confidence are the paired comparison's, the stored sessions'
    figures stay beside it."""
    a_session = _newest_with_bundle(lake, paths, verdict.baseline["session_ids"])
    request_a = _request(paths, a_session)
    request_b = _request(paths, verdict.session_id)
    measured = measure_side_by_side(request_a, request_b, rounds=rounds)
    for batch in range(BATCHES):
        paired = paired_comparison(
            measured, verdict.threshold_pct, confidence, seed,
            a_session, request_a["model_sha256"], request_b["model_sha256"],
        )  # fmt: skip
        if settled(paired) or batch == BATCHES - 1:
            break
        measured = measured.extended(measure_side_by_side(request_a, request_b, rounds=rounds))
    regression = paired.decision == "regression"
    return dataclasses.replace(
        verdict,
        regression=regression,
        severity=paired.severity,
        confidence=paired.p_regression if regression else 1.0 - paired.p_regression,
        evidence=verdict.evidence | {"decided_on": ["side_by_side"] if regression else []},
        paired=asdict(paired),
        recommendation=verdict.recommendation if regression else _calm(paired),
    )


def paired_comparison(
    measured: SideBySide,
    threshold_pct: float,
    confidence: float,
    seed: int,
    baseline_session: str,
    baseline_sha256: str,
    current_sha256: str,
) -> PairedComparison:
    """The rounds' paired effects, their median, its CI and the decision."""
    a_p50 = np.array([np.median(r) for r in measured.a])
    b_p50 = np.array([np.median(r) for r in measured.b])
    a_mean = np.array([r.mean() for r in measured.a])
    b_mean = np.array([r.mean() for r in measured.b])
    latency = (b_p50 / a_p50 - 1.0) * 100.0  # per round, + is slower
    throughput = (a_mean / b_mean - 1.0) * 100.0  # per round, - is slower
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, latency.size, size=(RESAMPLES, latency.size))
    tail = (1.0 - confidence) / 2.0
    latency_resampled = np.median(latency[picks], axis=1)
    low, high = (float(v) for v in np.quantile(latency_resampled, [tail, 1.0 - tail]))
    t_low, t_high = np.quantile(np.median(throughput[picks], axis=1), [tail, 1.0 - tail])
    effect = float(np.median(latency))
    decision = decide(effect, [low, high], threshold_pct)
    return PairedComparison(
        baseline_session=baseline_session,
        baseline_sha256=baseline_sha256,
        current_sha256=current_sha256,
        rounds=latency.size,
        block_iterations=measured.block_iterations,
        order=measured.order,
        latency_p50={
            "effect_pct": effect, "ci_low": low, "ci_high": high,
            "baseline_ms": float(np.median(a_p50)) / 1e6,
            "current_ms": float(np.median(b_p50)) / 1e6,
        },
        throughput={
            "effect_pct": float(np.median(throughput)),
            "ci_low": float(t_low), "ci_high": float(t_high),
            "baseline_per_s": 1e9 / float(np.median(a_mean)),
            "current_per_s": 1e9 / float(np.median(b_mean)),
        },
        threshold_pct=threshold_pct,
        p_regression=float(np.mean(latency_resampled >= threshold_pct)),
        decision=decision,
        severity=severity(effect, threshold_pct) if decision == "regression" else "none",
    )  # fmt: skip


def settled(paired: PairedComparison) -> bool:
    """Whether the rounds decide it: an improvement, or an interval wholly on one side of the
    threshold. One that reaches from under the threshold to over it could hold a change of the
    threshold's size or none (20 rounds of a ~10 % slower version gave [-2.5, +17.0] % once in
    ten on the CI host; an unchanged one was called a regression once in fifty)."""
    p50 = paired.latency_p50
    if paired.decision == "improvement":
        return True
    return p50["ci_high"] < paired.threshold_pct or p50["ci_low"] >= paired.threshold_pct


def _calm(paired: PairedComparison) -> str:
    p50 = paired.latency_p50
    return (
        f"no action: side by side, the current version's p50 is {p50['effect_pct']:+.1f} % "
        f"[{p50['ci_low']:+.1f}, {p50['ci_high']:+.1f}] of the baseline's ({paired.rounds} "
        "rounds): the stored sessions' difference was the host's, or below the threshold"
    )


def _newest_with_bundle(lake: TraceLake, paths: AacoPaths, session_ids: list[str]) -> str:
    rows = lake.query(
        "SELECT session_id FROM sessions WHERE list_contains($ids, session_id) "
        "ORDER BY started_at DESC",
        {"ids": list(session_ids)},
    )["session_id"].to_pylist()
    for session_id in rows:
        if _session_folder(paths, session_id) is not None:
            return session_id
    raise AacoInputError(
        "none of the baseline's sessions has its session folder any more: its model version "
        "cannot be measured again",
        path=paths.sessions,
        fix="choose a baseline whose sessions are still under sessions/ (--baseline)",
    )


def _request(paths: AacoPaths, session_id: str) -> dict:
    """A session's request.json, pointed at its model snapshot in this home's store (found by
    the content hash it names, never by the path it names)."""
    folder = _session_folder(paths, session_id)
    if folder is None:
        raise AacoInputError(
            f"session {session_id} has no session folder under {paths.sessions}",
            fix="compare a session measured in this AACO_HOME",
        )
    request = json.loads((folder / "request.json").read_text())
    if request.get("generation"):
        raise AacoInputError(
            f"session {session_id} generated text: a side-by-side comparison runs forward "
            "passes only",
            fix="compare generation sessions with --paired never",
        )
    snapshot = stored_snapshot(paths.home / "models", str(request.get("model_sha256", "")))
    if snapshot is None:
        raise AacoInputError(
            f"the model version session {session_id} measured is no longer in the model store",
            path=paths.home / "models",
            fix="compare with a baseline whose model version is still stored",
        )
    return {**request, "model_path": str(snapshot)}


def _session_folder(paths: AacoPaths, session_id: str) -> Path | None:
    """sessions/<date>/<session_id> in this home, when it holds a request.json."""
    if not SESSION_ID.fullmatch(session_id) or not paths.sessions.is_dir():
        return None
    for day in paths.sessions.iterdir():
        if (day / session_id / "request.json").is_file():
            return day / session_id
    return None

"""The gate's side-by-side decision: the baseline's model version and the current one measured
again together, interleaved on this host now, and judged on that paired comparison.

Two sessions measured apart compare the host at two moments as much as the two versions: on a
busy host an unchanged model is "slower" whenever a neighbour woke up. Side by side
(execution.side_by_side), each round holds a block of each version run back to back, so the host
hits both alike. A round's effect is the ratio of its two medians (and of its two means, for
throughput); two consecutive rounds (A B, then B A) make one pair, whose effect is their
geometric mean: the block that runs second in a round is a few % slower (measured +3.4 % and
-4.4 % for the two orders of one unchanged model), and the mirrored pair cancels it. The verdict
rests on the median of the pairs' effects with a bootstrap CI over pairs.

A regression needs what the gate always asks, the CI clear of 0 on the slower side and the
effect at least the threshold, and one thing more: a second measuring process that finds it too
(each process's own effect at least half the threshold). Within one process the two versions'
sessions differ by a few % for reasons of their own (memory placement, thread pools: +-1.8 %
from process to process for one unchanged model on a quiet host, +-3.4 % on a busy one), the
same in every round, so no number of rounds in one process tells that from a change. Where the
pairs do not settle it (the interval reaches from under the threshold to over it, an unconfirmed
regression's included), as many rounds again are measured by a new process, up to BATCHES.

Version A is the one the baseline's most recent session measured (its bundle's request.json: the
content-addressed model snapshot, inputs, providers, optimization level), version B the current
session's. They may be the same version: then the answer is whether the current session's change
came from the host, not the model.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from aaco_pipelines.bundle.manifest import home_bundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.side_by_side import DEFAULT_ROUNDS, SideBySide, measure_side_by_side
from aaco_pipelines.governance.gate.decision import GateVerdict, decide, severity
from aaco_pipelines.graph.store import stored_snapshot
from aaco_pipelines.tracelake.store import TraceLake

RESAMPLES = 4000
# Unsettled after its rounds (settled()), the comparison measures that many rounds again in a new
# process, up to BATCHES batches in all, and decides on all of them: more rounds only where
# they are needed, and a second process for every regression.
BATCHES = 3
CONFIRMING_SHARE = 0.5  # of the threshold: each process's own effect, for a regression


@dataclass(frozen=True)
class PairedComparison:
    """The side-by-side measurement's figures and decision (as a gated metric's)."""

    baseline_session: str  # whose model version ran as A
    baseline_sha256: str
    current_sha256: str
    rounds: int
    block_iterations: int
    order: str
    processes: list  # each measuring process's rounds and p50 effect (%)
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


PAIRED_MODES = ("never", "auto", "always")


def settle(
    verdict: GateVerdict,
    lake: TraceLake,
    paths: AacoPaths,
    *,
    paired: str = "auto",
    asked: bool = False,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = 0.95,
    say=None,
) -> GateVerdict:
    """The gate's one side-by-side policy, for `aaco diff` and the Dagster drift asset alike:
    `never` keeps the stored sessions' verdict, `auto` measures side by side where they cannot
    settle it (unsure), `always` every time. Where the versions cannot be measured again the
    stored verdict stands and `say` hears why, unless side by side was `asked` for: then the
    error is the answer."""
    say = say or (lambda message: None)
    if paired not in PAIRED_MODES:
        raise AacoInputError(f"unknown side-by-side mode {paired!r}", fix="never, auto or always")
    reason = None if paired == "never" else "asked for" if paired == "always" else unsure(verdict)
    if reason is None:
        return verdict
    say(
        f"measuring {verdict.model_slug}'s baseline version and this session's side by side "
        f"({rounds} interleaved rounds): {reason}"
    )
    try:
        return judge_side_by_side(verdict, lake, paths, rounds=rounds, confidence=confidence)
    except AacoInputError as exc:
        if asked:
            raise
        say(f"cannot measure side by side ({exc.problem}): the stored sessions' verdict stands")
        return verdict


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
    request_a = session_request(paths, a_session)
    request_b = session_request(paths, verdict.session_id)
    paired = compared_until(
        request_a, request_b, verdict.threshold_pct, settled,
        rounds=rounds, confidence=confidence, seed=seed, baseline_session=a_session,
    )  # fmt: skip
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


def compared_until(
    request_a: dict,
    request_b: dict,
    threshold_pct: float,
    done: Callable[[PairedComparison], bool],
    *,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = 0.95,
    seed: int = 0,
    baseline_session: str = "baseline",
) -> PairedComparison:
    """The two requests measured side by side, then again by a new measuring process while
    `done` says the comparison is not settled, up to BATCHES processes; judged on all rounds."""

    def compare(measured: SideBySide) -> PairedComparison:
        return paired_comparison(
            measured, threshold_pct, confidence, seed, baseline_session,
            request_a.get("model_sha256", ""), request_b.get("model_sha256", ""),
        )  # fmt: skip

    measured = measure_side_by_side(request_a, request_b, rounds=rounds)
    for _ in range(BATCHES - 1):
        paired = compare(measured)
        if done(paired):
            return paired
        measured = measured.extended(measure_side_by_side(request_a, request_b, rounds=rounds))
    return compare(measured)


def paired_comparison(
    measured: SideBySide,
    threshold_pct: float,
    confidence: float,
    seed: int,
    baseline_session: str,
    baseline_sha256: str,
    current_sha256: str,
) -> PairedComparison:
    """The pairs' effects, their median, its CI and the decision."""
    a_p50 = np.array([np.median(r) for r in measured.a])
    b_p50 = np.array([np.median(r) for r in measured.b])
    a_mean = np.array([r.mean() for r in measured.a])
    b_mean = np.array([r.mean() for r in measured.b])
    batches = measured.process_rounds()
    rounds = np.log(b_p50 / a_p50)  # per round, + is slower
    latency = _pairs(rounds, batches)
    throughput = _pairs(np.log(a_mean / b_mean), batches)  # per pair, - is slower
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, latency.size, size=(RESAMPLES, latency.size))
    tail = (1.0 - confidence) / 2.0
    latency_resampled = _pct(np.median(latency[picks], axis=1))
    low, high = (float(v) for v in np.quantile(latency_resampled, [tail, 1.0 - tail]))
    t_low, t_high = np.quantile(_pct(np.median(throughput[picks], axis=1)), [tail, 1.0 - tail])
    effect = float(_pct(np.median(latency)))
    processes = _processes(rounds, batches)
    decision = decide(effect, [low, high], threshold_pct)
    if decision == "regression" and not _confirmed(processes, threshold_pct):
        decision = "uncertain"
    return PairedComparison(
        baseline_session=baseline_session,
        baseline_sha256=baseline_sha256,
        current_sha256=current_sha256,
        rounds=len(measured.a),
        block_iterations=measured.block_iterations,
        order=measured.order,
        processes=processes,
        latency_p50={
            "effect_pct": effect, "ci_low": low, "ci_high": high,
            "baseline_ms": float(np.median(a_p50)) / 1e6,
            "current_ms": float(np.median(b_p50)) / 1e6,
        },
        throughput={
            "effect_pct": float(_pct(np.median(throughput))),
            "ci_low": float(t_low), "ci_high": float(t_high),
            "baseline_per_s": 1e9 / float(np.median(a_mean)),
            "current_per_s": 1e9 / float(np.median(b_mean)),
        },
        threshold_pct=threshold_pct,
        p_regression=float(np.mean(latency_resampled >= threshold_pct)),
        decision=decision,
        severity=severity(effect, threshold_pct) if decision == "regression" else "none",
    )  # fmt: skip


def _pct(log_ratio):
    return (np.exp(log_ratio) - 1.0) * 100.0


def _pairs(log_ratios: np.ndarray, batches: tuple[int, ...]) -> np.ndarray:
    """Each process's rounds two by two (A B then B A), as the mean of their log ratios; a
    process's last round without a partner counts alone."""
    pairs, start = [], 0
    for count in batches:
        rounds = log_ratios[start : start + count]
        even = count - count % 2
        pairs.append((rounds[0:even:2] + rounds[1:even:2]) / 2.0)
        pairs.append(rounds[even:])
        start += count
    return np.concatenate(pairs)


def _processes(log_ratios: np.ndarray, batches: tuple[int, ...]) -> list[dict]:
    """Each measuring process's rounds and its own p50 effect (the median of its pairs)."""
    found, start = [], 0
    for count in batches:
        own = _pairs(log_ratios[start : start + count], (count,))
        found.append({"rounds": count, "effect_pct": float(_pct(np.median(own)))})
        start += count
    return found


def _confirmed(processes: list[dict], threshold_pct: float) -> bool:
    """A regression seen by two processes at least, each finding half the threshold or more."""
    floor = CONFIRMING_SHARE * threshold_pct
    return len(processes) >= 2 and all(p["effect_pct"] >= floor for p in processes)


def settled(paired: PairedComparison) -> bool:
    """Whether the measurement decides it: an improvement, an interval wholly under the
    threshold, or a confirmed regression whose interval is wholly over it. One that reaches from
    under the threshold to over it could hold a change of the threshold's size or none (20
    rounds of a ~10 % slower version gave [-2.5, +17.0] % once in ten on the CI host), and one
    process alone cannot tell a change from its two sessions' own difference."""
    p50 = paired.latency_p50
    if paired.decision == "improvement" or p50["ci_high"] < paired.threshold_pct:
        return True
    return paired.decision == "regression" and p50["ci_low"] >= paired.threshold_pct


def _calm(paired: PairedComparison) -> str:
    p50 = paired.latency_p50
    if paired.decision == "uncertain":
        each = ", ".join(f"{process['effect_pct']:+.1f} %" for process in paired.processes)
        return (
            f"measure again before acting: side by side, the current version's p50 is "
            f"{p50['effect_pct']:+.1f} % [{p50['ci_low']:+.1f}, {p50['ci_high']:+.1f}] of the "
            f"baseline's, but not in every measuring process ({each})"
        )
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
        if session_folder(paths, session_id) is not None:
            return session_id
    raise AacoInputError(
        "none of the baseline's sessions has its session folder any more: its model version "
        "cannot be measured again",
        path=paths.sessions,
        fix="choose a baseline whose sessions are still under sessions/ (--baseline)",
    )


def session_request(paths: AacoPaths, session_id: str) -> dict:
    """A session's request.json, pointed at its model snapshot in this home's store (found by
    the content hash it names, never by the path it names)."""
    folder = session_folder(paths, session_id)
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


def session_folder(paths: AacoPaths, session_id: str) -> Path | None:
    """sessions/<date>/<session_id> in this home, when it holds a request.json."""
    folder = home_bundle(paths.sessions, session_id)
    return folder if folder is not None and (folder / "request.json").is_file() else None

"""The search: each candidate in the diagnosis's order, checked correct, screened, then raced.

Per candidate: its request (the baseline's with the sidecar changes, or the rewritten model);
its outputs against the baseline's (tuning.accuracy), a candidate that moved them rejected
before any timing; a short side-by-side screen, a candidate not faster there dropped; then the
full race (tuning.race). The search stops when the budget is spent, saying which candidates it
did not try. The best is the accepted candidate with the highest lower bound of its speedup:
the one most surely faster, not the one that looked fastest once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aaco_pipelines.bundle.manifest import file_digest
from aaco_pipelines.registry.accuracy_limits import DEFAULT_LIMITS, AccuracyLimits
from aaco_pipelines.tuning.accuracy import compare_outputs, fixed_seed_inputs, run_outputs
from aaco_pipelines.tuning.candidates import GRAPH, Candidate
from aaco_pipelines.tuning.race import FASTER, Race, race
from aaco_pipelines.tuning.rewrites import rewrite_model

SCREEN_ROUNDS = 4  # two mirrored pairs: enough to drop what is not faster at all
RACE_ROUNDS = 20
REJECTED_INACCURATE, FAILED, NOT_FASTER, NOT_TRIED = (
    "inaccurate", "failed", "not_faster_at_screening", "not_tried",
)  # fmt: skip


@dataclass(frozen=True)
class Tried:
    """One candidate's outcome: its verdict (a race's, or why it was never raced) and figures."""

    name: str
    config: dict  # the sidecar keys it changes, or {"rewrite": ...}
    verdict: str
    reason: str
    speedup: float | None = None
    ci: tuple[float, float] | None = None
    accuracy: dict = field(default_factory=dict)
    model_path: str | None = None  # the rewritten model (graph candidates)


@dataclass(frozen=True)
class SearchResult:
    tried: list[Tried]
    best: Tried | None
    spent_s: float

    @property
    def verdict(self) -> str:
        return "improved" if self.best else "no_improvement"


def search(
    baseline: dict,
    candidates: Sequence[Candidate],
    work_dir: Path,
    *,
    threshold_pct: float = 3.0,
    limits: AccuracyLimits = DEFAULT_LIMITS,
    budget_s: float = 600.0,
    rounds: int = RACE_ROUNDS,
    say: Callable[[str], None] | None = None,
) -> SearchResult:
    """Try `candidates` in order against the baseline's measuring request (its model, inputs
    and configuration); `work_dir` holds the rewritten models."""
    say = say or (lambda line: None)
    started = time.monotonic()
    model = Path(baseline["model_path"])
    inputs = fixed_seed_inputs(model)
    reference = run_outputs(model, inputs, baseline)
    tried: list[Tried] = []
    for index, candidate in enumerate(candidates):
        if time.monotonic() - started > budget_s:
            tried += [_not_tried(c, budget_s) for c in candidates[index:]]
            break
        say(f"tune: {index + 1}/{len(candidates)} {candidate.name}")
        tried.append(
            _try(candidate, baseline, inputs, reference, work_dir, threshold_pct, limits, rounds)
        )
        say(f"tune:   {tried[-1].reason}")
    accepted = [t for t in tried if t.verdict == FASTER]
    best = max(accepted, key=lambda t: t.ci[0]) if accepted else None
    return SearchResult(tried, best, time.monotonic() - started)


def _config(candidate: Candidate) -> dict:
    """What a candidate changes, as its report says it: sidecar keys, or the rewrite."""
    return dict(candidate.changes) or {"rewrite": candidate.rewrite}


def _try(candidate, baseline, inputs, reference, work_dir, threshold_pct, limits, rounds) -> Tried:
    config = _config(candidate)
    request, made = _request(candidate, baseline, work_dir)
    if request is None:
        return Tried(candidate.name, config, FAILED, made)
    try:
        outputs = run_outputs(Path(request["model_path"]), inputs, request)
    except Exception as error:  # noqa: BLE001 - a candidate the runtime refuses fails alone
        return Tried(candidate.name, config, FAILED, f"does not load: {_line(error)}")
    checked = compare_outputs(reference, outputs, limits)
    path = request["model_path"] if candidate.kind == GRAPH else None
    if not checked.passed:
        return Tried(candidate.name, config, REJECTED_INACCURATE, checked.reason,
                     accuracy=checked.figures(), model_path=path)  # fmt: skip
    screen = race(baseline, request, threshold_pct, rounds=SCREEN_ROUNDS)
    if screen.paired.latency_p50["effect_pct"] >= 0:
        return Tried(candidate.name, config, NOT_FASTER, f"at screening: {screen.reason}",
                     screen.speedup, screen.ci, checked.figures(), path)  # fmt: skip
    raced: Race = race(baseline, request, threshold_pct, rounds=rounds)
    return Tried(candidate.name, config, raced.verdict, raced.reason, raced.speedup, raced.ci,
                 checked.figures(), path)  # fmt: skip


def _request(candidate: Candidate, baseline: dict, work_dir: Path) -> tuple[dict | None, str]:
    """The candidate's measuring request, or None and why not."""
    if candidate.kind != GRAPH:
        return {**baseline, **candidate.changes}, ""
    made = rewrite_model(Path(baseline["model_path"]), candidate.rewrite, work_dir)
    if made.path is None:
        return None, made.reason
    sha = file_digest(made.path)["sha256"]
    return {**baseline, "model_path": str(made.path), "model_sha256": sha}, ""


def _not_tried(candidate: Candidate, budget_s: float) -> Tried:
    return Tried(
        candidate.name, _config(candidate), NOT_TRIED, f"the {budget_s:g} s budget was spent"
    )


def _line(error: Exception) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]

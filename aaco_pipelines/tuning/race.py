"""A candidate raced against the baseline side by side: faster only if the gate would say so.

The race is the gate's side-by-side measurement turned the other way (governance.gate.paired):
the baseline's request and the candidate's run in one measuring process, interleaved in
mirrored rounds, and the pairs' effects decide. A candidate is faster only when the p50
interval lies wholly on the faster side, the effect is at least the threshold, and a second
measuring process finds it too (each at least half the threshold): within one process two
configurations differ by a few % for reasons of their own (memory placement, thread pools), the
same in every round. That is what keeps a tuner from recommending the luck of one process.
"""

from __future__ import annotations

from dataclasses import dataclass

from aaco_pipelines.execution.side_by_side import DEFAULT_ROUNDS
from aaco_pipelines.governance.gate.paired import (
    CONFIRMING_SHARE,
    PairedComparison,
    compared_until,
)

FASTER, NO_CHANGE, SLOWER, TOO_SMALL, UNCONFIRMED = (
    "faster", "no_change", "slower", "too_small", "unconfirmed",
)  # fmt: skip


@dataclass(frozen=True)
class Race:
    """The race's verdict, the candidate's speedup (baseline p50 / candidate p50) with its
    interval, why in one line, and the paired comparison it rests on."""

    verdict: str  # faster | no_change | slower | too_small | unconfirmed
    speedup: float
    ci: tuple[float, float]
    reason: str
    paired: PairedComparison

    @property
    def accepted(self) -> bool:
        return self.verdict == FASTER


def race(
    baseline: dict,
    candidate: dict,
    threshold_pct: float,
    *,
    rounds: int = DEFAULT_ROUNDS,
    confidence: float = 0.95,
    seed: int = 0,
) -> Race:
    """Race the candidate's request against the baseline's (session requests, as measuring
    takes them), with a second measuring process wherever the first finds it faster, and more
    (up to BATCHES processes) while the interval straddles the threshold."""
    paired = compared_until(
        baseline,
        candidate,
        threshold_pct,
        _settled,
        rounds=rounds,
        confidence=confidence,
        seed=seed,
    )
    return judged(paired)


def judged(paired: PairedComparison) -> Race:
    """The verdict of a paired comparison read for a candidate (a negative effect is faster)."""
    p50 = paired.latency_p50
    effect, low, high = p50["effect_pct"], p50["ci_low"], p50["ci_high"]
    speedup = 100.0 / (100.0 + effect)
    ci = (100.0 / (100.0 + high), 100.0 / (100.0 + low))  # a faster candidate: high < 0
    threshold = paired.threshold_pct
    shown = f"p50 {effect:+.1f} % (95 % CI {low:+.1f} % to {high:+.1f} %)"
    if low > 0:
        verdict, reason = SLOWER, f"slower: {shown}"
    elif high >= 0:
        verdict, reason = NO_CHANGE, f"no change: {shown}"
    elif -effect < threshold:
        verdict, reason = TOO_SMALL, f"faster by less than the {threshold:g} % threshold: {shown}"
    elif not _confirmed_faster(paired):
        effects = ", ".join(f"{p['effect_pct']:+.1f} %" for p in paired.processes)
        verdict = UNCONFIRMED
        reason = f"not confirmed by a second measuring process ({effects}): {shown}"
    else:
        verdict, reason = FASTER, f"faster: {shown}, in {len(paired.processes)} processes"
    return Race(verdict, speedup, ci, reason, paired)


def _confirmed_faster(paired: PairedComparison) -> bool:
    """Faster in two measuring processes at least, each by half the threshold or more."""
    floor = CONFIRMING_SHARE * paired.threshold_pct
    return len(paired.processes) >= 2 and all(-p["effect_pct"] >= floor for p in paired.processes)


def _settled(paired: PairedComparison) -> bool:
    """Whether another process could change the verdict: it can while the candidate looks
    faster but one process alone has said so, or its interval straddles the threshold."""
    p50 = paired.latency_p50
    if p50["ci_low"] > 0 or p50["ci_high"] >= 0:
        return True  # slower, or no change: another process would not make it faster
    if len(paired.processes) < 2:
        return False
    return _confirmed_faster(paired) and -p50["ci_high"] >= paired.threshold_pct

"""Bisection: which of the model versions between a good and a bad session made it slower.

The versions of one model, in the order they were first measured (each one's bytes are kept in
the model store), from the good session's to the bad session's. First the good and the bad
version are measured side by side (governance.gate.paired: interleaved rounds, mirrored pairs, a
bootstrap CI): that is the change to find. Then, as in `git bisect`, the version halfway between
the last known good and the first known bad one is measured side by side with the last known
good: it is bad when its slowdown is nearer the whole change than none, by the geometric
midpoint (a 2x change has its midpoint at 1.41x), good otherwise. An interval that straddles
the midpoint is measured again, in a new process, up to BATCHES times; if it still does, the
step says so (`clear` false) and the search goes on by its median. About log2(n) steps.

The search itself is here, over any `compare(a, b)`; stages.bisect measures and stores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Comparison:
    """B against A, side by side: p50 effect, % (+ is slower), its interval, rounds."""

    effect_pct: float
    ci_low: float
    ci_high: float
    rounds: int
    decision: str  # the paired gate's: regression | below_threshold | no_change | improvement


@dataclass(frozen=True)
class Step:
    version: str  # the model_sha256 measured
    position: int  # among the versions, 0 = the good session's
    against: str  # the last known good version it was measured with
    comparison: Comparison
    bad: bool
    clear: bool  # the interval lay wholly on one side of the midpoint


@dataclass(frozen=True)
class Bisection:
    versions: list[str]  # good's ... bad's
    change: Comparison  # the bad version against the good one
    steps: list[Step] = field(default_factory=list)
    status: str = "pinned"  # pinned | no_change (nothing to find) | unclear (a step was)
    last_good: str | None = None
    first_bad: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def midpoint_pct(change_pct: float) -> float:
    """Halfway between no change and the whole change, geometrically."""
    return (math.sqrt(1.0 + change_pct / 100.0) - 1.0) * 100.0


def bisect_versions(
    versions: list[str], compare: Callable[[str, str, float | None], Comparison]
) -> Bisection:
    """Find the first version whose p50 is nearer the bad one's than the good one's.
    `compare(a, b, midpoint)`: b measured side by side with a, more rounds while it is unsure
    which side of `midpoint` it lies (None: of a regression at all, for the whole change)."""
    if len(versions) < 2:
        raise ValueError("a bisection needs the good and the bad version")
    change = compare(versions[0], versions[-1], None)
    if change.decision != "regression":
        return Bisection(versions, change, status="no_change")
    half = midpoint_pct(change.effect_pct)
    low, high, steps = 0, len(versions) - 1, []
    while high - low > 1:
        middle = (low + high) // 2
        measured = compare(versions[low], versions[middle], half)
        bad = measured.effect_pct >= half
        clear = measured.ci_low >= half if bad else measured.ci_high < half
        steps.append(Step(versions[middle], middle, versions[low], measured, bad, clear))
        low, high = (low, middle) if bad else (middle, high)
    status = "pinned" if all(step.clear for step in steps) else "unclear"
    return Bisection(versions, change, steps, status, versions[low], versions[high])

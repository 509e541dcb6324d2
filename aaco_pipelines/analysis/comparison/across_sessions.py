"""Whether a session's findings hold from run to run: its top op and its class held against
those of the same model version's other sessions (same target and runtime, the nearest in
time, before or after: tracelake.queries.other_sessions).

One run's bootstrap (ranking_stability) and close calls (classification) see that run's
iterations, not the host from run to run. On a quiet host, five sessions of llama_decoder
named qk_matmul first three times and k_rotary/rotate_half twice, each settled within its own
run (first in every resample, nothing within the tie margin); five of the mlp were classed
compute-bound four times and balanced once, three of them naming no close call. So an op the
other sessions named first, or a class they gave, other than this session's is a rival across
sessions: the report and `aaco run` name it beside the finding, and say the finding changes
from run to run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

FINDINGS = {  # finding -> how the other sessions' differing ones are said
    "top_op": ("named {named} first", "the order changes from run to run"),
    "bottleneck": ("were classed {named}", "the class changes from run to run"),
}


def rivals(
    finding: str | None, others: list[str | None], said: Collection[str] = ()
) -> dict[str, int]:
    """The other sessions' findings other than this one, with how many gave each, most often
    first (sessions without the finding, e.g. not analysed, are left out; and those `said`
    already, as ops tied with the top op are)."""
    left_out = {finding, None, *said}
    return dict(Counter(o for o in others if o not in left_out).most_common())


def rivals_text(kind: str, found: dict[str, int], others: list[str | None]) -> str:
    """The rivals of a finding (`kind`: top_op or bottleneck) as the report and `aaco run` say
    them; the count is of the other sessions that have the finding at all."""
    having = sum(o is not None for o in others)
    verb, consequence = FINDINGS[kind]
    named = ", ".join(f"{name} ({count} of {having})" for name, count in found.items())
    return f"other sessions of this version {verb.format(named=named)}: {consequence}"

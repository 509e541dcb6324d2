"""A session's structural diff, computed once and kept: against the model's previous analysed
session on its target, by the drift stage, in `structural_diffs` (one row per judged session,
the diff as JSON, null for its first session). The report, the asset pages, root cause and
`aaco diff --structure` of that pair read it back instead of re-attributing two sessions'
kernels; a session judged before the table existed (schema v22) has no row, and is diffed
again when asked.
"""

from __future__ import annotations

import json

import pyarrow as pa

from aaco_pipelines.analysis.comparison.structural_diff import structural_diff
from aaco_pipelines.analysis.comparison.structure_records import (
    StructuralDiff,
    structural_diff_from_dict,
)
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.queries import previous_session, stored_structure_row
from aaco_pipelines.tracelake.schema import STRUCTURAL_DIFFS


def since_previous(lake, session_id: str) -> StructuralDiff | None:
    """The structural diff against the model's previous analysed session on the same target,
    computed now; None for its first session, or when the previous one cannot be compared
    (another model under the same name)."""
    previous = previous_session(lake, session_id)
    if previous is None:
        return None
    try:
        return structural_diff(lake, previous, session_id)
    except AacoInputError:
        return None


def structure_row(session_id: str, diff: StructuralDiff | None) -> pa.Table:
    """The `structural_diffs` row that keeps `diff` (None: nothing to compare with)."""
    row = {
        "session_id": session_id,
        "previous_session_id": diff.session_a if diff else None,
        "diff_json": json.dumps(diff.to_dict(), default=str) if diff else None,
    }
    return pa.Table.from_pylist([row], schema=STRUCTURAL_DIFFS)


def stored_since_previous(lake, session_id: str) -> StructuralDiff | None:
    """The diff the drift stage kept for the session; computed again only for a session judged
    before it was kept."""
    row = stored_structure_row(lake, session_id)
    if row is None:
        return since_previous(lake, session_id)
    return structural_diff_from_dict(json.loads(row["diff_json"])) if row["diff_json"] else None


def structure_between(lake, session_a: str, session_b: str) -> StructuralDiff:
    """B against A: the kept diff when A is the session B was judged against, else computed."""
    row = stored_structure_row(lake, session_b)
    if row is not None and row["diff_json"] and row["previous_session_id"] == session_a:
        return structural_diff_from_dict(json.loads(row["diff_json"]))
    return structural_diff(lake, session_a, session_b)

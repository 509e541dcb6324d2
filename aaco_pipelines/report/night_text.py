"""A night's sweep as people read it: the changes that survived, or not, the false discovery
rate's control (stages.review_night), for the nightly_review asset's page."""

from __future__ import annotations

from aaco_pipelines.report.markdown_tables import markdown_table


def night_changes_table(rows: list[dict]) -> str:
    """The night's changes with their verdicts before and after FDR and their p-values."""
    return markdown_table(
        rows,
        [
            ("model_slug", "model", None),
            ("metric", "metric", None),
            ("before", "before FDR", None),
            ("verdict", "after FDR", None),
            ("effect_pct", "effect %", lambda v: f"{v:+.2f}"),
            ("p_value", "p", lambda v: f"{v:.2g}"),
            ("p_adjusted", "BH-adjusted p", lambda v: f"{v:.2g}"),
        ],
    )

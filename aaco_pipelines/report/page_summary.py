"""The first thing an asset page says about a session, in plain text: its class (decided or
not, and why), whether its measurement can be trusted, and the first three things to do.

People read a page from the top and rarely open a collapsed entry: what the report's sections
say at length, this says in five lines, from the same report content.
"""

from __future__ import annotations

from aaco_pipelines.analysis.bottleneck.classification import class_line
from aaco_pipelines.report.section_model import measurement_line

TOP_ACTIONS = 3


def page_summary(content: dict) -> str:
    """Five lines at most: class, why undecided, measurement, the top actions."""
    report = content.get("bottleneck")
    lines = []
    if report is None:
        lines.append("Bottleneck: not classified yet (bottleneck_report judges it).")
    else:
        lines.append(f"Bottleneck: {class_line(report)}.")
        if report.get("decided") is False:
            lines.append(f"Not decided: {report['undecided_reason']}.")
    lines.append(measurement_line(content.get("measurement")))
    actions = (report or {}).get("recommendations") or []
    if actions:
        first = [f"{a['rank']}. {a['action']}" for a in actions[:TOP_ACTIONS]]
        lines.append("Do first: " + " ".join(first))
    return "\n".join(lines)

"""An excerpt of a session's report: the sections one stage produced, for its asset's page.

Each per-session Dagster asset shows, first, the session in five plain lines (page_summary),
then the report's own sections (kernel_attribution the time, bottleneck_report the bottleneck
and roofline, ...), rendered from the `Section`s the HTML and Markdown reports render, so a page
and the report never disagree. Tables come as cells of their brief columns (the UI shows table
metadata inline, and one wide table would widen every row of the page); the HTML report has
every column and every plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aaco_pipelines.report.content import report_content
from aaco_pipelines.report.data import read_report_data
from aaco_pipelines.report.markdown_tables import table_cells
from aaco_pipelines.report.page_summary import page_summary
from aaco_pipelines.report.plot_canvas import markdown_image
from aaco_pipelines.report.section_model import Section
from aaco_pipelines.report.sections import report_sections
from aaco_pipelines.report.session_plots import session_plots
from aaco_pipelines.tracelake.store import TraceLake


@dataclass(frozen=True)
class PageTable:
    """A report table as text cells (its brief columns), for a page's table metadata."""

    headers: list[str]
    rows: list[list[str]]


def report_excerpt(
    lake: TraceLake | str, session_id: str, sections: Sequence[str], plots: Sequence[str] = ()
) -> dict[str, str | PageTable]:
    """Label -> plain text (`summary`, first), Markdown or a table, in order: the summary, the
    `plots` asked for (`<id>_plot`), then per section in `sections` (by key) its sentences
    under its title and each table under its name. A section the session lacks (no GPU
    kernels, no previous session) is left out."""
    data = read_report_data(lake, session_id, in_progress=True)  # complete after drift
    content = report_content(data)
    chosen = {s.key: s for s in report_sections(content) if s.key in sections}
    entries: dict[str, str | PageTable] = {"summary": page_summary(content)}
    entries.update(
        (plot_label(plot_id), markdown_image(svg, caption))
        for plot_id, (caption, svg) in session_plots(data, plots).items()
    )
    for key in sections:
        if key in chosen:
            entries.update(section_entries(chosen[key]))
    return entries


def plot_label(plot_id: str) -> str:
    return plot_id.replace("-", "_") + "_plot"


def section_entries(section: Section) -> dict[str, str | PageTable]:
    """The section's sentences as one paragraph each, and its tables ("none" for an empty one)."""
    entries: dict[str, str | PageTable] = (
        {section.title: "\n\n".join(section.text)} if section.text else {}
    )
    for table in section.tables:
        columns = table.brief_columns()  # six at most: a wide table widens the whole page
        headers = [title for _, title, _ in columns]
        cells = table_cells(table.rows, columns)
        entries[table.name] = PageTable(headers, cells) if table.rows else "none"
    return entries

"""A session report as Markdown: the same sections and tables as the HTML report, without the
plots (most Markdown viewers refuse data-URI images; render --format html for them)."""

from __future__ import annotations

from aaco_pipelines.report.content import render_json
from aaco_pipelines.report.markdown_tables import markdown_table
from aaco_pipelines.report.section_model import Section, Table
from aaco_pipelines.report.sections import report_sections
from aaco_pipelines.tracelake.store import TraceLake


def render_markdown(lake: TraceLake | str, session_id: str) -> str:
    """The report of one session (or "latest") as Markdown."""
    content = render_json(lake, session_id)
    session = content["session"]
    lines = [f"# AACO report: {session['model_name']} {session['session_id']}", ""]
    for section in report_sections(content):
        lines += _section(section)
    return "\n".join(lines).rstrip() + "\n"


def _section(section: Section) -> list[str]:
    lines = [f"## {section.title}", ""]
    for text in section.text:
        lines += [text, ""]
    for table in section.tables:
        if table.caption:
            lines += [f"**{table.caption}**", ""]
        lines += [table_markdown(table), ""]
    return lines


def table_markdown(table: Table, brief: bool = False) -> str:
    """One table as Markdown: every column, or its brief ones (`Table.brief`)."""
    columns = table.brief_columns() if brief else table.columns
    return markdown_table([_cells(row) for row in table.rows], columns)


def _cells(row: dict) -> dict:
    """Text that cannot break the table: no pipes, no line breaks (kernel names can hold both)."""
    return {
        k: v.replace("|", "\\|").replace("\n", " ") if isinstance(v, str) else v
        for k, v in row.items()
    }

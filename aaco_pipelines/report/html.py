"""A session report as one self-contained HTML file: inline CSS, plots as SVG data URIs, no
script and no external request, so it opens offline and can be mailed or archived as is."""

from __future__ import annotations

import html
import json

from aaco_pipelines.report.content import report_content
from aaco_pipelines.report.data import read_report_data
from aaco_pipelines.report.plot_canvas import data_uri
from aaco_pipelines.report.section_model import Section, Table
from aaco_pipelines.report.sections import report_sections
from aaco_pipelines.report.session_plots import session_plots
from aaco_pipelines.tracelake.store import TraceLake

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ddd; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
figure { margin: 1em 0; } figcaption { color: #666; font-size: 12px; }
nav a { margin-right: 1em; } img { max-width: 100%; height: auto; }
"""


def render_html(lake: TraceLake | str, session_id: str) -> str:
    """The report of one session (or "latest") as a single HTML document."""
    data = read_report_data(lake, session_id)
    content = report_content(data)
    return html_document(content, session_plots(data))


def html_document(content: dict, images: dict[str, tuple[str, bytes]]) -> str:
    session = content["session"]
    sections = report_sections(content)
    title = f"AACO report: {session['model_name']} {session['session_id']}"
    nav = " ".join(f'<a href="#{s.key}">{_e(s.title)}</a>' for s in sections)
    body = "\n".join(_section(s, images) for s in sections)
    raw = _e(json.dumps(content, default=str))
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{CSS}</style></head><body>\n<h1>{_e(title)}</h1>\n<nav>{nav}</nav>\n{body}\n"
        f'<details><summary>Report data (JSON)</summary><pre id="report-json">{raw}</pre>'
        "</details>\n</body></html>\n"
    )


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _section(section: Section, images: dict[str, tuple[str, bytes]]) -> str:
    parts = [f'<section id="{section.key}"><h2>{_e(section.title)}</h2>']
    parts += [f"<p>{_e(line)}</p>" for line in section.text]
    for plot_id in section.plots:
        if plot_id in images:
            caption, svg = images[plot_id]
            parts.append(
                f'<figure id="plot-{plot_id}"><img src="{data_uri(svg)}" '
                f'alt="{_e(caption)}"><figcaption>{_e(caption)}</figcaption></figure>'
            )
    parts += [html_table(table) for table in section.tables]
    parts.append("</section>")
    return "\n".join(parts)


def html_table(table: Table) -> str:
    """`markdown_table`'s (key, header, formatter) columns as an HTML table."""
    head = "".join(f"<th>{_e(title)}</th>" for _, title, _ in table.columns)
    body = []
    for row in table.rows:
        cells = []
        for key, _, fmt in table.columns:
            value = row.get(key)
            shown = "—" if value is None else (fmt(value) if fmt else str(value))
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(f"<td{' class=n' if numeric else ''}>{_e(shown)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = f"<caption>{_e(table.caption)}</caption>" if table.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

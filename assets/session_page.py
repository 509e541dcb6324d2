"""What every per-session asset page shows the same way: the sections of the session's report
its stage produced (report.report_excerpt), its numbers as text, and where the session's HTML
report and Perfetto trace are.

Dagster draws a line chart of every int and float metadata entry across an asset's
materializations, by time and by partition key. For the assets partitioned by model x target
that joined unrelated models (bert_encoder|cpu → compute_bound|cpu → ...) into trends that do
not exist; a model's own history is performance_drift's plot. So a session's numbers are text,
their unit in the label (latency_p50_ms) or in the value. Asset checks keep as numbers the
rates and ratios their verdict rests on, which mean the same for every model (telemetry
sampling rate, host contention, p99/p50): their chart is the host's measurement quality over
time; a check's per-model magnitudes (row counts, busy time) are text too.
"""

import os
from pathlib import Path

import dagster as dg

from aaco_pipelines.instance.report_server import (
    DEFAULT_PORT,
    REPORTS_URL_ENV,
    short_perfetto_link,
)
from aaco_pipelines.report.report_excerpt import PageTable, report_excerpt
from aaco_pipelines.report.session_files import session_files
from aaco_pipelines.tracelake.store import TraceLake


def session_page(
    home: str | Path,
    lake: TraceLake,
    session_id: str,
    sections: tuple[str, ...],
    plots: tuple[str, ...] = (),
) -> dict:
    """The page's head: the session in plain text (class, decided or not, measurement, first
    actions), where its report and trace are, its plots, then the report's `sections` (by key)
    as the report says them."""
    excerpt = report_excerpt(lake, session_id, sections, plots)
    summary = dg.MetadataValue.text(excerpt.pop("summary"))
    shown = {label: _shown(entry) for label, entry in excerpt.items()}
    drawn = {label: shown.pop(label) for label in list(shown) if label.endswith("_plot")}
    return {
        "summary": summary,
        "session_id": session_id,
        **session_links(home, session_id),
        **drawn,
        **shown,
    }


def _shown(entry):
    """A report table as table metadata (the UI shows it inline and scrolls it), the rest as
    Markdown."""
    if not isinstance(entry, PageTable):
        return dg.MetadataValue.md(entry)
    schema = dg.TableSchema(columns=[dg.TableColumn(h, "string") for h in entry.headers])
    records = [dg.TableRecord(dict(zip(entry.headers, row, strict=True))) for row in entry.rows]
    return dg.MetadataValue.table(records, schema)


def early_summary(first_line: str) -> dg.TextMetadataValue:
    """The summary of a page that comes before the session is loaded: what the stage did, and
    where the measurement's quality and the class will be judged."""
    return dg.MetadataValue.text(
        f"{first_line}\nMeasurement quality: judged when the session is loaded "
        "(tracelake_session).\nBottleneck: judged by bottleneck_report."
    )


def as_text(metadata: dict) -> dict:
    """`metadata` with every int and float (not bool) as text: nothing Dagster charts."""
    return {key: _text(value) for key, value in metadata.items()}


def _text(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return dg.MetadataValue.text(str(value))


def session_links(home: str | Path, session_id: str) -> dict:
    """The session's report (every plot and table) and trace, written as its run ends
    (performance_drift): links when `aaco ui` serves them (instance.report_server), else paths
    to open in a browser and in ui.perfetto.dev."""
    files = session_files(Path(home), session_id)
    served = os.environ.get(REPORTS_URL_ENV)
    if not served:
        return {
            "html_report (all plots)": dg.MetadataValue.path(str(files.report)),
            "perfetto_trace (ui.perfetto.dev)": dg.MetadataValue.path(str(files.trace)),
        }
    trace = short_perfetto_link(served, files.trace.name)
    if not served.endswith(f":{DEFAULT_PORT}"):  # ui.perfetto.dev fetches from :9001 only
        trace = f"{served}/{files.trace.name}"
    return {
        "html_report (all plots)": dg.MetadataValue.url(f"{served}/{files.report.name}"),
        "perfetto_trace (ui.perfetto.dev)": dg.MetadataValue.url(trace),
    }

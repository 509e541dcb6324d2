"""Publish (the end of performance_drift, and of `aaco run` / `aaco ingest`): the session's HTML
report and Perfetto trace written as files, where its asset pages and the command's last lines
point: AACO_HOME/reports/<session_id>.html and <session_id>.perfetto.json
(report.session_files names them).

The Dagster UI opens a plot's Markdown in a dialog, one plot at a time, and cannot open a local
file: its metadata shows the path, which the user opens in a browser (the report: every plot,
every table in full) or in ui.perfetto.dev (the trace). Both are what `aaco report` and `aaco
export` write, in one reading of the lake: about 1.3 s of a run on a busy 2-core host.

A GPU session of millions of kernels would make that a minute and gigabytes with every run: the
trace is written only up to AUTO_TRACE_MAX_EVENTS events (a stale one removed); above, the
page says which `aaco export` writes it.
"""

from __future__ import annotations

from pathlib import Path

from aaco_pipelines.report.session_files import AUTO_TRACE_MAX_EVENTS, SessionFiles, session_files
from aaco_pipelines.tracelake.store import TraceLake


def publish(lake: TraceLake, session_id: str, home: Path) -> SessionFiles:
    """Render the session's report and export its trace, each appearing whole or not at all.
    The renderers are imported here: every Dagster process imports the paths, one step writes."""
    from aaco_pipelines.report.html import render_html
    from aaco_pipelines.report.output_file import replacing
    from aaco_pipelines.report.perfetto import write_perfetto

    files = session_files(home, session_id)
    files.report.parent.mkdir(parents=True, exist_ok=True)
    with lake.reading():
        page = render_html(lake, session_id)
        with replacing(files.report) as handle:
            handle.write(page)
        events = timeline_events(lake, session_id)
        small = events <= AUTO_TRACE_MAX_EVENTS
        if small:
            write_perfetto(lake, session_id, files.trace)
        else:
            files.trace.unlink(missing_ok=True)  # an earlier run's would belie this one
    return SessionFiles(files.report, files.trace, events, small)


def timeline_events(lake: TraceLake, session_id: str) -> int:
    """The session's events a trace would hold (iterations, nodes, kernels)."""
    found = lake.query("SELECT count(*) AS n FROM kernel_events WHERE session_id = ?", [session_id])
    return found["n"][0].as_py()

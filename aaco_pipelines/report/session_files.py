"""A session's HTML report and Perfetto trace as files, written as its Dagster run ends, where
its asset pages point: AACO_HOME/reports/<session_id>.html and <session_id>.perfetto.json.

The Dagster UI opens a plot's Markdown in a dialog, one plot at a time, and cannot open a local
file: its metadata shows the path, which the user opens in a browser (the report: every plot,
every table in full) or in ui.perfetto.dev (the trace). Both are what `aaco report` and `aaco
export` write, in one reading of the lake: about 1.3 s of a run on a busy 2-core host.

A GPU session of millions of kernels would make that a minute and gigabytes with every run: the
trace is written only up to AUTO_TRACE_MAX_EVENTS events (a stale one removed); above, the
page says which `aaco export` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aaco_pipelines.tracelake.store import TraceLake

REPORTS = "reports"  # under AACO_HOME
AUTO_TRACE_MAX_EVENTS = 200_000  # about 50 MB of trace JSON, a second or two to write


@dataclass(frozen=True)
class SessionFiles:
    report: Path  # the self-contained HTML report
    trace: Path  # Chrome trace-event JSON, for ui.perfetto.dev
    events: int | None = None  # the session's timeline events, where counted
    trace_written: bool = True

    def trace_note(self, session_id: str) -> str:
        """Why the trace was not written, and the command that writes it."""
        return (
            f"not written with the run ({self.events:,} events, over {AUTO_TRACE_MAX_EVENTS:,}): "
            f"aaco export --session {session_id} --format perfetto-proto --output "
            f"{self.trace.with_suffix('').with_suffix('.perfetto-trace')}"
        )


def session_files(home: Path, session_id: str) -> SessionFiles:
    """Where the session's report and trace are (written or not)."""
    if not session_id or "/" in session_id or session_id.startswith("."):
        raise ValueError(f"session id {session_id!r} cannot name a file")
    folder = Path(home) / REPORTS
    return SessionFiles(folder / f"{session_id}.html", folder / f"{session_id}.perfetto.json")


def write_session_files(lake: TraceLake, session_id: str, home: Path) -> SessionFiles:
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
    return lake.query("SELECT count(*) AS n FROM kernel_events WHERE session_id = ?", [session_id])[
        "n"
    ][0].as_py()

"""Where a session's HTML report and Perfetto trace are kept as files:
AACO_HOME/reports/<session_id>.html and <session_id>.perfetto.json, written by the publish stage
(stages/publish.py) as its Dagster run, `aaco run` or `aaco ingest` ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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

"""Alerts as people read them: tables for the Dagster UI and lines for `aaco alert list`."""

from __future__ import annotations

from aaco_pipelines.foundation.quoting import printable
from aaco_pipelines.report.markdown_tables import markdown_table

MAX_ALERT_ROWS = 50  # in a Dagster metadata table; `aaco alert list` has them all
ALERT_COLUMNS = [
    ("alert_id", "alert", None),
    ("state", "state", None),
    ("model_slug", "model", None),
    ("target", "target", None),
    ("metric", "metric", None),
    ("kind", "kind", None),
    ("sessions", "sessions", None),
    ("summary", "latest", None),
]
EVENT_COLUMNS = [
    ("alert_id", "alert", None),
    ("event", "event", None),
    ("state", "state", None),
    ("reason", "why", None),
    ("notify", "notify", lambda v: "yes" if v else "no"),
]


def alerts_table(alerts: list[dict]) -> str:
    return markdown_table(alerts, ALERT_COLUMNS)


def alert_events_table(events: list[dict]) -> str:
    return markdown_table(events, EVENT_COLUMNS)


def alert_line(alert: dict) -> str:
    """`3f9c0a1b2e  new  mlp@cpu  latency_p50_ns regression  2 sessions  <summary>`; control
    characters escaped (foundation.quoting.printable), as in every line below."""
    return printable(
        f"{alert['alert_id']}  {alert['state']:12} {alert['model_slug']}@{alert['target']}  "
        f"{alert['metric']} {alert['kind']}  {alert['sessions']} session"
        f"{'s' if alert['sessions'] != 1 else ''}  {alert['summary']}"
    )


def event_line(event: dict) -> str:
    """One event of an alert's history: when, what, who and why. The actor and reason are
    what a person typed (`aaco alert ack --by --reason`): an escape sequence in them would
    clear or retitle the terminal, a newline forge another event's line."""
    session = f" (session {event['from_session']})" if event["from_session"] else ""
    return printable(
        f"  {event['changed_at']:%Y-%m-%d %H:%M} {event['event']:12} by {event['actor']}: "
        f"{event['reason']}{session}"
    )

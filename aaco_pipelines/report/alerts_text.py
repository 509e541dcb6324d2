"""Alerts as people read them: tables for the Dagster UI and lines for `aaco alert list`."""

from __future__ import annotations

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
    """`3f9c0a1b2e  new  mlp@cpu  latency_p50_ns regression  2 sessions  <summary>`"""
    return (
        f"{alert['alert_id']}  {alert['state']:12} {alert['model_slug']}@{alert['target']}  "
        f"{alert['metric']} {alert['kind']}  {alert['sessions']} session"
        f"{'s' if alert['sessions'] != 1 else ''}  {alert['summary']}"
    )

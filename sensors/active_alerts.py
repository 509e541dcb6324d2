"""active_alerts_sensor: records the asset `active_alerts` whenever the active alerts change.

A tick reads the alerts (governance.alerts.lifecycle) and compares their states with the
cursor; a change is recorded as a materialization of the external asset, so the Catalog shows
the alerts as people left them, before any night has been reviewed. Nothing is launched.
"""

import hashlib
import json

import dagster as dg

from aaco_pipelines.assets.active_alerts import active_alerts
from aaco_pipelines.governance.alerts.lifecycle import list_alerts
from aaco_pipelines.report.alerts_text import MAX_ALERT_ROWS, alerts_table
from aaco_pipelines.resources.tracelake import TraceLakeResource


def alerts_fingerprint(alerts: list[dict]) -> str:
    """What a change of the active alerts changes: each one's state, sessions and summary."""
    keys = [(a["alert_id"], a["state"], a["sessions"], a["summary"]) for a in alerts]
    return hashlib.sha256(json.dumps(sorted(keys), default=str).encode()).hexdigest()[:16]


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records the active_alerts asset whenever the alerts new, acknowledged or "
    "reopened change (a run opened one, someone acknowledged one, a night fixed one).",
)
def active_alerts_sensor(context: dg.SensorEvaluationContext, tracelake: TraceLakeResource):
    lake = tracelake.lake
    if not lake.exists():
        return dg.SkipReason("no TraceLake yet")
    active = list_alerts(lake, active=True)
    fingerprint = alerts_fingerprint(active)
    if fingerprint == context.cursor:
        return dg.SkipReason(f"{len(active)} active alerts, none changed")
    states = {
        state: sum(a["state"] == state for a in active)
        for state in ("new", "reopened", "acknowledged")
    }
    metadata = {
        "active": len(active),
        **{f"{state}": count for state, count in states.items()},
        "alerts": dg.MetadataValue.md(
            alerts_table(active[:MAX_ALERT_ROWS]) if active else "none: nothing waits for anyone"
        ),
    }
    return dg.SensorResult(
        asset_events=[dg.AssetMaterialization(active_alerts.key, metadata=metadata)],
        cursor=fingerprint,
    )

"""active_alerts: the alerts waiting for someone, in the Catalog from the first tick on.

Alerts open on any run (a lone run's at once, a night's after its review), and until now they
were shown only on a night's review: a fresh install showed none anywhere until a night had run.
Nothing computes this asset: sensors.active_alerts records it whenever the active alerts change.
"""

import dagster as dg

active_alerts = dg.AssetSpec(
    "active_alerts",
    group_name="governance",
    kinds={"duckdb"},
    description="The alerts new, acknowledged or reopened (aaco alert list --active), recorded "
    "by active_alerts_sensor whenever they change: one per (model, target, metric, kind).",
)

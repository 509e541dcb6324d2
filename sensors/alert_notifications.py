"""alert_notifications_sensor: the alert events due a notification, delivered to the webhook.

Each tick tries every due event once (governance.alerts.notifications): delivered at least once and
never twice, however often the sensor ticks, a failed one tried again on a later tick after its
backoff, a dead letter after its last attempt. Nothing is launched: the tick is the work.
"""

import dagster as dg

from aaco_pipelines.governance.alerts.notifications import deliver_due
from aaco_pipelines.resources.alert_webhook import AlertWebhookResource
from aaco_pipelines.resources.tracelake import TraceLakeResource


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Delivers alert notifications (opened, reopened, fixed, updates nobody "
    "acknowledged) to AACO_ALERT_WEBHOOK_URL, signed with AACO_ALERT_WEBHOOK_SECRET; retries "
    "with backoff, and keeps a dead letter when delivery fails.",
)
def alert_notifications_sensor(
    context: dg.SensorEvaluationContext,
    tracelake: TraceLakeResource,
    alert_webhook: AlertWebhookResource,
):
    webhook = alert_webhook.webhook
    if webhook is None:
        return dg.SkipReason("no alert webhook set (AACO_ALERT_WEBHOOK_URL): alerts are kept")
    lake = tracelake.lake
    if not lake.exists():
        return dg.SkipReason("no TraceLake yet")
    done = deliver_due(lake, webhook)
    if not done:
        return dg.SkipReason(f"nothing due for {webhook.endpoint}")
    for delivery in done:
        line = f"alert {delivery.alert_id} event {delivery.event_id}: {delivery.status}"
        if delivery.error:
            line += f" after {delivery.attempts} attempts ({delivery.error})"
        (context.log.warning if delivery.error else context.log.info)(line)
    return dg.SensorResult(run_requests=[])

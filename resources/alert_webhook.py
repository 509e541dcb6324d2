"""Where alert notifications go, as a Dagster resource: the webhook's URL and signing secret,
AACO_ALERT_WEBHOOK_URL and AACO_ALERT_WEBHOOK_SECRET by default. Set them as `dg.EnvVar`s in a
deployment's config, so neither is written into the run config the UI shows."""

from __future__ import annotations

import os

import dagster as dg
from pydantic import Field

from aaco_pipelines.governance.alerts.notifications import SECRET_VARIABLE, URL_VARIABLE, Webhook


class AlertWebhookResource(dg.ConfigurableResource):
    url: str | None = Field(
        default=None,
        description=f"The webhook alert events are POSTed to (default {URL_VARIABLE}; none: "
        "alerts are kept, not sent).",
    )
    secret: str | None = Field(
        default=None,
        description=f"Signs each body with HMAC-SHA256 (default {SECRET_VARIABLE}).",
    )

    @property
    def webhook(self) -> Webhook | None:
        url = self.url or os.environ.get(URL_VARIABLE)
        if not url:
            return None
        return Webhook(url, self.secret or os.environ.get(SECRET_VARIABLE) or None)

"""The Dagster code location: assets, checks, resources, sensors and the schedule in one place.

This is the only module of the domain library that imports Dagster.
"""

import dagster as dg

from aaco_pipelines.assets import MODEL_ASSETS, NIGHT_ASSETS, OBSERVED_ASSETS, TARGET_ASSETS
from aaco_pipelines.resources import (
    AlertWebhookResource,
    BenchmarkRunnerResource,
    ModelRegistryResource,
    RecordIOManager,
    TraceLakeResource,
)
from aaco_pipelines.sensors import (
    active_alerts_sensor,
    alert_notifications_sensor,
    bisect_regression_job,
    calibrate_envelope_job,
    measure_model_job,
    model_registry_sensor,
    nightly_regression_sweep,
    nightly_review_sensor,
    review_night_job,
    runtime_version_sensor,
)

defs = dg.Definitions(
    assets=[*MODEL_ASSETS, *TARGET_ASSETS, *NIGHT_ASSETS, *OBSERVED_ASSETS],
    jobs=[measure_model_job, calibrate_envelope_job, review_night_job, bisect_regression_job],
    sensors=[
        model_registry_sensor,
        runtime_version_sensor,
        nightly_review_sensor,
        alert_notifications_sensor,
        active_alerts_sensor,
    ],
    schedules=[nightly_regression_sweep],
    resources={
        "registry": ModelRegistryResource(),
        "tracelake": TraceLakeResource(),
        "runner": BenchmarkRunnerResource(),
        # The records the assets hand each other, at fs_io_manager's paths without its log lines.
        "io_manager": RecordIOManager(),
        "alert_webhook": AlertWebhookResource(),
    },
)

"""Sensors, schedules and jobs (surfaces): what starts measurements, and `aaco sweep`
(sweep.py), which launches them headless. They may import any layer of aaco_pipelines, the
assets and the resources; nothing in aaco_pipelines imports them but the code location
(definitions.py) and the `aaco sweep` command."""

from aaco_pipelines.sensors.active_alerts import active_alerts_sensor
from aaco_pipelines.sensors.alert_notifications import alert_notifications_sensor
from aaco_pipelines.sensors.jobs import (
    bisect_regression_job,
    calibrate_envelope_job,
    measure_model_job,
    review_night_job,
)
from aaco_pipelines.sensors.model_registry import model_registry_sensor
from aaco_pipelines.sensors.nightly import nightly_regression_sweep
from aaco_pipelines.sensors.nightly_review import nightly_review_sensor
from aaco_pipelines.sensors.runtime_version import runtime_version_sensor

__all__ = [
    "active_alerts_sensor",
    "alert_notifications_sensor",
    "bisect_regression_job",
    "calibrate_envelope_job",
    "measure_model_job",
    "model_registry_sensor",
    "nightly_regression_sweep",
    "nightly_review_sensor",
    "review_night_job",
    "runtime_version_sensor",
]

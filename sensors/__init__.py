"""Sensors, schedules and jobs: what starts measurements."""

from sensors.jobs import calibrate_envelope_job, measure_model_job
from sensors.model_registry import model_registry_sensor
from sensors.nightly import nightly_regression_sweep
from sensors.runtime_version import runtime_version_sensor

__all__ = [
    "calibrate_envelope_job",
    "measure_model_job",
    "model_registry_sensor",
    "nightly_regression_sweep",
    "runtime_version_sensor",
]

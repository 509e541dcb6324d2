"""The Dagster code location: assets, checks, resources, sensors and the schedule in one place.

This is the only module of the domain library that imports Dagster.
"""

import dagster as dg

from assets import MODEL_ASSETS
from resources import BenchmarkRunnerResource, ModelRegistryResource, TraceLakeResource
from sensors import (
    measure_model_job,
    model_registry_sensor,
    nightly_regression_sweep,
    runtime_version_sensor,
)

defs = dg.Definitions(
    assets=MODEL_ASSETS,
    jobs=[measure_model_job],
    sensors=[model_registry_sensor, runtime_version_sensor],
    schedules=[nightly_regression_sweep],
    resources={
        "registry": ModelRegistryResource(),
        "tracelake": TraceLakeResource(),
        "runner": BenchmarkRunnerResource(),
    },
)

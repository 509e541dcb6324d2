"""Dagster software-defined assets (surfaces): one module per stage of aaco_pipelines.stages.

Each asset reads as: get its inputs (upstream records, resources, the partition) → call its
one stage → describe the stage's result (metadata, plots, asset check results). Computation,
storage and locking are the stage's; an asset runs no SQL.
"""

from aaco_pipelines.assets.active_alerts import active_alerts
from aaco_pipelines.assets.attribution import kernel_attribution
from aaco_pipelines.assets.benchmark import benchmark_run
from aaco_pipelines.assets.bottleneck import bottleneck_report
from aaco_pipelines.assets.critical_path import critical_path
from aaco_pipelines.assets.drift import performance_drift
from aaco_pipelines.assets.envelope import hardware_envelope
from aaco_pipelines.assets.graph import onnx_graph
from aaco_pipelines.assets.nightly_review import nightly_review
from aaco_pipelines.assets.partitions import (
    model_target_key,
    model_target_partitions,
    models_partitions,
    nights_partitions,
    targets_partitions,
)
from aaco_pipelines.assets.tracelake import tracelake_session
from aaco_pipelines.assets.traces import collected_traces

# Every asset partitioned by model x target, in pipeline order: what a per-model run materializes.
MODEL_ASSETS = [
    onnx_graph,
    benchmark_run,
    collected_traces,
    tracelake_session,
    kernel_attribution,
    critical_path,
    bottleneck_report,
    performance_drift,
]
# Per execution target, not per model: measured by its own job.
TARGET_ASSETS = [hardware_envelope]
# Per night of the nightly sweep: the whole night judged together.
NIGHT_ASSETS = [nightly_review]
# Recorded by a sensor, computed by no run: the alerts waiting for someone.
OBSERVED_ASSETS = [active_alerts]

__all__ = [
    "MODEL_ASSETS",
    "NIGHT_ASSETS",
    "OBSERVED_ASSETS",
    "TARGET_ASSETS",
    "model_target_key",
    "model_target_partitions",
    "models_partitions",
    "nights_partitions",
    "targets_partitions",
]

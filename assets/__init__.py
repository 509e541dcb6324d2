"""Dagster software-defined assets (surfaces): one module per stage of aaco_pipelines.stages.

Each asset reads as: get its inputs (upstream records, resources, the partition) → call its
one stage → describe the stage's result (metadata, plots, asset check results). Computation,
storage and locking are the stage's; an asset runs no SQL.
"""

from assets.attribution import kernel_attribution
from assets.benchmark import benchmark_run
from assets.bottleneck import bottleneck_report
from assets.drift import performance_drift
from assets.envelope import hardware_envelope
from assets.graph import onnx_graph
from assets.nightly_review import nightly_review
from assets.partitions import (
    model_target_key,
    model_target_partitions,
    models_partitions,
    nights_partitions,
    targets_partitions,
)
from assets.tracelake import tracelake_session
from assets.traces import collected_traces

# Every asset partitioned by model x target, in pipeline order: what a per-model run materializes.
MODEL_ASSETS = [
    onnx_graph,
    benchmark_run,
    collected_traces,
    tracelake_session,
    kernel_attribution,
    bottleneck_report,
    performance_drift,
]
# Per execution target, not per model: measured by its own job.
TARGET_ASSETS = [hardware_envelope]
# Per night of the nightly sweep: the whole night judged together.
NIGHT_ASSETS = [nightly_review]

__all__ = [
    "MODEL_ASSETS",
    "NIGHT_ASSETS",
    "TARGET_ASSETS",
    "model_target_key",
    "model_target_partitions",
    "models_partitions",
    "nights_partitions",
    "targets_partitions",
]

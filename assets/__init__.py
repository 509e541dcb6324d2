"""Dagster software-defined assets, one module per stage; thin wrappers over aaco_pipelines."""

from assets.benchmark import benchmark_run
from assets.graph import onnx_graph
from assets.partitions import models_partitions
from assets.tracelake import tracelake_session
from assets.traces import collected_traces

# Every asset partitioned by model, in pipeline order: what a per-model run materializes.
MODEL_ASSETS = [onnx_graph, benchmark_run, collected_traces, tracelake_session]

__all__ = ["MODEL_ASSETS", "models_partitions"]

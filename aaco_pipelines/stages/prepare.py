"""Prepare (onnx_graph): the registered model frozen at its content hash, and its graph.

The snapshot and the extracted graph (nodes, edges, inferred shapes, per-node FLOPs and bytes
from the cost model) go into the graph store once per content hash; later runs reuse them.
"""

from __future__ import annotations

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.graph.extract import GraphExtract
from aaco_pipelines.graph.store import ModelVersion, prepare_model_version
from aaco_pipelines.registry.scan import RegisteredModel


def prepare(model: RegisteredModel, paths: AacoPaths) -> tuple[ModelVersion, GraphExtract]:
    """The model's frozen version and its graph, from the store or extracted now."""
    return prepare_model_version(model, paths)

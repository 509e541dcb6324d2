"""Prepare (onnx_graph): the registered model frozen at its content hash, and its graph.

The snapshot and the extracted graph (nodes, edges, inferred shapes, per-node FLOPs and bytes
from the cost model) go into the graph store (graph.store) once per content hash; later runs
reuse them.
"""

from __future__ import annotations

from pathlib import Path

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.graph.extract import GraphExtract, extract_graph
from aaco_pipelines.graph.inputs import load_model, resolve_input_specs
from aaco_pipelines.graph.store import (
    ModelVersion,
    remove_snapshot,
    snapshot_model_file,
    writing_store,
)
from aaco_pipelines.llm.decoder_io import DecoderIO, generation_plan
from aaco_pipelines.registry.scan import RegisteredModel
from aaco_pipelines.registry.sidecar import InputSpec, ModelSidecar, load_sidecar


def prepare_model_version(
    model: RegisteredModel, paths: AacoPaths
) -> tuple[ModelVersion, GraphExtract]:
    """Snapshot the model file, resolve its inputs and extract (or reuse) its graph.

    Raises AacoInputError (naming the registry file) for a corrupt file or dynamic inputs
    without a sidecar, and then leaves no snapshot behind; and (naming AACO_HOME) when the disk
    is full or read-only, leaving only complete files.
    """
    sidecar = load_sidecar(model.path)
    with writing_store(paths, model):
        snapshot, sha = snapshot_model_file(model.path, paths.home / "models")
        specs, generation = _input_specs(snapshot, sha, sidecar, model, paths)
        graph_dir = paths.graphs / sha
        if (graph_dir / "graph.json").is_file():
            graph = GraphExtract.load(graph_dir)
        else:
            graph = extract_graph(snapshot, specs, model_name=model.name)
            graph.save(graph_dir)
    version = ModelVersion(
        name=model.name,
        slug=model.slug,
        sha256=sha,
        snapshot_path=snapshot,
        registry_path=model.path,
        sidecar_path=model.sidecar,
        sidecar=sidecar,
        input_specs=specs,
        graph_dir=graph_dir,
        generation=generation,
    )
    return version, graph


def _input_specs(
    snapshot: Path, sha: str, sidecar: ModelSidecar, model: RegisteredModel, paths: AacoPaths
) -> tuple[dict[str, InputSpec], dict | None]:
    """Every input's shape and dtype, and a decoder's generation plan (its inputs are then
    those of a prefill at batch 1, the graph's shapes); a model that cannot be fed loses its
    new snapshot."""
    try:
        onnx_model = load_model(snapshot)
        plan = generation_plan(onnx_model, sidecar, model.path)
        if plan is not None:
            decoder = DecoderIO(**plan["decoder"])
            prompt = plan["workload"]["prompt_tokens"]
            return decoder.prefill_specs(1, prompt, plan["vocab"]), plan
        return resolve_input_specs(onnx_model, sidecar.inputs, model.path), None
    except AacoInputError as exc:
        if not (paths.graphs / sha).exists():  # no earlier session uses this snapshot
            remove_snapshot(snapshot)
        if exc.path == str(snapshot):  # name the user's file, not our copy of it
            raise AacoInputError(exc.problem, path=model.path, fix=exc.fix) from None
        raise

"""An ONNX Runtime session as every measurement opens one: options from the request (graph
optimization level, laboratory threads, profiling), the providers it asks for, and the session
without the graph transformers the sidecar disables.

Shared by the measuring process (forward passes), the LLM generation loop (execution.generation_passes), the
coverage check and `aaco ingest`'s optimized graph, so each opens its session the same way.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.providers import amd_gpu_visible, choose_providers
from aaco_pipelines.foundation.atomic_file import write_atomically

# The sidecar's graph_optimization_level, as ONNX Runtime names it.
OPTIMIZATION_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def session_options(ort, request: dict, profile_prefix: Path | None = None):
    options = ort.SessionOptions()
    level = OPTIMIZATION_LEVELS[request.get("graph_optimization_level", "all")]
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    parallel = request.get("execution_mode") == "parallel"
    options.execution_mode = getattr(
        ort.ExecutionMode, "ORT_PARALLEL" if parallel else "ORT_SEQUENTIAL"
    )
    if parallel and request.get("streams"):
        options.add_session_config_entry(
            "session.node_partition_config_file", str(streams_file(request["streams"]))
        )
    if request.get("inter_op_threads"):
        options.inter_op_num_threads = request["inter_op_threads"]
    if request.get("intra_op_threads"):
        options.intra_op_num_threads = request["intra_op_threads"]
    lab = request.get("laboratory")
    if lab:  # the laboratory's cores decide the threads; the sidecar's mode stays
        options.intra_op_num_threads = lab["intra_op_threads"]
        options.inter_op_num_threads = (
            request.get("inter_op_threads") or lab["inter_op_threads"]
            if parallel
            else lab["inter_op_threads"]
        )
        # The runtime's own spinning threads would pin cores we did not choose.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if request.get("generation"):
        # LoadGen's issuing thread and the serving thread share the cores with ONNX Runtime's
        # pool: spinning pool threads would delay arrivals and answers (and, depending on where
        # the threads land, made TPOT bimodal across sessions here: 0.29 or 0.53 ms).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    return options


def streams_file(streams) -> Path:
    """ONNX Runtime's node partition file for these streams (its DeviceBasedPartitioner's JSON:
    one list of node names per stream, each on the CPU, device type "0"; the format of
    onnxruntime/test/testdata/multi_stream_models/3_gpu_streams.json). Named by its content in
    the temporary folder: the same streams reuse one file."""
    text = json.dumps(
        {
            "type": "DeviceBasedPartitioner",
            "streams": [list(stream) for stream in streams],
            "devices": ["0"] * len(streams),
        }
    )
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"aaco-ort-streams-{digest}.json"
    if not path.is_file():
        write_atomically(path, text.encode())
    return path


def resolve_providers(ort, request: dict) -> list[str]:
    """The providers to ask for: the sidecar's (validated) or the automatic choice."""
    available = ort.get_available_providers()
    requested = choose_providers(request["providers"], available, amd_gpu_visible())
    unknown = [p for p in requested if p not in available]
    if unknown:
        raise AacoInputError(
            f"execution providers {unknown} are not available in this ONNX Runtime "
            f"(available: {available})",
            path=request.get("sidecar_path") or request["model_path"],
            fix="list only available providers under execution_providers in the sidecar",
        )
    return requested


def create_session(ort, request: dict, options, optimized_graph: Path | None = None):
    """The session, without the graph transformers the sidecar disables (e.g. NchwcTransformer).

    With `optimized_graph`, ONNX Runtime saves there the graph it runs, without its weights:
    it writes them to a file beside it, removed once the session exists. Attribution needs the
    structure, and a session must not keep a copy of the weights (43 MB for a ResNet-18, 13 GB
    for a 7B model; over 2 GB inline the save fails outright)."""
    if optimized_graph is not None:
        weights = optimized_graph.with_suffix(".weights")
        options.optimized_model_filepath = str(optimized_graph)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", weights.name
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
    try:
        return ort.InferenceSession(
            request["model_path"],
            options,
            providers=request["resolved_providers"],
            disabled_optimizers=list(request.get("disabled_optimizers") or ()) or None,
        )
    finally:
        if optimized_graph is not None:
            weights.unlink(missing_ok=True)

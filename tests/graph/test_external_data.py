"""Models with external weight files (how every model over 2 GB is saved): hashed and snapshot
with their weights, run by ONNX Runtime from the snapshot, never loaded into the aaco process;
a missing weight file, or a location that leaves the model's folder, is one clear error."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.graph.inputs import load_model
from aaco_pipelines.registry.external_data import external_files, model_sha256
from aaco_pipelines.registry.scan import file_sha256, registered_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import DATA

RESNET = DATA / "real_models" / "resnet_ts.onnx"
FAST = "warmup_iterations: 1\nmeasured_iterations: 5\nmin_measured_seconds: 0\nprofiled_iterations: 2\n"


def save_with_external_weights(folder: Path, location: str = "resnet.weights") -> Path:
    """The real ResNet export, re-saved as large models are: the graph in the .onnx file, every
    tensor over 1 KiB in one weights file beside it."""
    model = onnx.load(str(RESNET))
    path = folder / "resnet_ext.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location=location, size_threshold=1024
    )
    return path


def test_a_model_with_external_weights_is_measured_from_its_snapshot(aaco_paths):
    path = save_with_external_weights(aaco_paths.registry)
    (aaco_paths.registry / "resnet_ext.yaml").write_text(FAST)
    weights = aaco_paths.registry / "resnet.weights"
    assert path.stat().st_size < 100_000 < weights.stat().st_size  # the graph alone

    model = registered_model(path)
    assert model.sha256 != file_sha256(path)  # the identity covers the weights
    bundle = measure_model(model, aaco_paths, analyze=True)

    snapshot = Path(bundle.request["model_path"])
    assert snapshot.name == "model.onnx" and snapshot.parent.name == model.sha256
    assert (snapshot.parent / "resnet.weights").read_bytes() == weights.read_bytes()
    assert model_sha256(snapshot) == model.sha256  # the copies hash as the originals
    # The session keeps the optimized graph, not another copy of the weights.
    files = {p.name: p.stat().st_size for p in bundle.path.rglob("*") if p.is_file()}
    assert files["optimized_model.onnx"] < 100_000
    assert not [name for name in files if name.endswith(".weights")]
    lake = TraceLake(aaco_paths.tracelake)
    visible = lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist()
    assert visible == [bundle.session_id]

    # Another weights file under the same model file is another version of the model.
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert registered_model(path).sha256 != model.sha256


def test_the_aaco_process_reads_the_graph_without_the_weights(tmp_path):
    path = save_with_external_weights(tmp_path)
    model = load_model(path)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and all(not t.raw_data for t in external)
    assert external_files(path) == ["resnet.weights"]


@pytest.mark.parametrize(
    "arrange, message",
    [
        (lambda folder: (folder / "resnet.weights").unlink(), "is missing"),
        (lambda folder: _truncate(folder / "resnet.weights"), "which has"),
        (
            lambda folder: _relocate(folder, "../resnet.weights"),
            "outside the model's folder",
        ),
        (lambda folder: _relocate(folder, "/etc/passwd"), "outside the model's folder"),
        (lambda folder: _link_outside(folder), "leads outside the model's folder"),
        (lambda folder: _fifo(folder), "is not a regular file"),
    ],
    ids=["missing", "truncated", "dot-dot", "absolute", "link-outside", "fifo"],
)
def test_bad_external_weights_are_one_error_naming_the_model_and_nothing_is_copied(
    aaco_paths, arrange, message
):
    path = save_with_external_weights(aaco_paths.registry)
    arrange(aaco_paths.registry)
    with pytest.raises(AacoInputError, match=message) as error:
        measure_model(registered_model(path), aaco_paths)
    assert str(path) in str(error.value) and "save_as_external_data" in str(error.value)
    models = aaco_paths.home / "models"
    assert not models.exists() or not [p for p in models.iterdir() if p.name != ".lock"]


def _truncate(weights: Path) -> None:
    with open(weights, "r+b") as handle:
        handle.truncate(1000)


def _relocate(folder: Path, location: str) -> None:
    """Point every external tensor at `location` (as a crafted model file would)."""
    path = folder / "resnet_ext.onnx"
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save_model(model, str(path))


def _link_outside(folder: Path) -> None:
    outside = folder.parent / "elsewhere.weights"
    os.replace(folder / "resnet.weights", outside)
    (folder / "resnet.weights").symlink_to(outside)


def _fifo(folder: Path) -> None:
    (folder / "resnet.weights").unlink()
    os.mkfifo(folder / "resnet.weights")

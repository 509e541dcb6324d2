"""The model store (models/<sha>.onnx, graphs/<sha>/) under faults: a full disk is one line
naming AACO_HOME, and only complete snapshots and graphs are ever left, whatever an earlier
killed writer left behind."""

from __future__ import annotations

import fcntl
import os
import re

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.scan import file_sha256, registered_model
from aaco_pipelines.stages.prepare import prepare_model_version
from tests import models
from tests.helpers import error_lines, fill

SNAPSHOT = re.compile(r"[0-9a-f]{64}\.onnx")
GRAPH_FILES = {"graph.json", "nodes.parquet", "edges.parquet"}


def _only_complete_files(paths: AacoPaths) -> bool:
    """Every snapshot holds the bytes its name says; every graph folder has all its files."""
    models_dir, graphs = paths.home / "models", paths.graphs
    snapshots = list(models_dir.iterdir()) if models_dir.exists() else []
    for snapshot in snapshots:
        assert SNAPSHOT.fullmatch(snapshot.name), snapshot
        assert file_sha256(snapshot) == snapshot.name.removesuffix(".onnx"), snapshot
    for graph in graphs.iterdir() if graphs.exists() else []:
        assert not graph.name.startswith(".") and {p.name for p in graph.iterdir()} == GRAPH_FILES
    return True


def _leave_a_killed_writers_temps(paths: AacoPaths) -> None:
    """What a writer killed mid-copy leaves: a snapshot temp (today's and the old name) and a
    graph staging folder."""
    (paths.home / "models").mkdir(parents=True, exist_ok=True)
    (paths.home / "models" / ".incoming-k1l2m3.tmp").write_bytes(b"\0" * 4096)
    (paths.home / "models" / ".incoming-n4o5p6.onnx").write_bytes(b"\0" * 4096)
    (paths.graphs / f".{'a' * 64}.q7r8s9").mkdir(parents=True)
    (paths.graphs / f".{'a' * 64}.q7r8s9" / "graph.json").write_text("{")


@pytest.fixture
def home_on_full_disk(full_disk, monkeypatch) -> AacoPaths:
    monkeypatch.setenv("AACO_HOME", str(full_disk / "aaco"))
    monkeypatch.delenv("AACO_REGISTRY", raising=False)
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    paths = AacoPaths.from_env()
    paths.registry.mkdir(parents=True)
    return paths


@pytest.mark.timeout(60)
def test_a_model_larger_than_the_free_space_is_one_line_and_no_partial_snapshot(
    home_on_full_disk, tmp_path, capsys
):
    paths = home_on_full_disk
    model = models.save(models.slow_model(1024), tmp_path / "big.onnx")  # 4 MiB of weights
    _leave_a_killed_writers_temps(paths)
    fill(paths.home.parent, leave_bytes=256 << 10)
    assert main(["run", "--model", str(model), "--iterations", "5", "--no-profile"]) == 2
    err = "\n".join(error_lines(capsys.readouterr().err))
    assert len(err.splitlines()) == 1 and err.startswith(f"aaco: error: {paths.home}: "), err
    assert "no space left" in err and "big.onnx" in err and "Fix: free space" in err
    assert f"writing {model}" not in err  # the user's model is read, never written
    assert _only_complete_files(paths) and not list((paths.home / "models").iterdir())
    assert not list(paths.graphs.iterdir())


@pytest.mark.timeout(60)
def test_a_graph_that_does_not_fit_is_an_input_error_for_the_dagster_asset_too(
    home_on_full_disk, tmp_path
):
    """prepare_model_version is what the onnx_graph asset runs: the snapshot fits, its graph
    does not; the error names AACO_HOME, the complete snapshot stays (it is that model's)."""
    paths = home_on_full_disk
    model = models.save(models.slow_model(400), tmp_path / "mid.onnx")
    (paths.home / "models").mkdir()
    fill(paths.home.parent, leave_bytes=-(-model.stat().st_size // 4096) * 4096)
    with pytest.raises(AacoInputError) as error:
        prepare_model_version(registered_model(model), paths)
    assert error.value.path == str(paths.home) and "no space left" in error.value.problem
    assert _only_complete_files(paths)
    assert [p.name for p in (paths.home / "models").iterdir()] == [f"{file_sha256(model)}.onnx"]


def test_a_partial_snapshot_is_replaced_not_measured(aaco_paths, tmp_path):
    """A snapshot cut short (by a writer that did not rename into place) would otherwise be
    taken for the model and fail as 'not a valid ONNX model', naming the user's good file."""
    model = models.save(models.tiny_mlp(), tmp_path / "mlp.onnx")
    sha = file_sha256(model)
    (aaco_paths.home / "models").mkdir()
    partial = aaco_paths.home / "models" / f"{sha}.onnx"
    partial.write_bytes(model.read_bytes()[:100])
    version, _ = prepare_model_version(registered_model(model), aaco_paths)
    assert version.snapshot_path == partial and file_sha256(partial) == sha
    assert _only_complete_files(aaco_paths)


def test_a_killed_writers_temps_go_once_no_writer_is_left(aaco_paths, tmp_path):
    model = models.save(models.tiny_mlp(), tmp_path / "mlp.onnx")
    _leave_a_killed_writers_temps(aaco_paths)
    temps = {p.name for p in (aaco_paths.home / "models").iterdir()}
    live_writer = os.open(aaco_paths.home / "models", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(live_writer, fcntl.LOCK_SH)  # another process still writing: its temps stay
        prepare_model_version(registered_model(model), aaco_paths)
        assert temps <= {p.name for p in (aaco_paths.home / "models").iterdir()}
    finally:
        os.close(live_writer)
    prepare_model_version(registered_model(model), aaco_paths)
    assert _only_complete_files(aaco_paths)
    assert [p.name for p in (aaco_paths.home / "models").iterdir()] == [
        f"{file_sha256(model)}.onnx"
    ]

"""The `aaco` command line: zoo, registry, one measured run, and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import models
from conftest import add_model

from aaco_pipelines.cli import main
from aaco_pipelines.tracelake.store import TraceLake


def test_zoo_build_if_empty_and_registry_list(aaco_paths, capsys):
    assert main(["zoo", "build", "--if-empty"]) == 0
    written = sorted(p.name for p in aaco_paths.registry.glob("*.onnx"))
    assert len(written) == 6 and "bert_encoder.onnx" in written
    mtimes = {p: p.stat().st_mtime_ns for p in aaco_paths.registry.iterdir()}
    assert main(["zoo", "build", "--if-empty"]) == 0
    assert {p: p.stat().st_mtime_ns for p in aaco_paths.registry.iterdir()} == mtimes
    capsys.readouterr()
    assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    assert "6 models" in out and "bert_encoder" in out and "sidecar=bert_encoder.yaml" in out


def test_run_measures_a_model_file_into_the_tracelake(aaco_paths, capsys):
    path = add_model(aaco_paths, "tiny", models.tiny_mlp())
    assert main(["run", "--model", str(path)]) == 0
    assert "session " in capsys.readouterr().out
    slugs = TraceLake(aaco_paths.tracelake).query("SELECT model_slug FROM sessions")["model_slug"]
    assert slugs.to_pylist() == ["tiny"]


def test_user_errors_are_one_line_with_the_fix(aaco_paths, tmp_path):
    corrupt = models.write_corrupt_model(tmp_path / "broken.onnx")
    env = {**os.environ, "AACO_HOME": str(aaco_paths.home)}
    aaco = Path(sys.executable).with_name("aaco")
    result = subprocess.run(
        [str(aaco), "run", "--model", str(corrupt)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert str(corrupt) in result.stderr and "Fix:" in result.stderr
    missing = subprocess.run(
        [str(aaco), "run", "--model", "nope"], env=env, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no model with partition key 'nope'" in missing.stderr

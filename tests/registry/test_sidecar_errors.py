"""Hostile sidecars are refused when they are read: one line naming the sidecar, the key, the
value and the fix, before any worker starts (a worker that gets them fails without saying which
file, or, with `min_measured_seconds: .inf`, measures until its timeout)."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from aaco_pipelines.cli import main
from tests import models
from tests.helpers import error_lines

# (sidecar file, its text, what the error must say); the model takes x: float32 [4, 16].
HOSTILE = [
    ("m.yaml", "inputs: [x, y]", "inputs must be a mapping"),
    ("m.yaml", "measured_iterations: true", "measured_iterations must be a positive integer"),
    ("m.yaml", "warmup_iterations: .nan", "warmup_iterations must be an integer >= 0, not nan"),
    ("m.yaml", "profiled_iterations: 2.5", "profiled_iterations must be a positive integer"),
    ("m.yaml", "measured_iterations: -5", "not -5"),
    ("m.yaml", "min_measured_seconds: .inf", "min_measured_seconds must be a number >= 0"),
    ("m.yaml", "min_measured_seconds: .nan", "not nan"),
    ("m.yaml", "inputs: {x: {shape: [4, 16], low: a}}", "inputs.x.low must be a finite number"),
    ("m.yaml", "inputs: {x: {shape: [4, 16], low: 0, high: b}}", "inputs.x.high"),
    ("m.yaml", "inputs: {x: {shape: [4, 16], high: .inf}}", "not inf"),
    ("m.yaml", "inputs: {x: {shape: [4, 0]}}", "shape [4, 0] is not a list of positive"),
    ("m.yaml", "inputs: {x: {shape: [4, true]}}", "shape [4, True]"),
    ("m.yaml", "inputs: {x: {shape: [4, 16.5]}}", "shape [4, 16.5]"),
    ("m.yaml", "inputs: {x: {shape: [4, 16], dtype: float33}}", "inputs.x.dtype must be"),
    ("m.yaml", "inputs: {x: {shape: [4, 16], dtyp: int64}}", "unknown keys ['dtyp'] in input"),
    ("m.yaml", "inputs: {1: {shape: [4, 16]}}", "input name 1 is not text"),
    ("m.yaml", "execution_providers: 5", "execution_providers must be a list"),
    ("m.yaml", "execution_providers: [1, 2]", "execution_providers must be a list"),
    ("m.yaml", "tags: [a, b]", "tags must be a mapping"),
    ("m.yaml", "tags: {quantized: no}", "tags.quantized must be text, not False"),
    ("m.yaml", "tags: {version: 1.10}", "tags.version must be text, not 1.1"),
    ("m.yaml", "- 1\n- 2", "sidecar must be a mapping"),
    ("m.yaml", "inputs: [", "cannot be parsed"),  # YAML's message spans several lines
    ("m.json", '{"measured_iterations": NaN}', "measured_iterations must be"),
    ("m.json", '{"inputs": {"x": {"shape": [4, 16], "high": Infinity}}}', "inputs.x.high"),
    ("m.json", '{"inputs": {"x": {"shape": "4x16"}}}', "shape '4x16'"),
    ("m.json", '{"inputs": []}', "inputs must be a mapping"),
    ("m.json", "[]", "sidecar must be a mapping"),
    ("m.json", '{"tags": {"a": null}}', "tags.a must be text, not None"),
    ("m.json", '{"execution_providers": [null]}', "execution_providers must be a list"),
    ("m.json", '{"min_measured_seconds": true}', "min_measured_seconds must be a number"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("sidecar", "text", "says"), HOSTILE, ids=[f"{s}:{t}" for s, t, _ in HOSTILE]
)
def test_a_hostile_sidecar_is_one_line_naming_it_and_no_worker_starts(
    aaco_paths, tmp_path, capsys, sidecar, text, says
):
    model = models.save(models.tiny_mlp(), tmp_path / "m.onnx")
    (tmp_path / sidecar).write_text(text)
    assert main(["run", "--model", str(model), "--no-profile"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("aaco: error: "), err
    assert f"{tmp_path / sidecar}: " in err and says in err and "Fix: " in err
    assert "Traceback" not in err and _nothing_started(aaco_paths)


def _nothing_started(paths) -> bool:
    started = [paths.sessions, paths.failed_sessions, paths.home / "models"]
    return not [p for folder in started if folder.exists() for p in folder.rglob("*")]


def test_a_model_input_no_data_can_be_made_for_is_refused_before_the_worker(
    aaco_paths, tmp_path, capsys
):
    """A string input: the worker used to find out, in an error naming no file."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["same"])],
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, [2])],
    )
    model = helper.make_model(graph, opset_imports=models.OPSET, ir_version=9)
    path = models.save(model, tmp_path / "strings.onnx")
    assert main(["run", "--model", str(path), "--iterations", "5", "--no-profile"]) == 2
    err = "\n".join(error_lines(capsys.readouterr().err))  # (what it starts said first)
    assert len(err.splitlines()) == 1 and err.startswith(f"aaco: error: {path}: input 'text'")
    assert _nothing_started(aaco_paths)

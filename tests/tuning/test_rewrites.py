"""Graph candidates made by ONNX Runtime's own tools from a real export: each a new file that
loads and runs, never the user's model overwritten; the fusions pass the correctness guard and
int8 does not; a refusal is one line."""

from __future__ import annotations

import shutil

import onnx
import pytest

from aaco_pipelines.tuning.accuracy import compare_outputs, fixed_seed_inputs, run_outputs
from aaco_pipelines.tuning.candidates import FP16, INT8_DYNAMIC, TRANSFORMER_FUSIONS
from aaco_pipelines.tuning.rewrites import derived_path, rewrite_model
from tests.helpers import DATA

# A torch.onnx export (random weights) whose attention ONNX Runtime's optimizer recognises; the
# newer bert_ts export fuses its LayerNorms only (the optimizer's pattern, not ours).
BERT = DATA / "real_models" / "bert_classic_ts.onnx"


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """The BERT export with its sidecar, in a folder of its own."""
    folder = tmp_path_factory.mktemp("bert")
    for suffix in (".onnx", ".json"):
        shutil.copy(BERT.with_suffix(suffix), folder / f"bert{suffix}")
    model = folder / "bert.onnx"
    inputs = fixed_seed_inputs(model, seed=0)
    return model, inputs, run_outputs(model, inputs)


@pytest.mark.parametrize(
    ("rewrite", "ops", "passes"),
    [
        (TRANSFORMER_FUSIONS, {"Attention", "SkipLayerNormalization"}, True),
        (INT8_DYNAMIC, {"MatMulInteger", "DynamicQuantizeLinear"}, False),
        (FP16, {"Cast"}, None),  # on a CPU: the runtime's business, judged by the guard
    ],
)
def test_a_rewrite_is_a_new_file_of_the_tools_ops_that_runs(bert, tmp_path, rewrite, ops, passes):
    model, inputs, reference = bert
    before = model.read_bytes()
    made = rewrite_model(model, rewrite, tmp_path / "tuning")
    assert made.reason is None and made.path == tmp_path / "tuning" / f"bert.{rewrite}.onnx"
    assert model.read_bytes() == before  # the user's model untouched
    assert not list((tmp_path / "tuning").glob("*.partial"))
    graph = onnx.load(made.path)
    assert ops <= {node.op_type for node in graph.graph.node}, rewrite
    verdict = compare_outputs(reference, run_outputs(made.path, inputs))
    if passes is not None:
        assert verdict.passed is passes, verdict.reason
    if passes is False:
        assert "over its limit" in verdict.reason


def test_a_refused_rewrite_is_one_line_and_leaves_no_file(tmp_path):
    """A file the quantizer cannot read: the candidate fails, saying why, and no file stays."""
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    made = rewrite_model(broken, INT8_DYNAMIC, tmp_path / "tuning")
    assert made.path is None and made.reason.startswith("int8_dynamic could not be applied: ")
    assert "\n" not in made.reason and not list((tmp_path / "tuning").iterdir())  # nothing kept
    # a link in the tuner's folder cannot make a rewrite land on the user's model
    (tmp_path / "m.onnx").write_bytes(b"the user's model")
    (tmp_path / "tuning" / "m.int8_dynamic.onnx").symlink_to(tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="overwrite the model itself"):
        derived_path(tmp_path / "m.onnx", INT8_DYNAMIC, tmp_path / "tuning")

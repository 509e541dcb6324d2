"""The correctness guard of `aaco tune` on real exported models and real ONNX Runtime sessions:
a float reordering passes the default limits, dynamic int8 quantization
(onnxruntime.quantization.quantize_dynamic) does not until the user loosens them, top-1 agreement
is numpy's argmax agreement, and broken outputs or limits fail in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.graph.inputs import load_model, make_inputs, resolve_input_specs
from aaco_pipelines.registry.accuracy_limits import DEFAULT_LIMITS, AccuracyLimits, parse_accuracy
from aaco_pipelines.registry.sidecar import ModelSidecar, load_sidecar, parse_sidecar
from aaco_pipelines.tuning.accuracy import compare_outputs, fixed_seed_inputs, run_outputs
from tests import models
from tests.helpers import DATA

CORPUS = DATA / "real_models"
BERT, LLAMA = CORPUS / "bert_ts.onnx", CORPUS / "llama_dynamo.onnx"


def dynamic_int8(model: Path, folder: Path) -> Path:
    """The model through onnxruntime.quantization.quantize_dynamic: int8 weights, activations
    quantized at run time (MatMul and Gemm: the CPU provider has no int8 ConvInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = folder / f"{model.stem}_int8.onnx"
    quantize_dynamic(
        model, quantized, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"]
    )
    return quantized


@pytest.fixture(scope="module")
def int8_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("int8")


@pytest.mark.parametrize(
    ("name", "baseline", "candidate"),
    [
        ("bert_ts", {"graph_optimization_level": "all"}, {"graph_optimization_level": "basic"}),
        ("resnet_ts", {"graph_optimization_level": "all"}, {"graph_optimization_level": "basic"}),
        ("whisper_encoder_ts", {"intra_op_threads": 1}, {"intra_op_threads": 2}),
    ],
)
def test_a_float_reordering_passes_the_default_limits(name, baseline, candidate):
    model = CORPUS / f"{name}.onnx"
    inputs = fixed_seed_inputs(model, seed=0)
    verdict = compare_outputs(
        run_outputs(model, inputs, baseline), run_outputs(model, inputs, candidate)
    )
    assert verdict.passed, f"{name} {candidate}: {verdict.reason}"
    assert verdict.reason.startswith("within limits"), verdict.reason
    figures = verdict.figures()
    # measured here: max_abs_error <= 2e-6, max_rel_error <= 2e-5, cosine 1 - 1e-12 at worst
    assert figures["max_rel_error"] < DEFAULT_LIMITS.max_rel_error / 10, figures
    assert figures["cosine"] > 1 - 1e-9, figures


def test_dynamic_int8_fails_the_defaults_and_passes_when_loosened(int8_folder):
    quantized = dynamic_int8(BERT, int8_folder)
    inputs = fixed_seed_inputs(BERT, seed=0)
    reference = run_outputs(BERT, inputs, ModelSidecar())  # the sidecar's defaults: level all
    candidate = run_outputs(quantized, inputs)
    verdict = compare_outputs(reference, candidate)
    figures = verdict.figures()
    assert not verdict.passed, figures
    # "max_rel_error 0.729 over its limit 0.001 (output 'pooler_output'); also ..."
    metric, value, side, *_ = verdict.reason.split()
    assert metric in figures and float(value) == pytest.approx(figures[metric], rel=1e-2)
    assert side in ("over", "under") and "(output '" in verdict.reason, verdict.reason
    assert figures["max_rel_error"] > 10 * DEFAULT_LIMITS.max_rel_error, figures
    assert "\n" not in verdict.reason

    loosened = parse_accuracy("max_abs_error:0.5, max_rel_error:10,min_cosine:0.99", "--accuracy")
    assert loosened == AccuracyLimits(0.5, 10.0, 0.99, DEFAULT_LIMITS.min_top1_agreement)
    again = compare_outputs(reference, candidate, loosened)
    assert again.passed, again.reason
    assert again.figures() == figures  # the limits change the verdict, never the figures


def test_top1_agreement_is_the_share_of_rows_whose_argmax_agrees(int8_folder):
    """llama_dynamo's logits [1, 32, 512]: 32 token rows over a 512-word vocabulary."""
    inputs = fixed_seed_inputs(LLAMA, seed=0)
    reference = run_outputs(LLAMA, inputs)["logits"]
    candidate = run_outputs(dynamic_int8(LLAMA, int8_folder), inputs)["logits"]
    measured = compare_outputs([reference], [candidate]).top1_agreement
    assert measured == np.mean(reference.argmax(-1) == candidate.argmax(-1))

    # Four rows made to disagree for sure: each one's top class pushed below its second.
    moved = reference.copy()
    top = reference.argmax(-1)[0, :4]
    moved[0, np.arange(4), top] = reference.min()
    verdict = compare_outputs({"logits": reference}, {"logits": moved})
    assert verdict.top1_agreement == 1 - 4 / 32 == np.mean(reference.argmax(-1) == moved.argmax(-1))
    assert not verdict.passed and "top1_agreement" in verdict.reason, verdict.reason

    # An exact tie in the reference agrees with either class; a 1-D or integer output has none.
    tied = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], dtype=np.float32)
    other = np.array([[1.0, 2.9, 3.0], [0.0, 2.5, 1.0]], dtype=np.float32)
    assert compare_outputs([tied], [other]).top1_agreement == 0.5
    plain = compare_outputs([reference[0, 0]], [reference[0, 0]])
    counts = compare_outputs([top[None, :]], [top[None, :]])
    assert plain.top1_agreement is None and counts.top1_agreement is None and counts.passed


def test_broken_outputs_fail_with_their_reason():
    model = CORPUS / "resnet_ts.onnx"
    logits = run_outputs(model, fixed_seed_inputs(model, seed=1))["logits"]  # [1, 10]

    shorter = compare_outputs({"logits": logits}, {"logits": logits[:, :9]})
    assert not shorter.passed
    assert shorter.reason == "shape [1, 9] differs from [1, 10] (output 'logits')"

    broken = logits.copy()
    broken[0, 3] = np.nan
    nan = compare_outputs({"logits": logits}, {"logits": broken})
    assert not nan.passed
    assert nan.reason == "1 NaN where the reference is finite (of 10 values) (output 'logits')"

    half = compare_outputs({"logits": logits}, {"logits": logits.astype(np.float16)})
    assert half.reason == "dtype float16 differs from float32 (output 'logits')"
    renamed = compare_outputs({"logits": logits}, {"scores": logits})
    assert not renamed.passed and "['scores']" in renamed.reason

    # NaN where the reference has it too is no failure, nor is an all-zero output unchanged.
    both = compare_outputs([broken, np.zeros(4)], [broken.copy(), np.zeros(4)])
    assert both.passed and both.cosine == 1.0, both.reason


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("max_rel:0.1", "unknown accuracy metric 'max_rel'"),
        ("max_rel_error", "accuracy limit 'max_rel_error' is not METRIC:LIMIT"),
        ("max_rel_error:0.1,", "accuracy limit '' is not METRIC:LIMIT"),
        ("max_abs_error:0.1,max_abs_error:0.2", "accuracy metric max_abs_error is given twice"),
        ("min_top1_agreement:most", "min_top1_agreement must be a number from 0 to 1, not 'most'"),
        ("max_rel_error:nan", "max_rel_error must be a number >= 0, not 'nan'"),
        ({"min_cosine": 1.5}, "min_cosine must be a number from -1 to 1, not 1.5"),
        ({"max_abs_error": -0.1}, "max_abs_error must be a number >= 0, not -0.1"),
        ({"max_abs_error": True}, "max_abs_error must be a number >= 0, not True"),
        ({"cosine\n\x1b[2J": 0.9}, "unknown accuracy metric 'cosine\\n\\x1b[2J'"),
        (["max_rel_error"], "accuracy must be a mapping {metric: limit}"),
    ],
)
def test_bad_accuracy_limits_are_one_line_naming_the_source_and_the_fix(given, problem):
    source = "--accuracy" if isinstance(given, str) else Path("/models/bert.yaml")
    with pytest.raises(AacoInputError) as info:
        parse_accuracy(given, source)
    message = str(info.value)
    assert message.startswith(f"{source}: ") and problem in message, message
    assert "Fix: " in message and "\n" not in message and "\x1b" not in message


def test_limits_read_the_same_from_the_sidecar_and_the_command_line():
    # YAML 1.1 reads 1e-3 as a string: taken as the number it says
    sidecar = parse_accuracy({"max_rel_error": "1e-3", "min_cosine": 0.9999}, Path("m.yaml"))
    command_line = parse_accuracy("min_cosine:0.9999,max_rel_error:0.001", "--accuracy")
    assert sidecar == command_line == AccuracyLimits(min_cosine=0.9999)
    assert parse_accuracy(None, "--accuracy") == DEFAULT_LIMITS


def test_fixed_seed_inputs_are_the_measuring_processes_and_take_a_batch_size(tmp_path):
    specs = resolve_input_specs(load_model(BERT), load_sidecar(BERT).inputs, BERT)
    inputs = fixed_seed_inputs(BERT, seed=3)
    assert inputs.keys() == specs.keys()
    measured = make_inputs(specs, seed=3)  # what the measuring process feeds...
    np.testing.assert_array_equal(inputs["input_ids"], measured["input_ids"])
    assert measured["attention_mask"].min() == 0  # ...with a random mask, which masks rows
    np.testing.assert_array_equal(inputs["attention_mask"], np.ones((1, 32), np.int64))  # open
    assert inputs["input_ids"].max() < 1024  # the sidecar's bounds hold
    assert not np.array_equal(fixed_seed_inputs(BERT, seed=4)["input_ids"], inputs["input_ids"])

    dynamic = models.save(models.dynamic_input_model(), tmp_path / "dynamic.onnx")
    batched = fixed_seed_inputs(dynamic, seed=0, batch_size=3)
    assert batched["x"].shape == (3, 8) and batched["x"].dtype == np.float32
    outputs = run_outputs(dynamic, batched)
    np.testing.assert_array_equal(outputs["y"], np.maximum(batched["x"], 0))
    with pytest.raises(AacoInputError, match="no input has a dynamic leading"):
        fixed_seed_inputs(BERT, batch_size=2)
    with pytest.raises(AacoInputError, match="batch size must be a whole number"):
        fixed_seed_inputs(dynamic, batch_size=0)


def test_run_outputs_takes_session_options_or_sidecar_keys():
    import onnxruntime as ort

    inputs = fixed_seed_inputs(BERT, seed=0)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    given = run_outputs(BERT, inputs, options)
    keyed = run_outputs(BERT, inputs, ModelSidecar(graph_optimization_level="basic"))
    assert list(given) == ["last_hidden_state", "pooler_output"]
    assert all(np.array_equal(given[name], keyed[name]) for name in given)


def test_the_sidecar_sets_the_limits_says_a_mistake_in_one_line_and_writes_back_only_changes(
    tmp_path,
):
    path = tmp_path / "m.yaml"
    sidecar = parse_sidecar({"accuracy": {"max_rel_error": 0.05, "min_cosine": 0.999}}, path)
    assert (sidecar.accuracy.max_rel_error, sidecar.accuracy.min_cosine) == (0.05, 0.999)
    assert sidecar.accuracy.max_abs_error == DEFAULT_LIMITS.max_abs_error  # the rest: defaults
    assert sidecar.to_dict()["accuracy"] == {"max_rel_error": 0.05, "min_cosine": 0.999}
    assert parse_sidecar(sidecar.to_dict(), path).accuracy == sidecar.accuracy  # read back
    assert "accuracy" not in ModelSidecar().to_dict()  # the defaults say nothing
    with pytest.raises(AacoInputError, match="unknown accuracy metric") as error:
        parse_sidecar({"accuracy": {"max_rel_eror": 0.05}}, path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)

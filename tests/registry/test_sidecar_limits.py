"""Sidecar values the worker used to find out about (issue 26, item 6): each is one line naming
the sidecar, the key and the allowed range, before any work; no negative TPOT is ever stored;
and a `generation` section for a model that is no decoder says so, not that it "has
past_key_values inputs"."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.cli import main
from aaco_pipelines.collectors.llm_generation import loadgen_metrics
from aaco_pipelines.llm.decoder_io import detect_decoder_io
from aaco_pipelines.llm.engine import Generator
from aaco_pipelines.registry.zoo import llama_decoder
from tests import models
from tests.helpers import error_lines

POSITIONS = 40  # a decoder whose rotary tables have 40 rows
PROMPT = 32  # so 9 output tokens fit (positions 0..39) and 10 do not


def _refused(paths, capsys, model, sidecar_text: str, *says: str) -> str:
    """`aaco run` of the model with this sidecar is one line naming the sidecar and saying
    `says`; nothing is measured or kept."""
    sidecar = model.with_suffix(".yaml")
    sidecar.write_text(sidecar_text)
    assert main(["run", "--model", str(model), "--no-profile"]) == 2
    err = "\n".join(error_lines(capsys.readouterr().err))  # (what it starts said first)
    assert len(err.splitlines()) == 1 and err.startswith(f"aaco: error: {sidecar}: "), err
    assert all(part in err for part in says) and "Fix: " in err, err
    started = [paths.sessions, paths.failed_sessions]
    assert not [p for folder in started if folder.exists() for p in folder.rglob("*.json")]
    return err


@pytest.mark.parametrize(
    ("model", "text", "says"),
    [
        ("mlp", "min_measured_seconds: 1.0e+300", ["min_measured_seconds must be", "<= 3600"]),
        ("mlp", "min_measured_seconds: 3601", ["min_measured_seconds", ">= 0.0 and <= 3600"]),
        ("llm", "generation: {min_duration_s: 1.0e+12}", ["generation.min_duration_s", "<= 3600"]),
        ("llm", "generation: {output_tokens: 1}", ["generation.output_tokens must be at least 2", "TPOT"]),
        ("llm", "generation: {output_tokens: 0}", ["generation.output_tokens must be a positive"]),
    ],
)  # fmt: skip
def test_out_of_range_values_are_refused_before_any_work(
    aaco_paths, capsys, tmp_path, model, text, says
):
    """Each used to reach the worker: a measured pass of 1e300 s runs into the runner's timeout,
    a scenario of 1e12 s too, one output token stores LoadGen's negative TPOT."""
    path = tmp_path / f"{model}.onnx"
    onnx.save(llama_decoder() if model == "llm" else models.tiny_mlp(), path)
    _refused(aaco_paths, capsys, path, text, *says)


def test_output_tokens_beyond_the_decoders_positions_are_refused_naming_what_fits(
    aaco_paths, capsys, tmp_path
):
    model = tmp_path / "llm.onnx"
    onnx.save(llama_decoder(max_positions=POSITIONS), model)
    err = _refused(
        aaco_paths, capsys, model, f"generation: {{prompt_tokens: {PROMPT}, output_tokens: 10}}",
        "generation.output_tokens", "41 positions", f"has {POSITIONS} positions", "(2..9 fit)",
    )  # fmt: skip
    assert "rotary/cos_table" in err
    _refused(
        aaco_paths, capsys, model,
        "generation: {prompt_tokens: 8, output_tokens: 4, curves: {prompt_lengths: [8, 64]}}",
        "generation.curves.prompt_lengths", "at most 39 tokens",
    )  # fmt: skip


def test_the_position_bound_is_exactly_where_onnx_runtime_fails(tmp_path):
    """9 output tokens after a 32-token prompt run; 10 fail inside ONNX Runtime, which is what
    the worker used to meet."""
    model = llama_decoder(max_positions=POSITIONS)
    path = tmp_path / "llm.onnx"
    onnx.save(model, path)
    generator = Generator(
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]),
        detect_decoder_io(model, path),
    )
    prompts = np.zeros((1, PROMPT), np.int64)
    assert generator.generate(prompts, 9).tokens.shape == (1, 9)
    with pytest.raises(Exception, match="out of bounds|INVALID_ARGUMENT|indices"):
        generator.generate(prompts, 10)


def test_a_generation_section_for_an_mlp_says_it_is_no_decoder(aaco_paths, capsys, tmp_path):
    model = models.save(models.tiny_mlp(), tmp_path / "mlp.onnx")
    err = _refused(
        aaco_paths, capsys, model, "generation: {output_tokens: 4}",
        "has no past_key_values inputs", "not a decoder", "remove the generation section",
    )  # fmt: skip
    assert "has past_key_values inputs" not in err


def test_no_negative_or_infinite_loadgen_figure_is_stored(tmp_path):
    """LoadGen divides by (tokens - 1): its TPOT of one-token requests is negative."""
    bundle = tmp_path / "session_1"
    summary = bundle / "loadgen" / "server" / "mlperf_log_summary.txt"
    summary.parent.mkdir(parents=True)
    summary.write_text(
        "Result is : VALID\n"
        "50.00 percentile first token latency (ns) : 1500\n"
        "50.00 percentile time to output token (ns) : -1500\n"
        "99.00 percentile time to output token (ns) : -9223372036854775808\n"
        "90.00 percentile latency (ns) : inf\n"
        "Completed tokens per second : 10.5\n"
    )
    rows = loadgen_metrics(SessionBundle(bundle), ["server"]).to_pylist()
    figures = {row["metric"]: row["value"] for row in rows}
    assert figures == {"result_valid": 1.0, "ttft_p50_ns": 1500.0, "output_tokens_per_s": 10.5}
    assert json.dumps(figures)  # all finite

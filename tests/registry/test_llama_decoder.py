"""The zoo's hand-drawn Llama decoder with a KV cache computes what Hugging Face computes.

tests/data/llama_decoder_reference.npz is Hugging Face LlamaForCausalLM (eager attention, its
own DynamicCache) run with this model's weights: a left-padded batch of two prompts, a prefill
and four greedy decode steps. Regenerate it (after changing llama_decoder) with the corpus venv,
from the repository root:

    /work/torch-venv/bin/python benchmarks/real_models/llama_reference.py

The tests replay it in onnxruntime (no torch here), check that the cache changes nothing but the
work done, and that the builder is reproducible.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from aaco_pipelines.registry.zoo import llama_decoder
from tests.helpers import DATA

REFERENCE = DATA / "llama_decoder_reference.npz"
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 16  # llama_decoder()'s defaults
# Measured max |ONNX - HF| over every step's logits: about 2e-6 (logits have std ~1).
ATOL = 1e-4
LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


@pytest.fixture(scope="module")
def model_bytes() -> bytes:
    return llama_decoder().SerializeToString()


@pytest.fixture(scope="module", params=list(LEVELS))
def session(request, model_bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[request.param]
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _empty_past(batch: int) -> dict[str, np.ndarray]:
    shape = (batch, KV_HEADS, 0, HEAD_DIM)
    return {
        f"past_key_values.{i}.{p}": np.zeros(shape, np.float32)
        for i in range(LAYERS)
        for p in ("key", "value")
    }


def _positions(mask: np.ndarray) -> np.ndarray:
    return np.where(mask == 0, 1, np.cumsum(mask, axis=1) - 1)


def _step(session, ids, mask, past, positions=None):
    """One run: the last position's logits, every position's logits, and the next past."""
    if positions is None:
        positions = _positions(mask)[:, -ids.shape[1] :]
    feed = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **past}
    logits, *presents = session.run(None, feed)
    names = [o.name.replace("present", "past_key_values") for o in session.get_outputs()[1:]]
    return logits, dict(zip(names, presents, strict=True))


def _generate(session, prompt, mask, steps, *, cache=True):
    """Greedy decoding: with the cache one token per step, without it the whole sequence."""
    logits, past = _step(session, prompt, mask, _empty_past(len(prompt)))
    last, ids, lengths = [logits[:, -1]], prompt, []
    for _ in range(steps):
        token = last[-1].argmax(-1)[:, None]
        ids = np.concatenate([ids, token], axis=1)
        mask = np.concatenate([mask, np.ones_like(token)], axis=1)
        if cache:
            logits, past = _step(session, token, mask, past)
            lengths.append({p.shape[2] for p in past.values()})
        else:
            logits, _ = _step(session, ids, mask, _empty_past(len(prompt)))
        last.append(logits[:, -1])
    tokens = np.stack([lg.argmax(-1) for lg in last], axis=1)
    return tokens, np.stack(last), lengths


def test_prefill_and_decode_match_hugging_face(session):
    ref = dict(np.load(REFERENCE))
    prompt, prompt_len = ref["prompt"], ref["prompt"].shape[1]
    mask, positions = ref["attention_mask"], ref["position_ids"]
    steps = len(ref["decode_logits"])

    logits, past = _step(
        session, prompt, mask[:, :prompt_len], _empty_past(2), positions[:, :prompt_len]
    )
    # Every position, padded ones included (a fully masked row is a uniform softmax in both).
    np.testing.assert_allclose(logits, ref["prefill_logits"], rtol=0, atol=ATOL)
    tokens = [logits[:, -1].argmax(-1)]
    for step in range(steps):
        end = prompt_len + step + 1
        logits, past = _step(
            session, tokens[-1][:, None], mask[:, :end], past, positions[:, end - 1 : end]
        )
        np.testing.assert_allclose(logits[:, 0], ref["decode_logits"][step], rtol=0, atol=ATOL)
        tokens.append(logits[:, 0].argmax(-1))
    np.testing.assert_array_equal(np.stack(tokens, axis=1), ref["tokens"])
    np.testing.assert_allclose(past["past_key_values.0.key"], ref["present_key_0"], atol=ATOL)
    np.testing.assert_allclose(past["past_key_values.0.value"], ref["present_value_0"], atol=ATOL)


def test_the_cache_changes_the_work_not_the_result(session):
    prompt = np.random.default_rng(0).integers(0, 512, (2, 6))
    mask = np.ones_like(prompt)
    mask[1, :2] = 0  # left padding
    cached, cached_logits, lengths = _generate(session, prompt, mask, steps=7)
    full, full_logits, _ = _generate(session, prompt, mask, steps=7, cache=False)
    np.testing.assert_array_equal(cached, full)
    np.testing.assert_allclose(cached_logits, full_logits, rtol=0, atol=ATOL)
    # Each decode step's present holds exactly one more position, in every layer, K and V.
    assert lengths == [{6 + n} for n in range(1, 8)]


def test_a_fully_padded_row_stays_finite(session):
    mask = np.array([[1, 1, 1, 1], [0, 0, 0, 0]])
    logits, _ = _step(session, np.array([[5, 6, 7, 8], [0, 0, 0, 0]]), mask, _empty_past(2))
    assert np.isfinite(logits).all()


def test_the_decoder_io_follows_the_decoder_with_past_convention(model_bytes):
    model = llama_decoder()
    dims = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*model.graph.input, *model.graph.output]
    }
    kv = [f"{i}.{p}" for i in range(LAYERS) for p in ("key", "value")]
    assert list(dims) == [
        "input_ids", "attention_mask", "position_ids",
        *(f"past_key_values.{n}" for n in kv), "logits", *(f"present.{n}" for n in kv),
    ]  # fmt: skip
    assert dims["attention_mask"] == ["batch_size", "total_sequence_length"]
    assert dims["past_key_values.1.value"] == ["batch_size", 2, "past_sequence_length", 16]
    assert dims["present.0.key"] == ["batch_size", 2, "total_sequence_length", 16]
    assert dims["logits"] == ["batch_size", "sequence_length", 512]
    assert model.SerializeToString() == model_bytes  # two builds, identical bytes
    assert llama_decoder(seed=8).SerializeToString() != model_bytes

"""Hugging Face's answer for the zoo's Llama decoder: ``tests/data/llama_decoder_reference.npz``.

``aaco_pipelines.registry.zoo.llama_decoder()`` is drawn by hand with onnx.helper. This script
builds Hugging Face ``LlamaForCausalLM`` (eager attention) with the same sizes, copies the ONNX
model's weights into it, and runs a prefill and four greedy decode steps with Hugging Face's own
KV cache, on a batch of two prompts whose second row is left-padded by one token. It saves what
``tests/registry/test_llama_decoder.py`` replays in onnxruntime (without torch): the prompt, the
attention mask and position ids of every step, the logits of every step, the generated tokens and
layer 0's final key/value cache.

It needs the corpus venv (torch is no dependency of the project; see export_corpus.py)::

    /work/torch-venv/bin/python benchmarks/real_models/llama_reference.py

(writes tests/data/llama_decoder_reference.npz; ``--out PATH`` writes elsewhere).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from aaco_pipelines.registry.zoo import llama_decoder  # noqa: E402

# llama_decoder()'s defaults: the test builds the model with no arguments.
LAYERS, HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, VOCAB, MAX_POSITIONS = 2, 64, 4, 2, 128, 512, 512
PROMPT = np.array([[17, 301, 44, 9, 250, 128], [0, 77, 499, 3, 360, 205]], dtype=np.int64)
PADDED = np.array([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]], dtype=np.int64)  # row 1 left-padded
DECODE_STEPS = 4


def hf_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    return LlamaForCausalLM(cfg).eval()


def onnx_state_dict() -> dict[str, torch.Tensor]:
    """The zoo model's initializers under Hugging Face's names (MatMul [in, out] -> Linear
    [out, in])."""
    weights = {t.name: numpy_helper.to_array(t) for t in llama_decoder().graph.initializer}
    state = {
        "model.embed_tokens.weight": weights["embed_tokens.weight"],
        "model.norm.weight": weights["norm.weight"],
        "lm_head.weight": weights["lm_head.weight"].T,
    }
    for i in range(LAYERS):
        hf, zoo = f"model.layers.{i}", f"layer{i}"
        for norm in ("input_layernorm", "post_attention_layernorm"):
            state[f"{hf}.{norm}.weight"] = weights[f"{zoo}/{norm}.weight"]
        for p in ("q", "k", "v", "o"):
            state[f"{hf}.self_attn.{p}_proj.weight"] = weights[f"{zoo}/attention/{p}_proj.weight"].T
        for p in ("gate", "up", "down"):
            state[f"{hf}.mlp.{p}_proj.weight"] = weights[f"{zoo}/mlp/{p}_proj.weight"].T
    return {k: torch.tensor(np.ascontiguousarray(v)) for k, v in state.items()}


def positions(mask: np.ndarray) -> np.ndarray:
    """Position ids as Hugging Face's generate() derives them: padding does not count."""
    pos = np.cumsum(mask, axis=1) - 1
    return np.where(mask == 0, 1, pos).astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests/data/llama_decoder_reference.npz")
    out = parser.parse_args().out

    from transformers import DynamicCache

    torch.manual_seed(0)  # only the init the weights replace uses it
    model = hf_model()
    model.load_state_dict(onnx_state_dict(), strict=True)

    mask = PADDED.copy()
    ids = torch.from_numpy(PROMPT)
    cache = DynamicCache(config=model.config)
    step_logits, tokens = [], []
    with torch.no_grad():
        for step in range(DECODE_STEPS + 1):
            pos = positions(mask)[:, -ids.shape[1] :]
            result = model(
                input_ids=ids,
                attention_mask=torch.from_numpy(mask),
                position_ids=torch.from_numpy(pos),
                cache=cache,
                use_cache=True,
            )
            cache = result.cache
            logits = result.logits.numpy()
            step_logits.append(logits)
            tokens.append(logits[:, -1].argmax(-1))
            ids = torch.from_numpy(tokens[-1][:, None].astype(np.int64))
            if step < DECODE_STEPS:
                mask = np.concatenate([mask, np.ones((2, 1), np.int64)], axis=1)

    np.savez(
        out,
        prompt=PROMPT,
        attention_mask=mask,  # [2, prompt + steps]: each step uses its first columns
        position_ids=positions(mask),  # [2, prompt + steps], likewise
        prefill_logits=step_logits[0],  # [2, 6, vocab]
        decode_logits=np.stack([lg[:, 0] for lg in step_logits[1:]]),  # [steps, 2, vocab]
        tokens=np.stack(tokens, axis=1).astype(np.int64),  # [2, steps + 1]
        present_key_0=cache.layers[0].keys.numpy(),  # [2, kv_heads, prompt + steps, head_dim]
        present_value_0=cache.layers[0].values.numpy(),
    )
    print(f"wrote {out} ({out.stat().st_size} bytes); tokens {np.stack(tokens, axis=1).tolist()}")


if __name__ == "__main__":
    main()

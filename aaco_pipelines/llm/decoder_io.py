"""The decoder-with-past I/O convention, found in a graph: what a generation loop must feed.

Hugging Face Optimum and ONNX Runtime GenAI export decoders as

    input_ids [batch, seq], attention_mask [batch, past + seq], position_ids [batch, seq] (optional),
    past_key_values.N.key / .value [batch, kv_heads, past, head_dim]
      -> logits [batch, seq, vocab], present.N.key / .value [batch, kv_heads, past + seq, head_dim]

A graph with these names is a decoder: prefill is a run with an empty past, every decode step
feeds one token and the previous step's presents. Anything the loop cannot feed (a merged
decoder's `use_cache_branch`, a past without static heads) is refused naming the model.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.graph.inputs import declared_dims, dtype_name, graph_inputs
from aaco_pipelines.registry.sidecar import InputSpec, ModelSidecar, sidecar_path_for
from aaco_pipelines.registry.workload import GenerationWorkload

PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
PRESENT = re.compile(r"^present\.(\d+)\.(key|value)$")
OPTIONAL_INPUTS = ("attention_mask", "position_ids")


@dataclass(frozen=True)
class DecoderIO:
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: str  # numpy name of the cache's element type
    vocab: int | None  # logits' last dim when static
    has_attention_mask: bool
    has_position_ids: bool

    def past_names(self, layer: int) -> tuple[str, str]:
        return f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"

    def present_names(self, layer: int) -> tuple[str, str]:
        return f"present.{layer}.key", f"present.{layer}.value"

    def kv_bytes(self, batch: int, length: int) -> int:
        """Bytes of the whole cache (keys and values of every layer) at this length."""
        per_token = 2 * self.layers * self.kv_heads * self.head_dim
        return batch * length * per_token * np.dtype(self.kv_dtype).itemsize

    def prefill_specs(self, batch: int, prompt_tokens: int, vocab_high: int | None) -> dict:
        """The inputs of a prefill run (empty past) as InputSpecs, for graph extraction."""
        specs = {"input_ids": InputSpec((batch, prompt_tokens), "int64", 0, vocab_high)}
        if self.has_attention_mask:
            specs["attention_mask"] = InputSpec((batch, prompt_tokens), "int64", 1, 2)
        if self.has_position_ids:
            specs["position_ids"] = InputSpec((batch, prompt_tokens), "int64", 0, prompt_tokens)
        for layer in range(self.layers):
            for name in self.past_names(layer):
                specs[name] = InputSpec((batch, self.kv_heads, 0, self.head_dim), self.kv_dtype)
        return specs


def detect_decoder_io(model: onnx.ModelProto, path: Path) -> DecoderIO | None:
    """The model's decoder convention; None when it has no past_key_values inputs at all."""
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    outputs = {vi.name: vi for vi in model.graph.output}
    pasts = {m.groups(): name for name in inputs if (m := PAST.match(name))}
    if not pasts:
        return None
    layers = len({layer for layer, _ in pasts})
    expected = {(str(i), kind) for i in range(layers) for kind in ("key", "value")}
    presents = {m.groups() for name in outputs if (m := PRESENT.match(name))}
    missing = [n for n in ("input_ids",) if n not in inputs] + [
        n for n in ("logits",) if n not in outputs
    ]
    if set(pasts) != expected or presents != expected or missing:
        raise _not_supported(
            path, f"past/present pairs for layers 0..{layers - 1}, input_ids and logits"
        )
    extra = set(inputs) - {"input_ids", *OPTIONAL_INPUTS, *pasts.values()}
    if extra:
        raise _not_supported(path, f"no inputs beyond the convention (it has {sorted(extra)})")
    dims = declared_dims(inputs[pasts[("0", "key")]])
    if dims is None or len(dims) != 4 or not all(isinstance(d, int) for d in (dims[1], dims[3])):
        raise _not_supported(
            path,
            "past_key_values as [batch, kv_heads, past, head_dim] with static kv_heads and head_dim",
        )
    logits = declared_dims(outputs["logits"])
    vocab = logits[-1] if logits and isinstance(logits[-1], int) else None
    return DecoderIO(
        layers=layers,
        kv_heads=dims[1],
        head_dim=dims[3],
        kv_dtype=dtype_name(inputs[pasts[("0", "key")]].type.tensor_type.elem_type) or "float32",
        vocab=vocab,
        has_attention_mask="attention_mask" in inputs,
        has_position_ids="position_ids" in inputs,
    )


def _not_supported(path: Path, wanted: str) -> AacoInputError:
    return AacoInputError(
        f"has past_key_values inputs but not the decoder convention the generation loop feeds "
        f"(it needs {wanted})",
        path=path,
        fix="export the decoder with past (Optimum: task text-generation-with-past, not a merged "
        "decoder), or give its inputs shapes in the sidecar to measure single forward passes",
    )


def _not_a_decoder(path: Path) -> AacoInputError:
    """A `generation` section for a model without past_key_values inputs (an MLP, an encoder):
    said as it is, not as a decoder of the wrong convention."""
    return AacoInputError(
        "the sidecar asks for a generation workload, but the model has no past_key_values "
        "inputs: it is not a decoder with a KV cache",
        path=sidecar_path_for(path) or path,
        fix="remove the generation section to measure single forward passes, or register the "
        "decoder exported with past (Optimum: task text-generation-with-past)",
    )


def position_limit(model: onnx.ModelProto) -> tuple[int, str] | None:
    """(how many positions the decoder can take, the table that says so) when its graph bounds
    them: the rows of a table it gathers by position_ids (learned position embeddings, a rotary
    cos/sin cache); None when nothing does (rotary computed from the positions)."""
    tables = {t.name: t for t in model.graph.initializer if t.dims}
    limits = [
        (tables[node.input[0]].dims[0], node.input[0])
        for node in model.graph.node
        if node.op_type == "Gather"
        and list(node.input[1:2]) == ["position_ids"]
        and node.input[0] in tables
        and all(a.name != "axis" or a.i == 0 for a in node.attribute)
    ]
    return min(limits) if limits else None


def check_positions(
    workload: GenerationWorkload, limit: tuple[int, str] | None, path: Path
) -> None:
    """Refuse, before any work, a workload whose longest request needs more positions than the
    decoder has: positions 0 .. prompt + output_tokens - 2 are fed (the last token is sampled,
    never fed), and ONNX Runtime would fail the measuring process on an index out of the
    table."""
    if limit is None:
        return
    rows, table = limit
    prompt_key, longest = max(
        [("prompt_tokens", workload.prompt_tokens)]
        + [("curves.prompt_lengths", n) for n in workload.curves.prompt_lengths],
        key=lambda item: item[1],
    )
    needed = longest + workload.output_tokens - 1
    if needed <= rows:
        return
    where = f"the model has {rows} positions (rows of {table!r}, gathered by position_ids)"
    if longest + 1 > rows:  # not even two tokens fit
        key = f"generation.{prompt_key}"
        fix = f"give the sidecar's generation prompts of at most {rows - 1} tokens"
    else:
        key, most = "generation.output_tokens", rows - longest + 1
        fix = f"write generation: {{output_tokens: {most}}} or less in the sidecar (2..{most} fit)"
    raise AacoInputError(
        f"{key}: a {longest}-token prompt and {workload.output_tokens} output tokens need "
        f"{needed} positions, and {where}",
        path=sidecar_path_for(path) or path,
        fix=fix,
    )


def generation_plan(model: onnx.ModelProto, sidecar: ModelSidecar, path: Path) -> dict | None:
    """What the measuring process needs to run the model as a generation workload, or None for a
    forward-pass workload. A decoder is generated from when the sidecar has a `generation`
    section, or when it is found in the graph and the sidecar gives no shapes for its past (a
    sidecar that does measures single forward passes of those shapes)."""
    declared = sidecar.generation is not None
    if not declared and any(PAST.match(name) for name in sidecar.inputs):
        return None
    decoder = detect_decoder_io(model, path)
    if decoder is None:
        if declared:
            raise _not_a_decoder(path)
        return None
    workload = sidecar.generation or GenerationWorkload()
    check_positions(workload, position_limit(model), path)
    vocab = decoder.vocab or _vocab_from_sidecar(sidecar, path)
    return {"workload": workload.to_dict(), "decoder": asdict(decoder), "vocab": vocab}


def _vocab_from_sidecar(sidecar: ModelSidecar, path: Path) -> int:
    """Prompt ids stay below the vocabulary: the logits' size, else input_ids' `high`."""
    spec = sidecar.inputs.get("input_ids")
    if spec is None or spec.high is None:
        raise AacoInputError(
            "the decoder's vocabulary size is not in the graph (logits has a dynamic last dim)",
            path=path,
            fix="give it in the sidecar: inputs: input_ids: {shape: [1, 1], dtype: int64, high: VOCAB}",
        )
    return int(spec.high)

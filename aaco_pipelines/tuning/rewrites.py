"""A graph candidate made: the model rewritten by ONNX Runtime's own tools into a new file.

The rewrite is ONNX Runtime's, not ours (its transformer optimizer's fusions, its dynamic
quantizer, its float16 converter), so a model `aaco tune` recommends is one the runtime's own
tooling made. The derived file is written under a new name in the tuner's folder, whole or not
at all, and never over the user's model; a rewrite the tool refuses is a candidate that failed,
with the tool's reason in one line, not an error of the tuning run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.foundation.quoting import printable
from aaco_pipelines.tuning.candidates import FP16, INT8_DYNAMIC, TRANSFORMER_FUSIONS

# Dynamic int8 on MatMul and Gemm only: ONNX Runtime's CPU provider has no ConvInteger kernel
# for int8 weights (a quantized Conv fails to load: "ConvInteger(10) is not implemented").
INT8_OPS = ["MatMul", "Gemm"]
REASON_CHARS = 300  # a tool's reason, shortened to one line


@dataclass(frozen=True)
class Rewritten:
    """The derived model (None when the tool refused) and why not."""

    path: Path | None
    reason: str | None = None


def derived_path(model: Path, rewrite: str, folder: Path) -> Path:
    """Where a rewrite of `model` goes: `<folder>/<stem>.<rewrite>.onnx`, never `model` itself."""
    path = folder / f"{model.stem}.{rewrite}.onnx"
    if path.resolve() == model.resolve():
        raise ValueError(f"a rewrite would overwrite the model itself: {model}")
    return path


def rewrite_model(model: Path, rewrite: str, folder: Path) -> Rewritten:
    """Apply one rewrite (candidates.TRANSFORMER_FUSIONS, INT8_DYNAMIC or FP16) to `model`, into
    `folder`. The file appears whole (renamed into place) or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    out = derived_path(model, rewrite, folder)
    partial = out.with_name(out.name + ".partial")
    try:
        MAKERS[rewrite](model, partial)
        os.replace(partial, out)
    except Exception as error:  # noqa: BLE001 - the tool's refusal is the candidate's verdict
        partial.unlink(missing_ok=True)
        said = printable(" ".join(f"{type(error).__name__}: {error}".split()))[:REASON_CHARS]
        return Rewritten(None, f"{rewrite} could not be applied: {said}")
    return Rewritten(out)


def _fusions(model: Path, out: Path) -> None:
    """ONNX Runtime's transformer optimizer, its Python fusions only (opt_level 0: the session's
    own graph optimizations stay the runtime's, as for the model itself). Its attention fusion
    needs the heads and hidden size, which it cannot always find in an export: they are read
    from the graph (attention_dims)."""
    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    heads, hidden = attention_dims(onnx.load(model, load_external_data=False))
    optimized = optimize_model(
        str(model), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0
    )
    optimized.save_model_to_file(str(out))


def attention_dims(model) -> tuple[int, int]:
    """(heads, hidden size) of an exported attention block, (0, 0) where the graph does not say
    (the optimizer then looks itself): the head size is the last of the 4-D shapes the heads are
    split with ([batch, sequence, heads or -1, head size]); the hidden size is the length of the
    LayerNorm scales; heads = hidden / head size."""
    from collections import Counter

    from onnx import numpy_helper

    values = {init.name: init for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = node.attribute[0].t
    split, scales = Counter(), Counter()
    for node in model.graph.node:
        tensor = values.get(node.input[1]) if len(node.input) > 1 else None
        if tensor is None:
            continue
        if node.op_type == "Reshape" and list(tensor.dims) == [4]:
            shape = numpy_helper.to_array(tensor)
            if shape[-1] > 0:
                split[int(shape[-1])] += 1
        elif node.op_type == "LayerNormalization" and len(tensor.dims) == 1:
            scales[int(tensor.dims[0])] += 1
    if not split or not scales:
        return 0, 0
    head_size, hidden = split.most_common(1)[0][0], scales.most_common(1)[0][0]
    return (hidden // head_size, hidden) if hidden % head_size == 0 else (0, 0)


def _int8(model: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(model, out, op_types_to_quantize=INT8_OPS, weight_type=QuantType.QInt8)


def _fp16(model: Path, out: Path) -> None:
    """Float math in half precision, the model's inputs and outputs kept as they are (callers
    feed it what they fed the model)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    converted = convert_float_to_float16(onnx.load(model), keep_io_types=True)
    onnx.save(converted, out)


MAKERS = {TRANSFORMER_FUSIONS: _fusions, INT8_DYNAMIC: _int8, FP16: _fp16}

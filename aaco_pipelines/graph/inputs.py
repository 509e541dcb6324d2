"""How to feed a model: load it safely, resolve every input to a concrete shape, make the data.

A model declares its inputs with possibly dynamic dimensions (`[batch, 3, 224, 224]`); the sidecar
fills those in. Everything here fails with an AacoInputError that names the file and the fix,
because a missing shape is a user's decision, never something to guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.external_data import external_files
from aaco_pipelines.registry.sidecar import InputSpec, sidecar_path_for

Dims = tuple[int | str | None, ...]  # declared dims: a number, a dim_param name, or unknown


def load_model(path: Path) -> onnx.ModelProto:
    """The parsed model without the contents of external weight files (those stay on disk:
    only the measuring process's ONNX Runtime maps them), which are checked to be there; or an
    AacoInputError for anything that is not a usable ONNX file."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf and OS errors all mean "not a model"
        raise _invalid(path, f"{type(exc).__name__}: {exc}") from exc
    external_files(path, model)
    # A text file or a truncated protobuf can parse into a model with nothing in it.
    if not model.graph.node:
        raise _invalid(path, "the graph has no nodes")
    if not model.opset_import:
        raise _invalid(path, "no opset is declared")
    return model


def _invalid(path: Path, reason: str) -> AacoInputError:
    return AacoInputError(
        f"is not a valid ONNX model ({reason})",
        path=path,
        fix="re-export the model, or remove it from the registry",
    )


def dtype_name(elem_type: int) -> str | None:
    """The numpy name of an ONNX element type ("float32", "int64", ...), None when undefined."""
    if elem_type == onnx.TensorProto.STRING:
        return "string"
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller must feed: graph inputs that are not initializers, in graph order."""
    weights = {init.name for init in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in weights]


def declared_dims(value_info: onnx.ValueInfoProto) -> Dims | None:
    """The declared shape; None when even the rank is unknown."""
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
    )


def resolve_input_specs(
    model: onnx.ModelProto, sidecar_inputs: Mapping[str, InputSpec], path: Path
) -> dict[str, InputSpec]:
    """A concrete shape and dtype for every input, from the model completed by the sidecar.

    The model's dtype wins over the sidecar's (the sidecar defaults to float32 when the user
    wrote none, and the model cannot be fed anything else anyway).
    """
    inputs = graph_inputs(model)
    unknown = set(sidecar_inputs) - {vi.name for vi in inputs}
    if unknown:
        raise AacoInputError(
            f"the sidecar names inputs {sorted(unknown)} the model does not have "
            f"(it takes {[vi.name for vi in inputs]})",
            path=sidecar_path_for(path) or path,
            fix="rename or remove those entries under inputs:",
        )
    specs = {vi.name: _resolve(vi, sidecar_inputs.get(vi.name), path) for vi in inputs}
    for name, spec in specs.items():  # refused here, naming the file, not in the measuring process
        if _kind(spec.dtype) is None:
            raise _no_test_data(name, spec.dtype, path)
    return specs


def _resolve(value_info: onnx.ValueInfoProto, given: InputSpec | None, path: Path) -> InputSpec:
    name = value_info.name
    if not value_info.type.HasField("tensor_type"):
        raise AacoInputError(
            f"input '{name}' is not a tensor (sequences, maps and optionals are not supported)",
            path=path,
            fix="export the model with plain tensor inputs",
        )
    dtype = dtype_name(value_info.type.tensor_type.elem_type) or (given and given.dtype)
    dims = declared_dims(value_info)
    if given is not None:
        _check_compatible(name, dims, given.shape, path)
        return InputSpec(shape=tuple(given.shape), dtype=dtype, low=given.low, high=given.high)
    if dims is None or not all(isinstance(d, int) for d in dims) or dtype is None:
        raise AacoInputError(
            f"input '{name}' has dynamic shape {_show(dims)} and no sidecar entry",
            path=path,
            fix=_sidecar_fix(name, dims, dtype or "float32", path),
        )
    return InputSpec(shape=tuple(dims), dtype=dtype)


def _check_compatible(name: str, dims: Dims | None, shape: tuple[int, ...], path: Path) -> None:
    """A sidecar may only fill in dynamic dims, never contradict the model's static ones."""
    if dims is None:
        return
    clash = len(dims) != len(shape) or any(
        isinstance(d, int) and d != s for d, s in zip(dims, shape, strict=False)
    )
    if clash:
        raise AacoInputError(
            f"sidecar shape {list(shape)} for input '{name}' does not fit the model's "
            f"declared shape {_show(dims)}",
            path=sidecar_path_for(path) or path,
            fix=f"give a shape of rank {len(dims)} that keeps the static dims of {_show(dims)}",
        )


def _show(dims: Dims | None) -> str:
    if dims is None:
        return "[unknown rank]"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _sidecar_fix(name: str, dims: Dims | None, dtype: str, path: Path) -> str:
    sizes = [str(d) if isinstance(d, int) else "1" for d in dims or ()]
    example = "..." if dims is None else ", ".join(sizes)
    entry = f"inputs: {name}: {{shape: [{example}], dtype: {dtype}}}"
    existing = sidecar_path_for(path)
    if existing is not None:
        return f"add {entry} to the sidecar {existing.name}"
    return f"add a sidecar {path.stem}.yaml with {entry}"


def make_inputs(specs: Mapping[str, InputSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic input data: the same seed gives the same arrays, run after run.

    Floats are standard normal (uniform in [low, high) when bounded); integers are uniform in
    [low, high) and default to zeros, which is always a valid index; bools are fair coin flips.
    """
    rng = np.random.default_rng(seed)
    return {name: _make_array(rng, name, spec) for name, spec in specs.items()}


def _make_array(rng: np.random.Generator, name: str, spec: InputSpec) -> np.ndarray:
    kind = _kind(spec.dtype)
    shape, low, high = spec.shape, spec.low, spec.high
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind == "int":
        hi = None if high is None else int(high)
        lo = int(low) if low is not None else 0 if hi is None else min(0, hi - 1)
        hi = lo + 1 if hi is None else hi
        return rng.integers(lo, hi, size=shape, dtype=np.int64).astype(spec.dtype)
    if kind == "float":
        if low is None and high is None:
            return rng.standard_normal(shape, dtype=np.float32).astype(spec.dtype)
        lo = (high - 1.0) if low is None else float(low)
        hi = (lo + 1.0) if high is None else float(high)
        return rng.uniform(lo, hi, size=shape).astype(spec.dtype)
    raise _no_test_data(name, spec.dtype)


def _no_test_data(name: str, dtype: str, path: Path | None = None) -> AacoInputError:
    return AacoInputError(
        f"input '{name}' has dtype {dtype}, for which no test data can be generated",
        path=path,
        fix="feed this model from your own harness, or export it with numeric inputs",
    )


def _kind(dtype: str) -> str | None:
    """bool, int or float; the ml_dtypes names (bfloat16, float8_*, int4) count by their name."""
    if dtype == "bool":
        return "bool"
    if dtype.startswith(("int", "uint")):
        return "int"
    if dtype.startswith(("float", "bfloat")):
        return "float"
    return None

"""The optional sidecar next to a model: how to feed it and how to measure it.

`resnet.onnx` may have `resnet.yaml` (or `.yml`, `.json`) beside it:

    inputs:                       # needed for every dynamic dimension
      input_ids: {shape: [1, 128], dtype: int64, low: 0, high: 30522}
    warmup_iterations: 5
    measured_iterations: 50       # at least this many measured runs...
    min_measured_seconds: 1.0     # ...and for at least this long (fast models run more)
    profiled_iterations: 10
    execution_providers: [MIGraphXExecutionProvider, CPUExecutionProvider]
    tags: {family: bert}

`low`/`high` bound generated values (integers: [low, high); floats: uniform in [low, high),
or standard normal when neither is given).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from aaco_pipelines.errors import AacoInputError

SIDECAR_SUFFIXES = (".yaml", ".yml", ".json")
KNOWN_KEYS = {
    "inputs",
    "warmup_iterations",
    "measured_iterations",
    "min_measured_seconds",
    "profiled_iterations",
    "execution_providers",
    "tags",
}
SIDECAR_HELP = "see the sidecar format in README (inputs: NAME: {shape: [...], dtype: ...})"


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class ModelSidecar:
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    warmup_iterations: int = 5
    measured_iterations: int = 50
    min_measured_seconds: float = 1.0
    profiled_iterations: int = 10
    execution_providers: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["inputs"] = {
            name: {k: v for k, v in asdict(spec).items() if v is not None}
            for name, spec in self.inputs.items()
        }
        for name in data["inputs"]:
            data["inputs"][name]["shape"] = list(data["inputs"][name]["shape"])
        data["execution_providers"] = list(self.execution_providers)
        return data

    def save(self, path: Path) -> None:
        """Write as YAML or JSON by the file's suffix."""
        data = self.to_dict()
        text = json.dumps(data, indent=2) if path.suffix == ".json" else yaml.safe_dump(data)
        path.write_text(text)


def sidecar_path_for(model_path: Path) -> Path | None:
    """The sidecar beside a model, if any (first of .yaml, .yml, .json)."""
    for suffix in SIDECAR_SUFFIXES:
        candidate = model_path.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def load_sidecar(model_path: Path) -> ModelSidecar:
    """The model's sidecar, or the defaults when there is none."""
    path = sidecar_path_for(model_path)
    if path is None:
        return ModelSidecar()
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise AacoInputError(
            f"sidecar cannot be parsed ({exc})", path=path, fix=SIDECAR_HELP
        ) from exc
    return parse_sidecar(data or {}, path)


def parse_sidecar(data: dict, path: Path) -> ModelSidecar:
    if not isinstance(data, dict):
        raise AacoInputError("sidecar must be a mapping", path=path, fix=SIDECAR_HELP)
    unknown = set(data) - KNOWN_KEYS
    if unknown:
        raise AacoInputError(
            f"unknown sidecar keys {sorted(unknown)}",
            path=path,
            fix=f"use only {sorted(KNOWN_KEYS)}",
        )
    inputs = {
        name: _parse_input(name, spec, path) for name, spec in (data.get("inputs") or {}).items()
    }
    counts = {
        key: _positive_int(data, key, path, default)
        for key, default in (
            ("warmup_iterations", 5),
            ("measured_iterations", 50),
            ("profiled_iterations", 10),
        )
    }
    min_seconds = data.get("min_measured_seconds", 1.0)
    if not isinstance(min_seconds, int | float) or min_seconds < 0:
        raise AacoInputError(
            f"min_measured_seconds must be a number >= 0, not {min_seconds!r}",
            path=path,
            fix="set min_measured_seconds: 1.0",
        )
    providers = data.get("execution_providers") or []
    if isinstance(providers, str):
        providers = [providers]
    tags = {str(k): str(v) for k, v in (data.get("tags") or {}).items()}
    return ModelSidecar(
        inputs=inputs,
        execution_providers=tuple(providers),
        tags=tags,
        min_measured_seconds=float(min_seconds),
        **counts,
    )


def _parse_input(name: str, spec: dict, path: Path) -> InputSpec:
    if not isinstance(spec, dict) or "shape" not in spec:
        raise AacoInputError(
            f"input '{name}' needs a shape",
            path=path,
            fix=f"write inputs: {name}: {{shape: [...]}}",
        )
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise AacoInputError(
            f"input '{name}' shape {shape!r} is not a list of non-negative integers",
            path=path,
            fix="give every dimension as a number, e.g. shape: [1, 3, 224, 224]",
        )
    low, high = spec.get("low"), spec.get("high")
    if low is not None and high is not None and not low < high:
        raise AacoInputError(f"input '{name}' has low >= high", path=path, fix="make low < high")
    return InputSpec(
        shape=tuple(shape), dtype=str(spec.get("dtype", "float32")), low=low, high=high
    )


def _positive_int(data: dict, key: str, path: Path, default: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or value < (0 if key == "warmup_iterations" else 1):
        raise AacoInputError(
            f"{key} must be a positive integer, not {value!r}",
            path=path,
            fix=f"set {key}: {default}",
        )
    return value

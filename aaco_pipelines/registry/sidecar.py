"""The optional sidecar next to a model: how to feed it and how to measure it.

`resnet.onnx` may have `resnet.yaml` (or `.yml`, `.json`) beside it:

    inputs:                       # needed for every dynamic dimension
      input_ids: {shape: [1, 128], dtype: int64, low: 0, high: 30522}
    warmup_iterations: 5
    measured_iterations: 50       # at least this many measured runs...
    min_measured_seconds: 1.0     # ...and for at least this long (0 to 3600 s)
    profiled_iterations: 10
    execution_providers: [MIGraphXExecutionProvider, CPUExecutionProvider]
    graph_optimization_level: all # ONNX Runtime's: disabled | basic | extended | all
    disabled_optimizers: [NchwcTransformer]  # graph transformers to leave out, by name
    execution_mode: parallel      # ONNX Runtime's: sequential (default) | parallel (inter-op)
    inter_op_threads: 2           # threads running independent nodes at once (parallel mode)
    intra_op_threads: 1           # threads inside one node (default: the runtime's choice; 1 for what-ifs)
    streams: [[a1, a2, join], [b1]]  # parallel mode: the runtime nodes each thread runs in order
    tags: {family: bert}
    generation: {prompt_tokens: 32, output_tokens: 16}   # an LLM decoder: output_tokens >= 2
    counters: true                # hardware counter passes (rocprofv3 --pmc; AMD GPU hosts)
    objectives: {latency_p99_ms: 8, throughput_per_s_min: 100}   # SLOs (registry.objectives)

`low`/`high` bound generated values (integers: [low, high); floats: uniform in [low, high),
or standard normal when neither is given).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.bounded_yaml import load_yaml
from aaco_pipelines.foundation.quoting import excerpt
from aaco_pipelines.registry.accuracy_limits import (
    DEFAULT_LIMITS,
    AccuracyLimits,
    changed_limits,
    parse_accuracy,
)
from aaco_pipelines.registry.objectives import NO_OBJECTIVES, Objectives, parse_objectives
from aaco_pipelines.registry.workload import (
    KV_LAYOUTS,
    SCENARIOS,
    Curves,
    GenerationWorkload,
    ServiceLevel,
)

SIDECAR_SUFFIXES = (".yaml", ".yml", ".json")
KNOWN_KEYS = {
    "inputs",
    "timeout_s",
    "warmup_iterations",
    "measured_iterations",
    "min_measured_seconds",
    "profiled_iterations",
    "execution_providers",
    "graph_optimization_level",
    "disabled_optimizers",
    "execution_mode",
    "inter_op_threads",
    "intra_op_threads",
    "streams",
    "tags",
    "generation",
    "counters",
    "objectives",
    "accuracy",
}
GENERATION_KEYS = {
    "prompt_tokens", "output_tokens", "scenarios", "requests", "min_duration_s", "batch_size",
    "target_qps", "slo", "curves", "kv_cache",
}  # fmt: skip
GRAPH_OPTIMIZATION_LEVELS = ("disabled", "basic", "extended", "all")
EXECUTION_MODES = ("sequential", "parallel")
INPUT_KEYS = {"shape", "dtype", "low", "high"}
# What a sidecar may give as an input's dtype: the numeric tensor types test data is made for.
SIDECAR_DTYPES = (
    "float32", "float16", "float64", "bfloat16", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
)  # fmt: skip
SIDECAR_HELP = "see the sidecar format in README (inputs: NAME: {shape: [...], dtype: ...})"
# The longest a measured pass (or a generation scenario) may be asked to last: an hour, far past
# the runner's default 600 s timeout; beyond it a value is a typo (1e300 s) that the worker
# would only find out by running into that timeout.
MAX_MEASURED_SECONDS = 3600.0
# A run's time limit (the measuring process killed past it): a day at most, a second at least.
TIMEOUT_RANGE_S = (1.0, 86400.0)
# TPOT is the time per output token after the first: (end - first token) / (tokens - 1).
MIN_OUTPUT_TOKENS = 2


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None


def input_specs_from_json(specs: Mapping[str, Mapping]) -> dict[str, InputSpec]:
    """Input specs as a request or a snapshot record stores them (JSON: shapes are lists)."""
    return {
        name: InputSpec(**{**spec, "shape": tuple(spec["shape"])}) for name, spec in specs.items()
    }


@dataclass(frozen=True)
class ModelSidecar:
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    warmup_iterations: int = 5
    measured_iterations: int = 50
    min_measured_seconds: float = 1.0
    profiled_iterations: int = 10
    execution_providers: tuple[str, ...] = ()
    graph_optimization_level: str = "all"
    disabled_optimizers: tuple[str, ...] = ()
    execution_mode: str = "sequential"
    inter_op_threads: int | None = None  # None: the runtime's choice
    intra_op_threads: int | None = None
    # parallel mode: the runtime nodes each stream (thread) runs, in order. ONNX Runtime 1.22
    # runs an all-CPU graph as one stream even in parallel mode unless told its streams
    # (session.node_partition_config_file)
    streams: tuple[tuple[str, ...], ...] = ()
    tags: dict[str, str] = field(default_factory=dict)
    generation: GenerationWorkload | None = (
        None  # None: not declared (the graph may still be a decoder)
    )
    counters: bool = False  # the runner's counter passes (execution.counter_passes)
    objectives: Objectives = NO_OBJECTIVES  # absolute limits (registry.objectives)
    # the model's own time limit for each measuring process (None: the runner's, 600 s)
    timeout_s: float | None = None
    # how far a tuned candidate's outputs may move from the model's (aaco tune)
    accuracy: AccuracyLimits = DEFAULT_LIMITS

    def to_dict(self) -> dict:
        data = asdict(self)
        data["objectives"] = {**self.objectives.limits}
        data["accuracy"] = changed_limits(self.accuracy)  # the defaults say nothing
        if not data["accuracy"]:
            data.pop("accuracy")
        if self.objectives.per_target:
            data["objectives"]["per_target"] = self.objectives.per_target
        if self.generation is None:
            data.pop("generation")
        else:
            data["generation"] = self.generation.to_dict()
        data["inputs"] = {
            name: {k: v for k, v in asdict(spec).items() if v is not None}
            for name, spec in self.inputs.items()
        }
        for name in data["inputs"]:
            data["inputs"][name]["shape"] = list(data["inputs"][name]["shape"])
        data["execution_providers"] = list(self.execution_providers)
        data["disabled_optimizers"] = list(self.disabled_optimizers)
        data["streams"] = [list(stream) for stream in self.streams]
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
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        problem = " ".join(f"sidecar cannot be parsed ({exc})".split())  # YAML's are multi-line
        raise AacoInputError(problem, path=path, fix=SIDECAR_HELP) from exc
    return parse_sidecar({} if data is None else data, path)


def parse_sidecar(data: dict, path: Path) -> ModelSidecar:
    """The sidecar checked in full when it is read: a value the worker would choke on (a list
    for `inputs`, `true` or NaN as a count, text as a bound) is an error naming this file and
    the key, not a failure later in the worker, which knows neither."""
    if not isinstance(data, dict):
        raise AacoInputError("sidecar must be a mapping", path=path, fix=SIDECAR_HELP)
    _refuse_unknown_keys(data, KNOWN_KEYS, "unknown sidecar keys {}", path)
    counts = {
        key: _count(data, key, path, default)
        for key, default in (
            ("warmup_iterations", 5),
            ("measured_iterations", 50),
            ("profiled_iterations", 10),
        )
    }
    min_seconds = _seconds(data, "min_measured_seconds", 1.0, path)
    counters = data.get("counters", False)
    if not isinstance(counters, bool):
        raise _wrong("counters", counters, "true or false", path, "true")
    level = data.get("graph_optimization_level", "all")
    if level not in GRAPH_OPTIMIZATION_LEVELS:
        raise _wrong(
            "graph_optimization_level", level, "a level", path, "all", GRAPH_OPTIMIZATION_LEVELS
        )
    mode = data.get("execution_mode", "sequential")
    if mode not in EXECUTION_MODES:
        raise _wrong("execution_mode", mode, "a mode", path, "parallel", EXECUTION_MODES)
    threads = {
        key: None if data.get(key) is None else _count(data, key, path, 1)
        for key in ("inter_op_threads", "intra_op_threads")
    }
    streams = _streams(data.get("streams"), mode, path)
    return ModelSidecar(
        inputs=_inputs(data.get("inputs"), path),
        execution_mode=mode,
        streams=streams,
        **threads,
        execution_providers=_names(
            data.get("execution_providers"), "execution_providers", path, "[CPUExecutionProvider]"
        ),
        graph_optimization_level=level,
        disabled_optimizers=_names(
            data.get("disabled_optimizers"), "disabled_optimizers", path, "[NchwcTransformer]"
        ),
        tags=_tags(data.get("tags"), path),
        generation=_generation(data["generation"], path) if "generation" in data else None,
        min_measured_seconds=min_seconds,
        counters=counters,
        objectives=parse_objectives(data.get("objectives"), path),
        accuracy=parse_accuracy(data.get("accuracy"), path),
        timeout_s=_number(data, "timeout_s", 600.0, path, *TIMEOUT_RANGE_S)
        if data.get("timeout_s") is not None
        else None,
        **counts,
    )


def _streams(streams, mode: str, path: Path) -> tuple[tuple[str, ...], ...]:
    """The parallel mode's streams: lists of runtime node names (none: the runtime's own)."""
    if streams is None or streams == []:
        return ()
    example = "[[a1, a2, join], [b1]]"
    if not isinstance(streams, list) or not all(
        isinstance(s, list) and s and all(isinstance(n, str) and n for n in s) for s in streams
    ):
        raise _wrong("streams", streams, "a list of lists of node names", path, example)
    if mode != "parallel":
        raise AacoInputError(
            "streams are run in parallel only with execution_mode: parallel",
            path=path,
            fix="add execution_mode: parallel, or remove streams",
        )
    return tuple(tuple(stream) for stream in streams)


def _generation(data, path: Path) -> GenerationWorkload:
    """The `generation` section, checked in full (an empty one means: the defaults)."""
    if data is None:
        return GenerationWorkload()
    if not isinstance(data, dict):
        raise _wrong("generation", data, "a mapping", path, "{prompt_tokens: 32}")
    _refuse_unknown_keys(data, GENERATION_KEYS, "unknown keys {} under generation", path)
    base = GenerationWorkload()
    return GenerationWorkload(
        prompt_tokens=_count(data, "prompt_tokens", path, base.prompt_tokens, "generation."),
        output_tokens=_output_tokens(data, path, base.output_tokens),
        scenarios=_scenarios(data.get("scenarios", list(base.scenarios)), path),
        requests=_count(data, "requests", path, base.requests, "generation."),
        min_duration_s=_seconds(data, "generation.min_duration_s", base.min_duration_s, path),
        batch_size=_count(data, "batch_size", path, base.batch_size, "generation."),
        target_qps=_number(data, "generation.target_qps", base.target_qps, path),
        slo=_slo(data.get("slo"), path),
        curves=_curves(data.get("curves"), path),
        kv_layout=_kv_layout(data.get("kv_cache"), path),
    )


def _output_tokens(data: dict, path: Path, default: int) -> int:
    """Tokens per request: at least two, or no request has a TPOT. With one, LoadGen reports a
    negative TPOT and every request counted as within the TPOT limit."""
    value = _count(data, "output_tokens", path, default, "generation.")
    if value < MIN_OUTPUT_TOKENS:
        raise AacoInputError(
            f"generation.output_tokens must be at least {MIN_OUTPUT_TOKENS}, not {value}: TPOT "
            "(time per output token after the first) needs two tokens or more",
            path=path,
            fix=f"write output_tokens: {default} (any integer >= {MIN_OUTPUT_TOKENS})",
        )
    return value


def _scenarios(scenarios, path: Path) -> tuple[str, ...]:
    if isinstance(scenarios, str):
        scenarios = [scenarios]
    if (
        not isinstance(scenarios, list)
        or not scenarios
        or any(s not in SCENARIOS for s in scenarios)
        or len(set(scenarios)) != len(scenarios)
    ):
        raise _wrong(
            "generation.scenarios", scenarios, "a list of distinct scenarios", path,
            "[single_stream, server]", SCENARIOS,
        )  # fmt: skip
    return tuple(scenarios)


def _slo(data, path: Path) -> ServiceLevel:
    base = ServiceLevel()
    if data is None:
        return base
    if not isinstance(data, dict) or set(map(str, data)) - {"ttft_ms", "tpot_ms"}:
        raise _wrong(
            "generation.slo", data, "a mapping of ttft_ms, tpot_ms", path, "{ttft_ms: 500}"
        )
    return ServiceLevel(
        ttft_ms=_number(data, "generation.slo.ttft_ms", base.ttft_ms, path),
        tpot_ms=_number(data, "generation.slo.tpot_ms", base.tpot_ms, path),
    )


def _curves(data, path: Path) -> Curves:
    keys = {"batch_sizes", "prompt_lengths", "repeats"}
    if data is None:
        return Curves()
    if not isinstance(data, dict) or set(map(str, data)) - keys:
        raise _wrong(
            "generation.curves", data, f"a mapping of {', '.join(sorted(keys))}", path,
            "{batch_sizes: [1, 2, 4], prompt_lengths: [16, 32]}",
        )  # fmt: skip
    lists = {}
    for key in ("batch_sizes", "prompt_lengths"):
        values = data.get(key, [])
        if not isinstance(values, list) or not all(_is_count(v) and v > 0 for v in values):
            raise _wrong(
                f"generation.curves.{key}", values, "a list of positive integers", path, "[1, 2, 4]"
            )
        lists[key] = tuple(values)
    return Curves(**lists, repeats=_count(data, "repeats", path, 2, "generation.curves."))


def _kv_layout(data, path: Path) -> str:
    layout = data.get("layout", "bnsh") if isinstance(data, dict) else data
    if data is None:
        layout = "bnsh"
    if layout not in KV_LAYOUTS:
        raise _wrong("generation.kv_cache.layout", layout, "a layout", path, "bnsh", KV_LAYOUTS)
    return layout


def _number(
    data: dict,
    key: str,
    default: float,
    path: Path,
    least: float | None = None,
    most: float | None = None,
) -> float:
    """A finite number: positive, or at least `least` when that is given; at most `most`."""
    value = data.get(key.rsplit(".", 1)[-1], default)
    too_small = _is_number(value) and (value < least if least is not None else value <= 0)
    if not _is_number(value) or too_small or (most is not None and value > most):
        wanted = f"a number >= {least}" if least is not None else "a positive number"
        if most is not None:
            wanted += f" and <= {most:g}"
        raise _wrong(key, value, wanted, path, str(default))
    return float(value)


def _seconds(data: dict, key: str, default: float, path: Path) -> float:
    """A duration to measure for: 0 to MAX_MEASURED_SECONDS."""
    return _number(data, key, default, path, 0.0, MAX_MEASURED_SECONDS)


def _inputs(inputs, path: Path) -> dict[str, InputSpec]:
    if inputs is None:
        return {}
    if not isinstance(inputs, dict):
        raise _wrong("inputs", inputs, "a mapping of input names", path, "{x: {shape: [1, 8]}}")
    _names_are_text(inputs, "input", path)
    return {name: _parse_input(name, spec, path) for name, spec in inputs.items()}


def _parse_input(name: str, spec: dict, path: Path) -> InputSpec:
    if not isinstance(spec, dict) or "shape" not in spec:
        raise AacoInputError(
            f"input '{name}' needs a shape",
            path=path,
            fix=f"write inputs: {name}: {{shape: [...]}}",
        )
    _refuse_unknown_keys(spec, INPUT_KEYS, f"unknown keys {{}} in input '{name}'", path)
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(_is_count(d) and d > 0 for d in shape):
        raise AacoInputError(
            f"input '{name}' shape {excerpt(shape)} is not a list of positive integers",
            path=path,
            fix="give every dimension as a number, e.g. shape: [1, 3, 224, 224]",
        )
    dtype = spec.get("dtype", "float32")
    if dtype not in SIDECAR_DTYPES:
        raise _wrong(
            f"inputs.{name}.dtype", dtype, "a tensor type", path, "float32", SIDECAR_DTYPES
        )
    low, high = (_bound(name, key, spec.get(key), path) for key in ("low", "high"))
    if low is not None and high is not None and not low < high:
        raise AacoInputError(f"input '{name}' has low >= high", path=path, fix="make low < high")
    return InputSpec(shape=tuple(shape), dtype=dtype, low=low, high=high)


def _bound(name: str, key: str, value, path: Path) -> float | None:
    if value is not None and not _is_number(value):
        example = "0" if key == "low" else "1"
        raise _wrong(f"inputs.{name}.{key}", value, "a finite number", path, example)
    return value


def _refuse_unknown_keys(data: dict, known: set[str], problem: str, path: Path) -> None:
    """A key the format does not have (a typo, most likely) is an error listing the known ones;
    `problem` has a {} for the unknown keys."""
    unknown = set(map(str, data)) - known
    if unknown:
        raise AacoInputError(
            problem.format(sorted(unknown)), path=path, fix=f"use only {sorted(known)}"
        )


def _count(data: dict, key: str, path: Path, default: int, prefix: str = "") -> int:
    value = data.get(key, default)
    least = 0 if key == "warmup_iterations" else 1
    if not _is_count(value) or value < least:
        wanted = "a positive integer" if least else "an integer >= 0"
        raise _wrong(prefix + key, value, wanted, path, str(default))
    return value


def _names(names, key: str, path: Path, example: str) -> tuple[str, ...]:
    """A list of names (providers, optimizers); one name alone is a list of one."""
    if names is None:
        return ()
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise _wrong(key, names, "a list of names", path, example)
    return tuple(names)


def _tags(tags, path: Path) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, dict):
        raise _wrong("tags", tags, "a mapping of names to text", path, "{family: bert}")
    _names_are_text(tags, "tag", path)
    for key, value in tags.items():
        if not isinstance(value, str):
            # YAML reads `1.10` as 1.1 and `no` as False: only quoted text is kept as written.
            raise _wrong(f"tags.{key}", value, "text", path, "'...' (in quotes)")
    return dict(tags)


def _names_are_text(mapping: dict, what: str, path: Path) -> None:
    for name in mapping:
        if not isinstance(name, str):
            raise AacoInputError(
                f"{what} name {excerpt(name)} is not text",
                path=path,
                fix=f"quote it: '{excerpt(name)}'",
            )


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A real, finite number: YAML's `true`, `.nan` and `.inf` are not."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _wrong(
    key: str, value, wanted: str, path: Path, example: str, choices: tuple[str, ...] = ()
) -> AacoInputError:
    """The one-line error for a sidecar value of the wrong kind, with an example of a right one."""
    among = f" (one of {', '.join(choices)})" if choices else ""
    return AacoInputError(
        f"{key} must be {wanted}{among}, not {excerpt(value)}",
        path=path,
        fix=f"write {key.rsplit('.', 1)[-1]}: {example}",
    )

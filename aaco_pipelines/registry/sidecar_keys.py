"""What every sidecar key means: one table per section, for the documentation site.

The parser (registry.sidecar, registry.workload) decides what a sidecar may say; this module
says it to people. Its entries are written from that parser: the kinds, defaults and ranges it
enforces, with the ranges and choices taken from its own constants where it has them. The
reference page (docs/reference_pages.py) fails the site's build, and tests/test_docs_reference.py
fails, when a key of KNOWN_KEYS, GENERATION_KEYS or INPUT_KEYS has no entry here, or an entry
names a key the parser no longer knows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from aaco_pipelines.registry.accuracy_limits import DEFAULT_LIMITS
from aaco_pipelines.registry.objectives import LARGEST_LIMIT, PER_TARGET, SMALLEST_LIMIT
from aaco_pipelines.registry.sidecar import (
    EXECUTION_MODES,
    GRAPH_OPTIMIZATION_LEVELS,
    MAX_MEASURED_SECONDS,
    MIN_OUTPUT_TOKENS,
    SIDECAR_DTYPES,
    TIMEOUT_RANGE_S,
    ModelSidecar,
)
from aaco_pipelines.registry.workload import KV_LAYOUTS, SCENARIOS, Curves, GenerationWorkload


@dataclass(frozen=True)
class KeyDoc:
    """One key: the kind of value it takes, its value when left out, what it may be, and why
    one would write it."""

    kind: str
    default: str
    allowed: str
    meaning: str


def _one_of(choices: tuple[str, ...]) -> str:
    return "one of " + ", ".join(f"`{choice}`" for choice in choices)


_SIDECAR = ModelSidecar()
_WORKLOAD = GenerationWorkload()
_LEAST_S, _MOST_S = TIMEOUT_RANGE_S
_SECONDS = f"0 to {MAX_MEASURED_SECONDS:g} s"

SIDECAR_KEYS: dict[str, KeyDoc] = {
    "inputs": KeyDoc(
        "mapping: input name to {shape, dtype, low, high}",
        "none: every input of the model must have static dimensions",
        "names of the model's inputs; each entry's keys are in the inputs table below",
        "How to make each input's test data. Required for every input with a dynamic "
        "dimension; a shape may fill in dynamic dimensions, never contradict static ones.",
    ),
    "timeout_s": KeyDoc(
        "number (seconds)",
        "the runner's limit, 600 s (aaco run --timeout, the runner resource's timeout_s)",
        f"{_LEAST_S:g} to {_MOST_S:g}",
        "The model's own time limit for each measuring process: it is killed past it and the "
        "run fails naming this key.",
    ),
    "warmup_iterations": KeyDoc(
        "integer",
        str(_SIDECAR.warmup_iterations),
        "0 or more",
        "Runs before the measured pass, not counted (caches, kernels compiled, clocks up).",
    ),
    "measured_iterations": KeyDoc(
        "integer",
        str(_SIDECAR.measured_iterations),
        "1 or more",
        "At least this many measured runs: the latency and throughput figures are theirs.",
    ),
    "min_measured_seconds": KeyDoc(
        "number (seconds)",
        f"{_SIDECAR.min_measured_seconds:g}",
        _SECONDS,
        "The measured pass also lasts at least this long: a fast model runs more than "
        "measured_iterations times.",
    ),
    "profiled_iterations": KeyDoc(
        "integer",
        str(_SIDECAR.profiled_iterations),
        "1 or more",
        "Runs under the profilers (ONNX Runtime's profile, the device trace): the kernel "
        "events, attribution and critical path come from these.",
    ),
    "execution_providers": KeyDoc(
        "list of names (one name alone is a list of one)",
        "automatic: MIGraphXExecutionProvider, else ROCMExecutionProvider where an AMD GPU is "
        "visible, then CPUExecutionProvider",
        "ONNX Runtime execution provider names",
        "The providers the session asks ONNX Runtime for, in order; the ones it really used "
        "are recorded with the session.",
    ),
    "graph_optimization_level": KeyDoc(
        "text",
        f"`{_SIDECAR.graph_optimization_level}`",
        _one_of(GRAPH_OPTIMIZATION_LEVELS),
        "ONNX Runtime's graph optimization level for the session.",
    ),
    "disabled_optimizers": KeyDoc(
        "list of names (one name alone is a list of one)",
        "none",
        "ONNX Runtime graph transformer names, e.g. `NchwcTransformer`",
        "Graph transformers to leave out, by name.",
    ),
    "execution_mode": KeyDoc(
        "text",
        f"`{_SIDECAR.execution_mode}`",
        _one_of(EXECUTION_MODES),
        "ONNX Runtime's execution mode: `parallel` runs independent nodes at once "
        "(inter-op threads).",
    ),
    "inter_op_threads": KeyDoc(
        "integer",
        "the runtime's choice",
        "1 or more",
        "Threads running independent nodes at once (parallel mode).",
    ),
    "intra_op_threads": KeyDoc(
        "integer",
        "the runtime's choice",
        "1 or more",
        "Threads inside one node (1 for what-if predictions).",
    ),
    "streams": KeyDoc(
        "list of lists of runtime node names",
        "none: the runtime's own streams",
        "non-empty lists of node names; only with `execution_mode: parallel`",
        "The runtime nodes each stream (thread) runs, in order: without them ONNX Runtime runs "
        "an all-CPU graph as one stream even in parallel mode.",
    ),
    "tags": KeyDoc(
        "mapping of name to text",
        "none",
        "text values only (quote `1.10` or `no`: YAML reads them as a number or false)",
        "Labels kept with the model and its sessions, e.g. `{family: bert}`.",
    ),
    "generation": KeyDoc(
        "mapping (its keys in the generation table below)",
        "not declared: a decoder found in the graph still gets the generation defaults",
        "the generation keys; an empty section means every default",
        "An LLM decoder's generation workload: MLPerf LoadGen scenarios, requests, "
        "service-level limits and curves.",
    ),
    "counters": KeyDoc(
        "true or false",
        "false",
        "`true`, `false`",
        "Hardware counter passes (rocprofv3 --pmc), on AMD GPU hosts: the kernel diagnosis "
        "and counter roofline read them.",
    ),
    "objectives": KeyDoc(
        f"mapping of objective to limit, and `{PER_TARGET}`",
        "none (the registry's aaco-objectives.yaml may still set limits)",
        f"the objectives below, each a number from {SMALLEST_LIMIT:g} to {LARGEST_LIMIT:g}; "
        f"`{PER_TARGET}: {{target: {{objective: limit}}}}`",
        "Service-level objectives (SLOs): absolute limits on the model's headline figures, "
        "judged on every session; a breach opens an alert.",
    ),
    "accuracy": KeyDoc(
        "mapping of metric to limit",
        ", ".join(f"`{k}: {v:g}`" for k, v in asdict(DEFAULT_LIMITS).items()),
        "`max_abs_error` and `max_rel_error` a number >= 0; `min_cosine` -1 to 1; "
        "`min_top1_agreement` 0 to 1",
        "How far a tuned candidate's outputs may move from the model's and still count as "
        "correct (the defaults pass a float reordering and stop int8): loosen them to let a "
        "lower precision through. See Concepts, Tuning.",
    ),
}

GENERATION_SIDECAR_KEYS: dict[str, KeyDoc] = {
    "prompt_tokens": KeyDoc(
        "integer", str(_WORKLOAD.prompt_tokens), "1 or more", "Tokens per prompt."
    ),
    "output_tokens": KeyDoc(
        "integer",
        str(_WORKLOAD.output_tokens),
        f"{MIN_OUTPUT_TOKENS} or more",
        "Tokens generated per request (greedy, no early stop); two at least, or no request "
        "has a time per output token.",
    ),
    "scenarios": KeyDoc(
        "list of names (one name alone is a list of one)",
        ", ".join(f"`{s}`" for s in _WORKLOAD.scenarios),
        "distinct names, each " + _one_of(SCENARIOS),
        "MLPerf LoadGen scenarios, run in this order; the first is the session's headline "
        "(its drift series and gate).",
    ),
    "requests": KeyDoc(
        "integer",
        str(_WORKLOAD.requests),
        "1 or more",
        "Queries per scenario (LoadGen's minimum query count).",
    ),
    "min_duration_s": KeyDoc(
        "number (seconds)",
        f"{_WORKLOAD.min_duration_s:g}",
        _SECONDS,
        "And each scenario lasts at least this long (server, single stream).",
    ),
    "batch_size": KeyDoc(
        "integer",
        str(_WORKLOAD.batch_size),
        "1 or more",
        "The most requests one batch may hold (server, offline).",
    ),
    "target_qps": KeyDoc(
        "number (queries per second)",
        f"{_WORKLOAD.target_qps:g}",
        "more than 0",
        "Server scenario: Poisson arrivals at this rate.",
    ),
    "slo": KeyDoc(
        "mapping of `ttft_ms`, `tpot_ms`",
        f"`{{ttft_ms: {_WORKLOAD.slo.ttft_ms:g}, tpot_ms: {_WORKLOAD.slo.tpot_ms:g}}}`",
        "each more than 0 (milliseconds)",
        "The latency limits a request must meet to count towards goodput: time to first token "
        "and time per output token.",
    ),
    "curves": KeyDoc(
        "mapping of `batch_sizes`, `prompt_lengths`, `repeats`",
        f"none (no curves); repeats {Curves().repeats}",
        "lists of positive integers; repeats 1 or more",
        "Latency and throughput against batch size (at prompt_tokens) and against prompt "
        "length (at batch 1), `repeats` batches at each point.",
    ),
    "kv_cache": KeyDoc(
        "mapping `{layout: ...}`, or the layout alone",
        f"`{_WORKLOAD.kv_layout}`",
        _one_of(KV_LAYOUTS),
        "The layout of the past/present KV cache tensors: `bnsh` is "
        "[batch, kv_heads, sequence, head_dim] (Optimum, ONNX Runtime GenAI).",
    ),
}

INPUT_SIDECAR_KEYS: dict[str, KeyDoc] = {
    "shape": KeyDoc(
        "list of integers",
        "required",
        "positive integers, one per dimension",
        "The concrete shape the input is fed with, e.g. `[1, 3, 224, 224]`.",
    ),
    "dtype": KeyDoc(
        "text",
        "the type the model declares for the input, else `float32`",
        _one_of(SIDECAR_DTYPES),
        "The tensor type of the generated data, where the model does not declare one.",
    ),
    "low": KeyDoc(
        "number",
        "none",
        "a finite number, below `high`",
        "Lower bound of generated values: integers uniform in [low, high) (zeros with neither "
        "bound), floats uniform in [low, high) (standard normal with neither bound).",
    ),
    "high": KeyDoc(
        "number",
        "none",
        "a finite number, above `low`",
        "Upper bound (excluded) of generated values, e.g. a vocabulary size for token ids.",
    ),
}

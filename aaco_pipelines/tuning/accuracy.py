"""The correctness guard of `aaco tune`: does a candidate still compute what the baseline does?

A faster candidate is worth nothing if its outputs moved. Both run on the same fixed-seed inputs
(the measuring process's own, `graph.inputs.make_inputs`) and their outputs are compared one by
one, in float64:

- `max_abs_error`  max |c - r|.
- `max_rel_error`  max |c - r| / max(|r|, RELATIVE_ERROR_FLOOR x max|r|): relative to the element,
  or to 1 % of the output's largest magnitude where the element is smaller, so that a value near
  zero cannot turn a 1e-7 wobble into a 100 % error, and an output of magnitude 1e-25 (a random
  MobileNet's logits) is judged as strictly as one of magnitude 1.
- `cosine`         <c, r> / (|c| |r|) over the whole output (1 when both are all zeros).
- `top1_agreement` for classifier-like outputs (float, a leading batch axis, last axis > 1): the
  share of rows (every position but the last axis) where the candidate's top class is a top class
  of the reference (an exact tie in the reference agrees with either); None for other outputs.

A different shape or dtype, or NaN/Inf where the reference is finite, fails the output outright.
The defaults (AccuracyLimits) let a float reordering through and stop dynamic int8 quantization;
each says what it was chosen from (docs/concepts/tuning.md has the table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.ort_session import create_session, session_options
from aaco_pipelines.foundation.extras import needed
from aaco_pipelines.foundation.quoting import excerpt, printable
from aaco_pipelines.graph.inputs import (
    declared_dims,
    graph_inputs,
    load_model,
    make_inputs,
    resolve_input_specs,
)
from aaco_pipelines.registry.accuracy_limits import DEFAULT_LIMITS, LIMITS, AccuracyLimits
from aaco_pipelines.registry.sidecar import InputSpec, load_sidecar

# Below 1 % of an output's largest magnitude, an element's error is relative to that 1 %.
RELATIVE_ERROR_FLOOR = 0.01


@dataclass(frozen=True)
class OutputAccuracy:
    """One output's figures; `problem` (shape, dtype, non-finite values) when it has none."""

    name: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    cosine: float | None = None
    top1_agreement: float | None = None  # None: not classifier-like
    problem: str | None = None


@dataclass(frozen=True)
class AccuracyVerdict:
    """The candidate's figures against its limits: overall (the worst output's) and per output,
    whether it passed, and why not in one line (or the figures when it did)."""

    passed: bool
    reason: str
    limits: AccuracyLimits
    outputs: tuple[OutputAccuracy, ...]
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    cosine: float | None = None
    top1_agreement: float | None = None

    def figures(self) -> dict[str, float | None]:
        """{figure: overall value}, as the tuner's JSON reports a candidate's accuracy."""
        return {figure: getattr(self, figure) for figure, *_ in LIMITS.values()}


Outputs = Sequence[np.ndarray] | Mapping[str, np.ndarray]


def compare_outputs(
    reference: Outputs, candidate: Outputs, limits: AccuracyLimits = DEFAULT_LIMITS
) -> AccuracyVerdict:
    """The candidate's outputs against the reference's (lists in the same order, or mappings by
    output name, as `run_outputs` returns them), judged against `limits`."""
    ref, cand = _named(reference), _named(candidate)
    if list(ref) != list(cand):
        return AccuracyVerdict(
            False,
            printable(f"the candidate's outputs {list(cand)} are not the reference's {list(ref)}"),
            limits,
            (),
        )
    outputs = tuple(_compare(name, ref[name], cand[name]) for name in ref)
    return _verdict(outputs, limits)


def _named(outputs: Outputs) -> dict[str, np.ndarray]:
    if isinstance(outputs, Mapping):
        return {str(name): np.asarray(value) for name, value in outputs.items()}
    return {str(i): np.asarray(value) for i, value in enumerate(outputs)}


def _compare(name: str, r: np.ndarray, c: np.ndarray) -> OutputAccuracy:
    if r.shape != c.shape:
        return OutputAccuracy(name, problem=f"shape {list(c.shape)} differs from {list(r.shape)}")
    if r.dtype != c.dtype:
        return OutputAccuracy(name, problem=f"dtype {c.dtype} differs from {r.dtype}")
    if r.dtype.kind not in "biuf":  # strings, objects, complex: equal or not
        same = np.array_equal(r, c)
        return OutputAccuracy(name, problem=None if same else f"{r.dtype} values differ")
    r64, c64 = r.astype(np.float64).ravel(), c.astype(np.float64).ravel()
    finite = np.isfinite(r64)
    moved = ~finite & ~((c64 == r64) | (np.isnan(c64) & np.isnan(r64)))
    if moved.any():
        return OutputAccuracy(
            name,
            problem=f"{np.count_nonzero(moved)} of the reference's non-finite values differ",
        )
    appeared = finite & ~np.isfinite(c64)
    if appeared.any():
        nan = int(np.count_nonzero(appeared & np.isnan(c64)))
        inf = int(np.count_nonzero(appeared)) - nan
        kinds = " and ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "Inf")) if n)
        return OutputAccuracy(
            name, problem=f"{kinds} where the reference is finite (of {r64.size} values)"
        )
    r64, c64 = r64[finite], c64[finite]
    error = np.abs(c64 - r64)
    floor = max(RELATIVE_ERROR_FLOOR * float(np.abs(r64).max(initial=0.0)), np.finfo(float).tiny)
    return OutputAccuracy(
        name,
        max_abs_error=float(error.max(initial=0.0)),
        max_rel_error=float((error / np.maximum(np.abs(r64), floor)).max(initial=0.0)),
        cosine=1.0 if not error.any() else _cosine(r64, c64),  # identical: exactly 1
        top1_agreement=top1_agreement(r, c) if classifier_like(r) else None,
    )


def _cosine(r: np.ndarray, c: np.ndarray) -> float:
    norms = float(np.linalg.norm(r)), float(np.linalg.norm(c))
    if 0.0 in norms:
        return 1.0 if norms[0] == norms[1] else 0.0
    return float(np.clip(np.dot(r, c) / (norms[0] * norms[1]), -1.0, 1.0))


def classifier_like(output: np.ndarray) -> bool:
    """Scores over classes (or a vocabulary): float, a leading batch axis, more than one class."""
    return (
        output.dtype.kind == "f" and output.ndim >= 2 and output.shape[-1] > 1 and output.size > 0
    )


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """The share of rows whose candidate top class is a top class of the reference (an exact tie
    there agrees with either); rows where the reference is not finite are left out."""
    ref = reference.reshape(-1, reference.shape[-1])
    cand = candidate.reshape(-1, candidate.shape[-1])
    rows = np.isfinite(ref).all(axis=-1)
    ref, cand = ref[rows], cand[rows]
    if not len(ref):
        return None
    picked = np.take_along_axis(ref, cand.argmax(axis=-1)[:, None], axis=-1)[:, 0]
    return float(np.mean(picked == ref.max(axis=-1)))


def _verdict(outputs: tuple[OutputAccuracy, ...], limits: AccuracyLimits) -> AccuracyVerdict:
    overall = {}
    for figure, bound, _, _ in LIMITS.values():
        values = [v for o in outputs if (v := getattr(o, figure)) is not None]
        overall[figure] = (max if bound == "max" else min)(values) if values else None
    problem = next((o for o in outputs if o.problem), None)
    if problem is not None:
        reason = f"{problem.problem} (output '{printable(problem.name)}')"
        return AccuracyVerdict(False, reason, limits, outputs, **overall)
    failures = []  # (how far past its limit, figure, bound, value, limit, output)
    for o in outputs:
        for limit_name, (figure, bound, _, _) in LIMITS.items():
            value, limit = getattr(o, figure), getattr(limits, limit_name)
            if value is not None and (value > limit if bound == "max" else value < limit):
                failures.append(
                    (_overshoot(value, limit, bound), figure, bound, value, limit, o.name)
                )
    if not failures:
        shown = ", ".join(f"{f} {_show(f, v)}" for f, v in overall.items() if v is not None)
        return AccuracyVerdict(True, f"within limits: {shown}", limits, outputs, **overall)
    _, figure, bound, value, limit, name = max(failures, key=lambda f: f[0])
    side = "over" if bound == "max" else "under"
    reason = f"{figure} {_show(figure, value)} {side} its limit {_show(figure, limit)} "
    reason += f"(output '{printable(name)}')"
    others = sorted({f[1] for f in failures} - {figure})
    if others:
        reason += f"; also past its limit: {', '.join(others)}"
    return AccuracyVerdict(False, reason, limits, outputs, **overall)


def _overshoot(value: float, limit: float, bound: str) -> float:
    """How many times its limit's allowance a figure uses: the worst failure is the reason."""
    used, allowed = (value, limit) if bound == "max" else (1.0 - value, 1.0 - limit)
    return used / allowed if allowed > 0 else math.inf


def _show(figure: str, value: float) -> str:
    """Errors with 3 digits; cosine and agreement with enough to tell 0.9999996 from 1."""
    return f"{value:.3g}" if figure.endswith("error") else f"{value:.10g}"


# --- running the model --------------------------------------------------------------------------

# The sidecar keys that shape an ONNX Runtime session (execution.ort_session reads them).
SESSION_KEYS = (
    "graph_optimization_level", "disabled_optimizers", "execution_mode", "inter_op_threads",
    "intra_op_threads", "streams",
)  # fmt: skip


def fixed_seed_inputs(
    model_path: Path, seed: int = 0, batch_size: int | None = None
) -> dict[str, np.ndarray]:
    """The model's inputs at `seed`, as the measuring process makes them (shapes from the model
    and its sidecar), its attention masks unmasked (mask_inputs_open); with `batch_size`, every
    input with a dynamic leading axis at that size."""
    model_path = Path(model_path)
    model = load_model(model_path)
    given = dict(load_sidecar(model_path).inputs)
    if batch_size is not None:
        given.update(_batched(model, given, batch_size, model_path))
    return mask_inputs_open(make_inputs(resolve_input_specs(model, given, model_path), seed=seed))


def mask_inputs_open(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Integer inputs named as masks set to ones. A random 0/1 attention mask masks whole query
    rows, and the [CLS] token a pooler reads half the time: the outputs there are unspecified,
    and a correct fused attention differs there (bert_classic_ts through ONNX Runtime's
    optimizer: max_rel_error 0.83 on a random mask, 0 on ones). Timing uses the random mask;
    correctness is judged where the model's outputs mean something."""
    return {
        name: np.ones_like(value)
        if "mask" in name.lower() and np.issubdtype(value.dtype, np.integer)
        else value
        for name, value in inputs.items()
    }


def _batched(model, given: dict[str, InputSpec], batch_size, path: Path) -> dict[str, InputSpec]:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise AacoInputError(
            f"batch size must be a whole number >= 1, not {excerpt(batch_size)}",
            path=path,
            fix="e.g. a batch size of 4",
        )
    batched = {}
    for value_info in graph_inputs(model):
        dims, spec = declared_dims(value_info), given.get(value_info.name)
        if not dims or isinstance(dims[0], int):
            continue  # no leading axis, or a fixed one
        if spec is None and not all(isinstance(d, int) for d in dims[1:]):
            continue  # other dynamic axes: resolve_input_specs asks for a sidecar entry
        rest = spec.shape[1:] if spec else dims[1:]
        low, high = (spec.low, spec.high) if spec else (None, None)
        dtype = spec.dtype if spec else "float32"  # the model's dtype wins when resolved
        batched[value_info.name] = InputSpec((batch_size, *rest), dtype, low, high)
    if not batched:
        raise AacoInputError(
            f"no input has a dynamic leading (batch) axis to run at batch size {batch_size}",
            path=path,
            fix="leave the batch size out, or export the model with a dynamic batch axis",
        )
    return batched


def run_outputs(model_path: Path, inputs: Mapping[str, np.ndarray], config=None) -> dict:
    """{output name: array} from a real ONNX Runtime session on the CPU provider, opened the way
    every measurement opens one (execution.ort_session). `config` is an ort.SessionOptions, or
    the session's sidecar keys (a mapping, a ModelSidecar or a request; None: the defaults)."""
    ort = needed("onnxruntime")
    request: dict = {"model_path": str(model_path), "resolved_providers": ["CPUExecutionProvider"]}
    if isinstance(config, ort.SessionOptions):
        options = config
    else:
        get = config.get if isinstance(config, Mapping) else lambda k: getattr(config, k, None)
        request.update({k: get(k) for k in SESSION_KEYS if get(k) is not None})
        options = session_options(ort, request)
    session = create_session(ort, request, options)
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(inputs)), strict=True))

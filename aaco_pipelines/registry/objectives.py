"""Objectives (SLOs): absolute limits a team sets on a model's headline figures.

In the model's sidecar, or for many models at once in the registry's `aaco-objectives.yaml`:

    objectives:                   # sidecar: this model
      latency_p99_ms: 8           # a ceiling: the p99 of the measured pass at most 8 ms
      throughput_per_s_min: 100   # `_min`: a floor
      ttft_p90_ms: 200            # generation sessions: their headline scenario's requests
      per_target: {gpu0: {latency_p99_ms: 4}}   # a target's own limits override the others

    # <registry>/aaco-objectives.yaml
    default: {latency_p99_ms: 50}          # every model
    models: {bert_encoder: {latency_p99_ms: 8}}   # by model name (or its slug)

A model's limits are the registry default's, then the registry file's entry for it, then its
sidecar's, each overriding the one before; then the session's target's `per_target` limits. They
are resolved when a run is requested and recorded in its bundle (request.json "objectives"), so
each session is judged against the limits it was measured under (governance.alerts.objectives).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.bounded_yaml import load_yaml
from aaco_pipelines.foundation.quoting import excerpt

REGISTRY_OBJECTIVES_FILE = "aaco-objectives.yaml"
PER_TARGET = "per_target"
_QUANTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


@dataclass(frozen=True)
class ObjectiveKind:
    """What an objective's key limits: which samples, which statistic of them, which way."""

    source: str  # iterations | requests | itl | peak_memory
    statistic: str  # quantile | mean | rate | reading
    column: str | None  # the requests' column a quantile is taken of
    quantile: float | None
    bound: str  # max (a ceiling) | min (a floor)
    unit: str  # ms | per_s | MB, what the key's value is in
    description: str


def _catalogue() -> dict[str, ObjectiveKind]:
    kinds: dict[str, ObjectiveKind] = {}
    for name, q in _QUANTILES.items():
        kinds[f"latency_{name}_ms"] = ObjectiveKind(
            "iterations", "quantile", None, q, "max", "ms", f"{name} of the measured pass"
        )
        for figure, words in (("ttft", "time to first token"), ("tpot", "time per output token"),
                              ("e2e", "request latency, end to end")):  # fmt: skip
            kinds[f"{figure}_{name}_ms"] = ObjectiveKind(
                "requests", "quantile", f"{figure}_ns", q, "max", "ms",
                f"{name} {words} of the headline scenario's requests",
            )  # fmt: skip
        kinds[f"itl_{name}_ms"] = ObjectiveKind(
            "itl", "quantile", None, q, "max", "ms", f"{name} inter-token latency (decode steps)"
        )
    kinds["latency_mean_ms"] = ObjectiveKind(
        "iterations", "mean", None, None, "max", "ms", "mean of the measured pass"
    )
    kinds["throughput_per_s_min"] = ObjectiveKind(
        "iterations", "rate", None, None, "min", "per_s", "inferences per second (1 / mean)"
    )
    kinds["output_tokens_per_s_min"] = ObjectiveKind(
        "requests", "rate", "output_tokens", None, "min", "per_s",
        "output tokens per second of the headline scenario",
    )  # fmt: skip
    kinds["goodput_per_s_min"] = ObjectiveKind(
        "requests", "rate", "within_slo", None, "min", "per_s",
        "requests per second within the generation SLO (TTFT and TPOT)",
    )  # fmt: skip
    kinds["peak_memory_mb"] = ObjectiveKind(
        "peak_memory", "reading", None, None, "max", "MB", "the measuring worker's peak memory"
    )
    return kinds


OBJECTIVE_KINDS = _catalogue()
OBJECTIVES_HELP = (
    "objectives map a figure to its limit, e.g. {latency_p99_ms: 8, throughput_per_s_min: 100}; "
    "known figures: " + ", ".join(sorted(OBJECTIVE_KINDS))
)


@dataclass(frozen=True)
class Objectives:
    """Limits as written in one place: for every target, and per target."""

    limits: dict[str, float]
    per_target: dict[str, dict[str, float]]

    def for_target(self, target: str) -> dict[str, float]:
        return {**self.limits, **self.per_target.get(target, {})}


NO_OBJECTIVES = Objectives({}, {})


SMALLEST_LIMIT, LARGEST_LIMIT = 1e-6, 1e12  # ms, MB or per second: any real limit fits


def parse_objectives(data, path: Path, where: str = "objectives") -> Objectives:
    """An `objectives` mapping checked in full: known figures, positive finite numbers."""
    if data is None:
        return NO_OBJECTIVES
    if not isinstance(data, dict):
        raise AacoInputError(f"{where} must be a mapping", path=path, fix=OBJECTIVES_HELP)
    per_target = data.get(PER_TARGET) or {}
    if not isinstance(per_target, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in per_target.items()
    ):
        raise AacoInputError(
            f"{where}.{PER_TARGET} must map a target to its limits",
            path=path,
            fix="e.g. per_target: {gpu0: {latency_p99_ms: 4}}",
        )
    return Objectives(
        _limits({k: v for k, v in data.items() if k != PER_TARGET}, path, where),
        {t: _limits(v, path, f"{where}.{PER_TARGET}.{t}") for t, v in per_target.items()},
    )


def _limits(data: dict, path: Path, where: str) -> dict[str, float]:
    unknown = sorted(str(k) for k in data if k not in OBJECTIVE_KINDS)
    if unknown:
        raise AacoInputError(
            f"unknown objectives under {where}: {', '.join(unknown)}",
            path=path,
            fix=OBJECTIVES_HELP,
        )
    limits = {}
    for key, value in data.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        # checked before any arithmetic: a 400-digit limit overflows a float, a 5e-324 one
        # divides to infinity
        if not number or not (SMALLEST_LIMIT <= value <= LARGEST_LIMIT):
            raise AacoInputError(
                f"{where}.{key} must be a number from {SMALLEST_LIMIT:g} to "
                f"{LARGEST_LIMIT:g}, not {excerpt(value)}",
                path=path,
                fix=f"e.g. {key}: {8 if OBJECTIVE_KINDS[key].bound == 'max' else 100}",
            )
        limits[key] = float(value)
    return limits


def registry_objectives(registry: Path, name: str, slug: str) -> Objectives:
    """The registry file's limits for one model: its `default`, then its entry under
    `models` (by name, or by slug), merged."""
    path = registry / REGISTRY_OBJECTIVES_FILE
    if not path.is_file():
        return NO_OBJECTIVES
    try:
        data = load_yaml(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        problem = " ".join(f"objectives file cannot be parsed ({exc})".split())
        raise AacoInputError(problem, path=path, fix=OBJECTIVES_HELP) from exc
    if not isinstance(data, dict) or set(map(str, data)) - {"default", "models"}:
        raise AacoInputError(
            "the registry's objectives file has two keys: default and models",
            path=path,
            fix="default: {latency_p99_ms: 50}\nmodels: {bert_encoder: {latency_p99_ms: 8}}",
        )
    models = data.get("models") or {}
    if not isinstance(models, dict):
        raise AacoInputError("models must map a model name to its objectives", path=path)
    default = parse_objectives(data.get("default"), path, "default")
    entry = models.get(name, models.get(slug))
    return merged(default, parse_objectives(entry, path, f"models.{name}"))


def merged(first: Objectives, then: Objectives) -> Objectives:
    """`then`'s limits over `first`'s, target by target."""
    targets = set(first.per_target) | set(then.per_target)
    return Objectives(
        {**first.limits, **then.limits},
        {t: {**first.per_target.get(t, {}), **then.per_target.get(t, {})} for t in targets},
    )

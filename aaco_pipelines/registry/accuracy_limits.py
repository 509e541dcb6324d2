"""The limits within which a tuned candidate's outputs still count as correct: the sidecar's
`accuracy: {metric: limit}` and `aaco tune --accuracy METRIC:LIMIT[,...]`.

They live with the sidecar's other keys (as objectives do), so a mistake is one line naming the
file when the sidecar is read; the comparison itself is tuning.accuracy's. What each metric means
and why the defaults are what they are: docs/concepts/tuning.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.quoting import excerpt

# Measured with ONNX Runtime 1.22.1 (CPU provider), fixed-seed inputs of seeds 0 and 1, on
# tests/data/real_models bert_ts, vit_ts, resnet_ts, mobilenetv2_ts, convnext_ts,
# whisper_encoder_ts, llama_dynamo and tests/models.py transformer_block and tiny_mlp.
# "Reordering": optimization level basic vs all, disabled vs all, intra-op threads 1 vs 2 at all.
# "int8": onnxruntime.quantization.quantize_dynamic (QInt8 weights; MatMul/Gemm only where the
# CPU provider has no int8 ConvInteger) vs the float model, both at level all.


@dataclass(frozen=True)
class AccuracyLimits:
    """How far a candidate's outputs may move from the baseline's and still count as correct.

    Every limit must hold for every output. The defaults are strict: a float reordering stays 50x
    inside max_rel_error (and further inside the others); dynamic int8 lies 28x or more beyond it
    on every model measured whose outputs are not all zeros.
    """

    # reordering: at most 1.9e-6 (resnet_ts, logits ~3); int8: 2.9e-3 (vit_ts) to 0.59
    # (tiny_mlp), except 5e-27 on mobilenetv2_ts, whose logits are ~1e-25 (max_rel_error's case)
    max_abs_error: float = 1e-3
    # reordering: at most 2.0e-5 (transformer_block, disabled vs all: the unfused LayerNorm);
    # int8: 0.028 (mobilenetv2_ts) to 2.0 (llama_dynamo)
    max_rel_error: float = 1e-3
    # reordering: 1 - cosine at most 3.2e-13; int8: 2.0e-5 to 2.7e-4, except whisper_encoder_ts
    # at 4.3e-7, which passes this limit and fails the two above
    min_cosine: float = 0.999999
    # reordering: 1.0 everywhere; int8: 0.75 (tiny_mlp, 4 rows), 0.9375 (llama_dynamo, 32 token
    # rows), 0.984 (transformer_block), 0.99 (whisper_encoder_ts). Every row, for fewer than
    # 1000 rows; one flip per thousand allowed for the near-ties a large user batch can hold.
    min_top1_agreement: float = 0.999


DEFAULT_LIMITS = AccuracyLimits()

# limit: (the figure it bounds, "max" a ceiling or "min" a floor, lowest and highest limit)
LIMITS = {
    "max_abs_error": ("max_abs_error", "max", 0.0, math.inf),
    "max_rel_error": ("max_rel_error", "max", 0.0, math.inf),
    "min_cosine": ("cosine", "min", -1.0, 1.0),
    "min_top1_agreement": ("top1_agreement", "min", 0.0, 1.0),
}
_LOOSER = {"max_abs_error": 0.01, "max_rel_error": 0.05, "min_cosine": 0.999,
           "min_top1_agreement": 0.99}  # fmt: skip
ACCURACY_HELP = (
    "give METRIC:LIMIT pairs, e.g. --accuracy max_rel_error:0.05,min_cosine:0.999 or the sidecar's "
    "accuracy: {max_rel_error: 0.05}; metrics: max_abs_error and max_rel_error (a number >= 0), "
    "min_cosine (-1 to 1), min_top1_agreement (0 to 1)"
)


def parse_accuracy(
    given: Mapping | str | None, source: str | Path, base: AccuracyLimits = DEFAULT_LIMITS
) -> AccuracyLimits:
    """The limits the user set, over `base`: from the sidecar's `accuracy: {metric: limit}` or
    the CLI's `METRIC:LIMIT[,METRIC:LIMIT]`. `source` (the sidecar's path, or "--accuracy") is
    what an error names, so a typo is one line pointing at where it was written."""
    if given is None:
        return base
    if isinstance(given, str):
        pairs = _cli_pairs(given, source)
    elif isinstance(given, Mapping):
        pairs = list(given.items())
    else:
        raise AacoInputError(
            f"accuracy must be a mapping {{metric: limit}}, not {excerpt(given)}",
            path=source,
            fix=ACCURACY_HELP,
        )
    return replace(base, **{metric: _limit(metric, value, source) for metric, value in pairs})


def _cli_pairs(text: str, source: str | Path) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        metric, colon, value = (s.strip() for s in part.partition(":"))
        if not colon or not metric or not value:
            raise AacoInputError(
                f"accuracy limit {excerpt(part.strip())} is not METRIC:LIMIT",
                path=source,
                fix=ACCURACY_HELP,
            )
        if metric in (m for m, _ in pairs):
            raise AacoInputError(
                f"accuracy metric {metric} is given twice", path=source, fix="give each metric once"
            )
        pairs.append((metric, value))
    return pairs


def _limit(metric, value, source: str | Path) -> float:
    if metric not in LIMITS:
        raise AacoInputError(
            f"unknown accuracy metric {excerpt(metric)}", path=source, fix=ACCURACY_HELP
        )
    _, _, lowest, highest = LIMITS[metric]
    number = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):  # the CLI's text, or YAML's 1e-3 (a string to YAML 1.1)
        try:
            number = float(value)
        except ValueError:
            pass
    if number is None or not (lowest <= number <= highest) or math.isinf(number):
        span = f"from {lowest:g} to {highest:g}" if math.isfinite(highest) else ">= 0"
        raise AacoInputError(
            f"accuracy limit {metric} must be a number {span}, not {excerpt(value)}",
            path=source,
            fix=f"e.g. {metric}:{_LOOSER[metric]} (--accuracy) or {metric}: {_LOOSER[metric]} "
            "(the sidecar's accuracy:)",
        )
    return number


def changed_limits(limits: AccuracyLimits) -> dict[str, float]:
    """The limits that differ from the defaults: what a sidecar written back says."""
    defaults = asdict(DEFAULT_LIMITS)
    return {k: v for k, v in asdict(limits).items() if v != defaults[k]}

"""An LLM generation session's plots: latency against throughput as the batch grows, TTFT
against prompt length, and each scenario's TTFT and TPOT distributions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.registry.workload import SCENARIOS
from aaco_pipelines.report import plot_canvas
from aaco_pipelines.report.plot_canvas import (
    empty_axis,
    floats,
    new_canvas,
    palette_of,
    time_unit,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _curve_points(metrics: pa.Table, by: str, fixed: str) -> dict[int, dict[str, float]]:
    """Curve points (run 'curve', source 'aaco') along `by`, at the most common `fixed` value:
    {x: {metric: value}}."""
    rows = [
        r for r in metrics.to_pylist()
        if r["run"] == "curve" and r["source"] == "aaco" and r[by] is not None
    ]  # fmt: skip
    if not rows:
        return {}
    fixed_values = [r[fixed] for r in rows]
    common = max(set(fixed_values), key=fixed_values.count)
    points: dict[int, dict[str, float]] = {}
    for r in rows:
        if r[fixed] == common:
            points.setdefault(r[by], {})[r["metric"]] = r["value"]
    return dict(sorted(points.items()))


def _side_by_side(size: tuple[float, float] = (8.0, 3.4)) -> tuple[Figure, list]:
    figure = new_canvas(size)
    return figure, list(figure.subplots(1, 2))


def generation_curves(metrics: pa.Table) -> bytes:
    """Latency against throughput as the batch grows (TPOT p50 against output tokens/s, each
    point labelled with its batch size), and TTFT p50 against prompt length: the curve points
    of generation_metrics."""
    figure, (left, right) = _side_by_side()
    by_batch = _curve_points(metrics, "batch_size", "prompt_tokens")
    if by_batch:
        rate = [p.get("output_tokens_per_s", np.nan) for p in by_batch.values()]
        tpot = np.array([p.get("tpot_p50_ns", np.nan) for p in by_batch.values()])
        scale, unit = time_unit(tpot)
        left.plot(rate, tpot / scale, marker="o", color="#1f77b4")
        for batch, x, y in zip(by_batch, rate, tpot / scale, strict=True):
            left.annotate(f"b={batch}", (x, y), textcoords="offset points", xytext=(4, 4))
        left.set_xlabel("output tokens / s")
        left.set_ylabel(f"TPOT p50 ({unit})")
        left.set_title("latency vs throughput (batch size)")
    else:
        empty_axis(figure, left, "no batch-size curve (generation.curves.batch_sizes)")
    by_prompt = _curve_points(metrics, "prompt_tokens", "batch_size")
    if len(by_prompt) > 1:
        ttft = np.array([p.get("ttft_p50_ns", np.nan) for p in by_prompt.values()])
        scale, unit = time_unit(ttft)
        right.plot(list(by_prompt), ttft / scale, marker="o", color="#d62728")
        right.set_xlabel("prompt tokens")
        right.set_ylabel(f"TTFT p50 ({unit})")
        right.set_title("time to first token vs prompt length")
    else:
        empty_axis(figure, right, "no prompt-length curve (generation.curves.prompt_lengths)")
    return plot_canvas.to_svg(figure)


def token_latencies(requests: pa.Table) -> bytes:
    """TTFT and TPOT distributions of each scenario run (requests rows), p50 and p99 marked."""
    figure, axes = _side_by_side()
    runs = [r for r in dict.fromkeys(requests["run"].to_pylist()) if r in SCENARIOS]
    colors = palette_of(runs)
    for axis, column, label in zip(axes, ("ttft_ns", "tpot_ns"), ("TTFT", "TPOT"), strict=True):
        values = {
            run: floats(requests.filter(pc.equal(requests["run"], run)), column) for run in runs
        }
        values = {run: v[~np.isnan(v)] for run, v in values.items() if np.isfinite(v).any()}
        if not values:
            empty_axis(figure, axis, f"no {label} samples")
            continue
        scale, unit = time_unit(np.concatenate(list(values.values())))
        for run, v in values.items():
            p50, p99 = np.percentile(v, [50, 99]) / scale
            axis.hist(v / scale, bins=30, alpha=0.5, color=colors[run],
                      label=f"{run} (p50 {p50:.3g}, p99 {p99:.3g})")  # fmt: skip
        axis.set_xlabel(f"{label} ({unit})")
        axis.set_ylabel("requests")
        axis.legend(fontsize="small")
    return plot_canvas.to_svg(figure)

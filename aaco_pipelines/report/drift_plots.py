"""A drift series over the sessions, as its verdict judged it: baseline, control band, model and
runtime markers, change points, and the EWMA and CUSUM paths against their limits."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from aaco_pipelines.governance.drift.changepoint import ChangePoint
from aaco_pipelines.governance.drift.detectors import CusumParams, EwmaParams, cusum, ewma
from aaco_pipelines.governance.drift.robust_scale import RobustReference, standardize
from aaco_pipelines.governance.drift.series import series_change_points
from aaco_pipelines.report import plot_canvas
from aaco_pipelines.report.plot_canvas import SIZE, new_figure

CONTROL_SD = 3.0  # the drift plot's control band: baseline median +- 3 robust sd


def drift_history(
    values: Sequence[float | None],
    markers: Sequence[Sequence[str]],
    baseline: dict | None,
    parameters: dict,
    change_points: Sequence[tuple[int, ChangePoint]] = (),
    title: str = "",
    unit: str = "",
) -> bytes:
    """A drift series (one point per session, oldest first; None where a session lacks it) with
    the baseline median, the control band (median +- 3 robust sd) and the minimum effect; model
    version / runtime markers; change points; and, with a baseline, the EWMA and CUSUM paths of
    the standardized series against their limits, as the verdict judged them. Change points are
    (position in `values`, ChangePoint), as `series_change_points` returns them. Sessions are
    numbered 1, 2, ... on the x axis; without a baseline the plot says how many earlier sessions
    a verdict needs (the policy's min_history in `parameters`)."""
    y = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    index = np.flatnonzero(np.isfinite(y))
    rows = 3 if baseline else 1
    figure, axes = new_figure(
        rows=rows,
        size=(SIZE[0], 2.6 + 1.5 * (rows - 1)),
        sharex=True,
        height_ratios=[2] + [1] * (rows - 1),
    )
    top = axes[0]
    top.plot(index, y[index], ".-", color="black", lw=1, ms=5)
    if index.size:
        top.plot(index[-1:], y[index[-1:]], "o", color="#d62728", ms=7, label="current")
    if baseline:
        _draw_baseline(top, baseline, parameters)
        _draw_detectors(axes[1], axes[2], index, y[index], baseline, parameters)
    for i, marker in enumerate(markers):
        for ax in axes:
            if marker:
                ax.axvline(i, color="#9467bd", ls="--", lw=0.8)
        if marker:
            top.text(
                i,
                1.0,
                " " + ", ".join(marker),
                transform=top.get_xaxis_transform(),
                rotation=90,
                va="top",
                fontsize="x-small",
                color="#9467bd",
            )
    for position, point in change_points:
        top.axvline(position - 0.5, color="#2ca02c", lw=1.5)
        top.text(
            position - 0.5,
            0.02,
            f" change {point.shift_pct:+.1f}%",
            transform=top.get_xaxis_transform(),
            fontsize="x-small",
            color="#2ca02c",
        )
    if not baseline and parameters.get("min_history"):
        earlier = max(index.size - 1, 0)
        top.text(
            0.5,
            0.06,
            f"a verdict needs {parameters['min_history']} earlier sessions: {earlier} so far",
            transform=top.transAxes,
            ha="center",
            fontsize="small",
            color="#555555",
        )
    top.set_title(title or "Drift history")
    top.set_ylabel(unit)
    top.legend(fontsize="x-small", loc="upper left")
    _session_axis(axes[-1], len(values))
    return plot_canvas.to_svg(figure)


def _session_axis(axis, sessions: int) -> None:
    """Whole sessions, numbered from 1: one session is one tick, not a span of -0.04 to 0.04."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_xlim(-0.5, max(sessions, 1) - 0.5)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda x, _position: f"{int(round(x)) + 1}"))
    axis.set_xlabel("session (oldest first)")


def _draw_baseline(axis, baseline: dict, parameters: dict) -> None:
    median, scale = baseline["median"], baseline["scale"]
    axis.axhline(median, color="#1f77b4", lw=1, label="baseline median")
    axis.axhspan(
        median - CONTROL_SD * scale,
        median + CONTROL_SD * scale,
        color="#1f77b4",
        alpha=0.12,
        label="± 3 robust sd",
    )
    effect = parameters.get("min_effect_pct")
    if effect:
        for sign in (-1, 1):
            axis.axhline(median * (1 + sign * effect / 100.0), color="#1f77b4", ls=":", lw=0.8)


def _draw_detectors(
    ewma_axis, cusum_axis, index: np.ndarray, values: np.ndarray, baseline: dict, parameters: dict
) -> None:
    z = standardize(values, RobustReference(**baseline))
    ewma_params = EwmaParams(**parameters.get("ewma", {}))
    path = ewma(z, ewma_params)
    ewma_axis.plot(index, path.statistic, ".-", color="black", lw=1, ms=3)
    ewma_axis.plot(index, path.upper, color="#d62728", lw=0.8)
    ewma_axis.plot(index, path.lower, color="#d62728", lw=0.8)
    ewma_axis.set_ylabel(f"EWMA λ={ewma_params.lam:g}", fontsize="small")
    cusum_params = CusumParams(**parameters.get("cusum", {}))
    sums = cusum(z, cusum_params)
    cusum_axis.plot(index, sums.upper, ".-", color="#d62728", lw=1, ms=3, label="C+")
    cusum_axis.plot(index, -sums.lower, ".-", color="#1f77b4", lw=1, ms=3, label="−C−")
    for h in (cusum_params.h, -cusum_params.h):
        cusum_axis.axhline(h, color="grey", ls="--", lw=0.8)
    cusum_axis.set_ylabel(f"CUSUM h={cusum_params.h:g}", fontsize="small")
    cusum_axis.legend(fontsize="x-small", loc="upper left", ncols=2)


def drift_row_plot(row: dict) -> bytes:
    """The drift history of one drift_verdicts row (its series, baseline and parameters JSON),
    with the change points over the whole series that drift_verdict_rows stored."""
    series = json.loads(row["series_json"])
    metric = row.get("metric", "")
    divisor, unit = _drift_unit(metric)
    values = [None if v is None else float(v) / divisor for v in series["values"]]
    baseline = json.loads(row.get("baseline_json") or "null")
    if baseline:  # in the axis' unit; standardized values (the detectors') are the same
        baseline = {
            k: v / divisor if k in SCALED and v is not None else v for k, v in baseline.items()
        }
    verdict = row.get("verdict", "")
    effect = row.get("effect_pct")
    detail = f" {effect:+.1f}%" if effect is not None else ""
    return drift_history(
        values,
        series.get("markers") or [[] for _ in values],
        baseline,
        json.loads(row.get("parameters_json") or "{}"),
        series_change_points(series),
        title=f"{metric}: {verdict}{detail}",
        unit=unit,
    )


SCALED = ("median", "mad", "scale", "floor", "qn")  # a baseline's values in the metric's unit


def _drift_unit(metric: str) -> tuple[float, str]:
    """Divisor and unit of a drift metric on the plot, as the tables show it: nanosecond
    metrics in ms, rates per second."""
    if metric.endswith("_ns"):
        return 1e6, "ms"
    if metric.endswith("_per_s"):
        return 1.0, "per s"
    return 1.0, ""

"""A session's own plots: its measured latency's distribution, the latency of every iteration in
execution order, and its telemetry over the run with the passes shaded."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aaco_pipelines.report import plot_canvas
from aaco_pipelines.report.plot_canvas import (
    SIZE,
    empty_axis,
    new_figure,
    plain_log_axes,
    time_unit,
)

PASS_COLORS = {
    "warmup": "#9e9e9e",
    "measured": "#1f77b4",
    "profiled": "#ff7f0e",
    "other": "#cccccc",
}


# --- latency ---------------------------------------------------------------------------------


def latency_histogram(latency_ns: np.ndarray, p50_ns: float, p99_ns: float) -> bytes:
    """Distribution of the measured iterations' latency, with the p50 and p99 marked."""
    figure, (axis,) = new_figure()
    values = np.asarray(latency_ns, dtype=float)
    if values.size == 0:
        empty_axis(figure, axis, "no measured iterations")
        return plot_canvas.to_svg(figure)
    scale, unit = time_unit(values)
    axis.hist(
        values / scale, bins=min(60, max(10, values.size // 5)), color=PASS_COLORS["measured"]
    )
    for value, name, style in ((p50_ns, "p50", "-"), (p99_ns, "p99", "--")):
        axis.axvline(
            value / scale,
            color="black",
            linestyle=style,
            label=f"{name} {value / scale:.4g} {unit}",
        )
    axis.set(
        xlabel=f"latency ({unit})",
        ylabel="iterations",
        title=f"Measured latency (n = {values.size})",
    )
    axis.legend(fontsize="small")
    return plot_canvas.to_svg(figure)


def iteration_latency(iterations: pa.Table) -> bytes:
    """Latency of every iteration in execution order, one colour per pass (warm-up, measured,
    profiled): warm-up outliers and drift within a pass show up here, not in a histogram."""
    figure, (axis,) = new_figure()
    if iterations.num_rows == 0:
        empty_axis(figure, axis, "no iterations")
        return plot_canvas.to_svg(figure)
    table = (
        iterations.sort_by([("start_ns", "ascending")])
        if "start_ns" in iterations.column_names
        else iterations
    )
    latency = table["latency_ns"].to_numpy().astype(float)
    passes = np.asarray(table["pass"].to_pylist(), dtype=object)
    scale, unit = time_unit(latency)
    order = np.arange(latency.size)
    for name in dict.fromkeys(passes):
        mask = passes == name
        axis.plot(
            order[mask],
            latency[mask] / scale,
            ".-",
            ms=3,
            lw=0.8,
            color=PASS_COLORS.get(name),
            label=name,
        )
    if latency.max() > 20 * max(latency.min(), 1.0):
        axis.set_yscale("log")
        plain_log_axes(axis)
    axis.set(
        xlabel="iteration (execution order)",
        ylabel=f"latency ({unit})",
        title="Latency per iteration",
    )
    axis.legend(fontsize="small")
    return plot_canvas.to_svg(figure)


# --- telemetry -------------------------------------------------------------------------------


def telemetry(samples: pa.Table, passes: pa.Table | None = None) -> bytes:
    """One panel per series (`series`, `timestamp_ns`, `value`, `unit` rows) over the run, each
    pass's span (`pass`, `start_ns`, `end_ns`) shaded so a clock drop or a busy neighbour can be
    tied to the pass it hit."""
    names = list(dict.fromkeys(samples["series"].to_pylist())) if samples.num_rows else []
    figure, axes = new_figure(
        rows=max(len(names), 1), size=(SIZE[0], 0.6 + 1.4 * max(len(names), 1)), sharex=True
    )
    if not names:
        empty_axis(figure, axes[0], "no telemetry")
        return plot_canvas.to_svg(figure)
    series = np.asarray(samples["series"].to_pylist(), dtype=object)
    stamps = samples["timestamp_ns"].to_numpy().astype(float)
    values = samples["value"].to_numpy(zero_copy_only=False).astype(float)
    units = np.asarray(samples["unit"].to_pylist(), dtype=object)
    origin = stamps.min()
    for axis, name in zip(axes, names, strict=True):
        mask = series == name
        unit = units[mask][0]
        scale, unit = (2.0**20, "MiB") if unit == "bytes" else (1.0, unit)
        order = np.argsort(stamps[mask])
        axis.plot(
            (stamps[mask][order] - origin) / 1e9, values[mask][order] / scale, lw=1, color="black"
        )
        axis.set_ylabel(f"{name}\n({unit})", fontsize="small")
        _shade_passes(axis, passes, origin)
    axes[-1].set_xlabel("time since first sample (s)")
    if axes[0].get_legend_handles_labels()[0]:  # the pass spans, when given
        axes[0].legend(fontsize="x-small", loc="upper right", ncols=4)
    axes[0].set_title("Telemetry over the run")
    return plot_canvas.to_svg(figure)


def _shade_passes(axis, passes: pa.Table | None, origin: float) -> None:
    if passes is None:
        return
    for row in passes.to_pylist():
        start, end = (row["start_ns"] - origin) / 1e9, (row["end_ns"] - origin) / 1e9
        axis.axvspan(
            start,
            end,
            color=PASS_COLORS.get(row["pass"], "#eeeeee"),
            alpha=0.2,
            lw=0,
            label=row["pass"],
        )

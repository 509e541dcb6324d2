"""Report plots as SVG bytes, from plain data (Arrow tables, numpy), never from the lake.

Plain inputs keep every plot testable on synthetic data and usable from a Dagster asset that
already holds its tables. Figures are drawn on their own canvas (no pyplot): no global state,
safe in threads, and never a display. SVG with its texts as text (not glyph outlines, not
pixels) is a third of a PNG's drawing time, and each plot stays well under 100 KB, so it rides
inline in an HTML report or in asset metadata as a data URI; margins come from
plot_layout.fit_margins, not from constrained layout (two thirds of a plot's time).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.governance.drift.changepoint import ChangePoint
from aaco_pipelines.governance.drift.detectors import CusumParams, EwmaParams, cusum, ewma
from aaco_pipelines.governance.drift.robust_scale import RobustBaseline, standardize
from aaco_pipelines.governance.drift.series import series_change_points
from aaco_pipelines.registry.workload import SCENARIOS
from aaco_pipelines.report.plot_layout import fit_margins

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from aaco_pipelines.analysis.bottleneck.roofline import JudgedRoofline

SIZE = (7.0, 3.6)  # inches
PASS_COLORS = {
    "warmup": "#9e9e9e",
    "measured": "#1f77b4",
    "profiled": "#ff7f0e",
    "other": "#cccccc",
}
BOUND_COLORS = {"memory": "#1f77b4", "compute": "#d62728"}
CONTROL_SD = 3.0  # the drift plot's control band: baseline median +- 3 robust sd


def _canvas(size: tuple[float, float]) -> Figure:
    """A figure on the Agg canvas, whose renderer measures texts for the margins, at the SVG's
    own 72 dpi, so the texts measured then are the ones the SVG draws (matplotlib caches their
    layout by resolution). matplotlib is imported here, not at the top: every Dagster process
    imports this module, few of them draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=72)
    FigureCanvasAgg(figure)
    return figure


def _figure(rows: int = 1, size: tuple[float, float] = SIZE, **kwargs) -> tuple[Figure, list]:
    figure = _canvas(size)
    axes = figure.subplots(rows, 1, squeeze=False, **kwargs)[:, 0]
    return figure, list(axes)


# Texts stay text (the viewer's font draws them); ids and metadata fixed, so the same plot is
# the same bytes.
SVG_SETTINGS = {"svg.fonttype": "none", "svg.hashsalt": "aaco"}


def _svg(figure: Figure) -> bytes:
    from matplotlib import rc_context

    fit_margins(figure)
    buffer = io.BytesIO()
    with rc_context(SVG_SETTINGS):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def data_uri(svg: bytes) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")


def markdown_image(svg: bytes, alt: str) -> str:
    """An image inline in Markdown (Dagster metadata renders data URIs)."""
    return f"![{alt}]({data_uri(svg)})"


def _time_unit(ns: np.ndarray | float) -> tuple[float, str]:
    """Divisor and label that make nanosecond values readable (typical value 1 to 1000)."""
    typical = float(np.nanmedian(ns)) if np.size(ns) else 0.0
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if typical >= scale:
            return scale, unit
    return 1.0, "ns"


SUPERSCRIPT = str.maketrans(
    "-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)


def _decade_label(value: float, _position=None) -> str:
    """A decade tick as 10 with a Unicode superscript exponent (10⁹, 10⁻²); other ticks
    unlabelled, as matplotlib's log formatter leaves them."""
    if value <= 0:
        return ""
    exponent = np.log10(value)
    if not np.isclose(exponent, round(exponent)):
        return ""
    return "10" + str(int(round(exponent))).translate(SUPERSCRIPT)


def _plain_log_axes(axis) -> None:
    """Log axes without what makes them slow to draw: matplotlib's default labels are mathtext
    ($10^{9}$), parsed afresh by every figure's renderer, and eight minor ticks a decade are
    each an artist laid out twice (constrained layout, then the draw). Decade labels in Unicode
    superscripts look the same; the minor ticks go. The roofline drew in 0.28 s, now 0.12 s."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    for scale_axis in (axis.xaxis, axis.yaxis):
        if scale_axis.get_scale() == "log":
            scale_axis.set_major_locator(LogLocator(base=10.0))
            scale_axis.set_major_formatter(FuncFormatter(_decade_label))
            scale_axis.set_minor_locator(NullLocator())


def _empty(figure: Figure, axis, message: str) -> None:
    axis.text(0.5, 0.5, message, ha="center", va="center", transform=axis.transAxes)
    axis.set_axis_off()


# --- latency ---------------------------------------------------------------------------------


def latency_histogram(latency_ns: np.ndarray, p50_ns: float, p99_ns: float) -> bytes:
    """Distribution of the measured iterations' latency, with the p50 and p99 marked."""
    figure, (axis,) = _figure()
    values = np.asarray(latency_ns, dtype=float)
    if values.size == 0:
        _empty(figure, axis, "no measured iterations")
        return _svg(figure)
    scale, unit = _time_unit(values)
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
    return _svg(figure)


def iteration_latency(iterations: pa.Table) -> bytes:
    """Latency of every iteration in execution order, one colour per pass (warm-up, measured,
    profiled): warm-up outliers and drift within a pass show up here, not in a histogram."""
    figure, (axis,) = _figure()
    if iterations.num_rows == 0:
        _empty(figure, axis, "no iterations")
        return _svg(figure)
    table = (
        iterations.sort_by([("start_ns", "ascending")])
        if "start_ns" in iterations.column_names
        else iterations
    )
    latency = table["latency_ns"].to_numpy().astype(float)
    passes = np.asarray(table["pass"].to_pylist(), dtype=object)
    scale, unit = _time_unit(latency)
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
        _plain_log_axes(axis)
    axis.set(
        xlabel="iteration (execution order)",
        ylabel=f"latency ({unit})",
        title="Latency per iteration",
    )
    axis.legend(fontsize="small")
    return _svg(figure)


# --- where the time went ---------------------------------------------------------------------


def op_breakdown(breakdown: pa.Table, top: int = 12, title: str = "Time per op") -> bytes:
    """Horizontal bars of the largest shares of kernel time (`name`, `op_type`, `share`,
    `mean_ns` rows: op_breakdown at one level); the rest is summed into one "other" bar."""
    figure, (axis,) = _figure(size=(SIZE[0], 0.6 + 0.25 * (min(top, breakdown.num_rows) + 1)))
    if breakdown.num_rows == 0:
        _empty(figure, axis, "no op breakdown")
        return _svg(figure)
    rows = breakdown.sort_by([("share", "descending")]).to_pylist()
    shown, rest = rows[:top], rows[top:]
    labels = [
        _short(r["name"]) + ("" if r["name"] == r["op_type"] else f"  [{r['op_type']}]")
        for r in shown
    ]
    shares = [float(r["share"] or 0.0) for r in shown]
    if rest:
        labels.append(f"other ({len(rest)})")
        shares.append(float(sum(r["share"] or 0.0 for r in rest)))
    palette = _palette([r["op_type"] for r in shown])
    colors = [palette[r["op_type"]] for r in shown] + (["#cccccc"] if rest else [])
    positions = np.arange(len(labels))[::-1]
    axis.barh(positions, np.array(shares) * 100.0, color=colors)
    axis.set_yticks(positions, labels, fontsize="small")
    for y, share in zip(positions, shares, strict=True):
        axis.text(share * 100.0, y, f" {share * 100:.1f}%", va="center", fontsize="x-small")
    axis.set(xlabel="share of attributed kernel time (%)", title=title)
    axis.set_xlim(0, max(max(shares) * 115.0, 1.0))
    return _svg(figure)


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _palette(keys: Sequence) -> dict:
    colors = [f"C{i}" for i in range(10)]
    unique = list(dict.fromkeys(keys))
    return {key: colors[i % len(colors)] for i, key in enumerate(unique)}


def roofline(
    points: pa.Table,
    gemm_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    label_top: int = 5,
    dtype_roofs: dict[str, float] | None = None,
    source: str = "measured",
    ceilings: Sequence[tuple[str, float]] = (),
    lifted: Sequence[str] = (),
) -> bytes:
    """Ops on the roofline of the envelope (roofline_points rows: arithmetic_intensity,
    achieved_flops_per_s, time_ns, bound, onnx_node). The roof is min(peak FLOP/s, AI x peak
    B/s); marker area follows the op's time, so the ops that matter stand out. Ops with unknown
    cost or no FLOPs cannot sit on a log-log roofline and are counted in the title instead.
    `dtype_roofs` ({data type: GEMM peak}) adds a dashed roof for each other data type the
    points sit under (roofline_points.roof_dtype); `source` (measured | datasheet) is named in
    the title. `ceilings` ((level, B/s) of each cache: a hierarchical roofline) adds a dotted
    slope per cache level; `lifted` names the roofs judge_roofline raised to an op that beat
    the measured peak, said in the title."""
    figure, (axis,) = _figure(size=(SIZE[0], 4.2))
    ai = _floats(points, "arithmetic_intensity")
    achieved = _floats(points, "achieved_flops_per_s")
    time_ns = _floats(points, "time_ns")
    shown = np.isfinite(ai) & np.isfinite(achieved) & (ai > 0) & (achieved > 0)
    ridge = gemm_flops_per_s / bandwidth_bytes_per_s
    span = np.r_[ai[shown], ridge, [gemm_flops_per_s / c for _, c in ceilings]]
    x = np.logspace(np.log10(span.min()) - 1, np.log10(span.max()) + 1, 200)
    axis.loglog(x, np.minimum(gemm_flops_per_s, x * bandwidth_bytes_per_s), color="black", lw=1.5)
    axis.axvline(ridge, color="grey", lw=0.8, ls=":")
    levels_at: dict[float, list[str]] = {}  # levels raised to one ceiling share its line
    for level, ceiling in ceilings:
        if ceiling > bandwidth_bytes_per_s:
            levels_at.setdefault(ceiling, []).append(level)
    for ceiling, levels in levels_at.items():
        axis.plot(x, np.minimum(gemm_flops_per_s, x * ceiling), color="grey", lw=0.8, ls=":")
        knee = gemm_flops_per_s / ceiling
        axis.text(
            knee, gemm_flops_per_s / 3, "/".join(levels) + " ", ha="right", fontsize="x-small"
        )
    used = set(points["roof_dtype"].to_pylist()) if "roof_dtype" in points.column_names else set()
    for dtype, peak in (dtype_roofs or {}).items():
        if dtype in used and peak != gemm_flops_per_s:
            axis.plot(x, np.minimum(peak, x * bandwidth_bytes_per_s), color="grey", lw=1, ls="--")
            axis.text(x[-1], peak, f"{dtype} ", ha="right", va="bottom", fontsize="x-small")
    axis.text(  # over the flat roof, ending at the right edge: from the ridge it ran off the image
        x[-1],
        gemm_flops_per_s * 1.15,
        f"fp32 GEMM peak {gemm_flops_per_s:.3g} FLOP/s ",
        ha="right",
        va="bottom",
        fontsize="small",
    )
    axis.text(
        ridge,
        axis.get_ylim()[0],
        f" ridge {ridge:.3g} FLOP/B",
        rotation=90,
        va="bottom",
        fontsize="x-small",
    )
    bound = np.asarray(
        points["bound"].to_pylist() if "bound" in points.column_names else [None] * points.num_rows,
        dtype=object,
    )
    weight = np.where(np.isfinite(time_ns), time_ns, 0.0)
    sizes = 20 + 400 * weight / max(weight[shown].max(), 1.0) if shown.any() else weight
    for name, color in BOUND_COLORS.items():
        mask = shown & (bound == name)
        axis.scatter(
            ai[mask],
            achieved[mask],
            s=sizes[mask],
            color=color,
            alpha=0.6,
            label=f"{name}-bound",
            edgecolors="none",
        )
    names = (
        points["onnx_node"].to_pylist()
        if "onnx_node" in points.column_names
        else [""] * points.num_rows
    )
    for i in np.argsort(-weight)[:label_top]:
        if shown[i]:
            axis.annotate(
                _short(str(names[i]), 24),
                (ai[i], achieved[i]),
                fontsize="x-small",
                xytext=(4, 2),
                textcoords="offset points",
            )
    hidden = int(points.num_rows - shown.sum())
    note = f"\n{hidden} op{'s' * (hidden > 1)} without known cost not shown" if hidden else ""
    if lifted:
        note += f"\nroofs lifted to the ops that beat them: {', '.join(lifted)}"
    _plain_log_axes(axis)  # last: every loglog() sets the log scale's mathtext labels again
    axis.set(  # the note on a line of its own: on one line the title ran off the image
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="achieved FLOP/s",
        title=f"Roofline, {source} envelope (bandwidth {bandwidth_bytes_per_s:.3g} B/s){note}",
    )
    if shown.any():
        axis.legend(fontsize="small", loc="lower right")
    return _svg(figure)


def roofline_chart(points: pa.Table, roofs: JudgedRoofline) -> bytes:
    """`roofline` under the roofs judge_roofline judged the points by: its (lifted) GEMM peaks,
    DRAM bandwidth and cache ceilings, naming the roofs it lifted."""
    envelope = roofs.envelope
    ceilings = [(name, peak) for name, capacity, peak in envelope.memory_ceilings() if capacity]
    return roofline(
        points,
        envelope.gemm.peak,
        envelope.bandwidth.peak,
        dtype_roofs=envelope.gemm_peaks(),
        source=envelope.source,
        ceilings=ceilings,
        lifted=[lift.roof for lift in roofs.lifts],
    )


def _floats(table: pa.Table, column: str) -> np.ndarray:
    if column not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return np.array(
        [np.nan if v is None else float(v) for v in table[column].to_pylist()], dtype=float
    )


# --- telemetry -------------------------------------------------------------------------------


def telemetry(samples: pa.Table, passes: pa.Table | None = None) -> bytes:
    """One panel per series (`series`, `timestamp_ns`, `value`, `unit` rows) over the run, each
    pass's span (`pass`, `start_ns`, `end_ns`) shaded so a clock drop or a busy neighbour can be
    tied to the pass it hit."""
    names = list(dict.fromkeys(samples["series"].to_pylist())) if samples.num_rows else []
    figure, axes = _figure(
        rows=max(len(names), 1), size=(SIZE[0], 0.6 + 1.4 * max(len(names), 1)), sharex=True
    )
    if not names:
        _empty(figure, axes[0], "no telemetry")
        return _svg(figure)
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
    return _svg(figure)


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


# --- drift history ---------------------------------------------------------------------------


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
    figure, axes = _figure(
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
    return _svg(figure)


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
    z = standardize(values, RobustBaseline(**baseline))
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
    with the change points over the whole series that drift_rows stored."""
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


# --- LLM generation ------------------------------------------------------------------------


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
    figure = _canvas(size)
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
        scale, unit = _time_unit(tpot)
        left.plot(rate, tpot / scale, marker="o", color="#1f77b4")
        for batch, x, y in zip(by_batch, rate, tpot / scale, strict=True):
            left.annotate(f"b={batch}", (x, y), textcoords="offset points", xytext=(4, 4))
        left.set_xlabel("output tokens / s")
        left.set_ylabel(f"TPOT p50 ({unit})")
        left.set_title("latency vs throughput (batch size)")
    else:
        _empty(figure, left, "no batch-size curve (generation.curves.batch_sizes)")
    by_prompt = _curve_points(metrics, "prompt_tokens", "batch_size")
    if len(by_prompt) > 1:
        ttft = np.array([p.get("ttft_p50_ns", np.nan) for p in by_prompt.values()])
        scale, unit = _time_unit(ttft)
        right.plot(list(by_prompt), ttft / scale, marker="o", color="#d62728")
        right.set_xlabel("prompt tokens")
        right.set_ylabel(f"TTFT p50 ({unit})")
        right.set_title("time to first token vs prompt length")
    else:
        _empty(figure, right, "no prompt-length curve (generation.curves.prompt_lengths)")
    return _svg(figure)


def token_latencies(requests: pa.Table) -> bytes:
    """TTFT and TPOT distributions of each scenario run (requests rows), p50 and p99 marked."""
    figure, axes = _side_by_side()
    runs = [r for r in dict.fromkeys(requests["run"].to_pylist()) if r in SCENARIOS]
    colors = _palette(runs)
    for axis, column, label in zip(axes, ("ttft_ns", "tpot_ns"), ("TTFT", "TPOT"), strict=True):
        values = {
            run: _floats(requests.filter(pc.equal(requests["run"], run)), column) for run in runs
        }
        values = {run: v[~np.isnan(v)] for run, v in values.items() if np.isfinite(v).any()}
        if not values:
            _empty(figure, axis, f"no {label} samples")
            continue
        scale, unit = _time_unit(np.concatenate(list(values.values())))
        for run, v in values.items():
            p50, p99 = np.percentile(v, [50, 99]) / scale
            axis.hist(v / scale, bins=30, alpha=0.5, color=colors[run],
                      label=f"{run} (p50 {p50:.3g}, p99 {p99:.3g})")  # fmt: skip
        axis.set_xlabel(f"{label} ({unit})")
        axis.set_ylabel("requests")
        axis.legend(fontsize="small")
    return _svg(figure)

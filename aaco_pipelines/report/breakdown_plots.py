"""Where a session's time went: the largest shares of kernel time per op, and the ops on the
roofline of the envelope (memory- or compute-bound, sized by their time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from aaco_pipelines.report import plot_canvas
from aaco_pipelines.report.plot_canvas import (
    SIZE,
    empty_axis,
    floats,
    new_figure,
    palette_of,
    plain_log_axes,
)

if TYPE_CHECKING:
    from aaco_pipelines.analysis.bottleneck.roofline import JudgedRoofline

BOUND_COLORS = {"memory": "#1f77b4", "compute": "#d62728"}


def op_breakdown(breakdown: pa.Table, top: int = 12, title: str = "Time per op") -> bytes:
    """Horizontal bars of the largest shares of kernel time (`name`, `op_type`, `share`,
    `mean_ns` rows: op_breakdown at one level); the rest is summed into one "other" bar."""
    figure, (axis,) = new_figure(size=(SIZE[0], 0.6 + 0.25 * (min(top, breakdown.num_rows) + 1)))
    if breakdown.num_rows == 0:
        empty_axis(figure, axis, "no op breakdown")
        return plot_canvas.to_svg(figure)
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
    palette = palette_of([r["op_type"] for r in shown])
    colors = [palette[r["op_type"]] for r in shown] + (["#cccccc"] if rest else [])
    positions = np.arange(len(labels))[::-1]
    axis.barh(positions, np.array(shares) * 100.0, color=colors)
    axis.set_yticks(positions, labels, fontsize="small")
    for y, share in zip(positions, shares, strict=True):
        axis.text(share * 100.0, y, f" {share * 100:.1f}%", va="center", fontsize="x-small")
    axis.set(xlabel="share of attributed kernel time (%)", title=title)
    axis.set_xlim(0, max(max(shares) * 115.0, 1.0))
    return plot_canvas.to_svg(figure)


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


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
    figure, (axis,) = new_figure(size=(SIZE[0], 4.2))
    ai = floats(points, "arithmetic_intensity")
    achieved = floats(points, "achieved_flops_per_s")
    time_ns = floats(points, "time_ns")
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
    plain_log_axes(axis)  # last: every loglog() sets the log scale's mathtext labels again
    axis.set(  # the note on a line of its own: on one line the title ran off the image
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="achieved FLOP/s",
        title=f"Roofline, {source} envelope (bandwidth {bandwidth_bytes_per_s:.3g} B/s){note}",
    )
    if shown.any():
        axis.legend(fontsize="small", loc="lower right")
    return plot_canvas.to_svg(figure)


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

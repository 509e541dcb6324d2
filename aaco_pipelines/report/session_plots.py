"""Every plot a session report can show, by the id its section names (`Section.plots`).

Drawn only when asked for: the HTML report draws them all, an asset page only its own (each
plot costs a tenth of a second or more)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pyarrow.compute as pc

from aaco_pipelines.report.breakdown_plots import op_breakdown, roofline_chart
from aaco_pipelines.report.content import DRIFT_PLOT_METRICS
from aaco_pipelines.report.data import ReportData
from aaco_pipelines.report.drift_plots import drift_row_plot
from aaco_pipelines.report.generation_plots import generation_curves, token_latencies
from aaco_pipelines.report.run_plots import iteration_latency, latency_histogram, telemetry
from aaco_pipelines.report.section_model import drift_plot_id

Plots = dict[str, tuple[str, Callable[[], bytes]]]


def session_plots(data: ReportData, wanted: Iterable[str] | None = None) -> dict:
    """Plot id -> (caption, SVG) for every plot the session has data for, or for those of them
    in `wanted`."""
    found = _available(data)
    chosen = found if wanted is None else [i for i in wanted if i in found]
    return {plot_id: (found[plot_id][0], found[plot_id][1]()) for plot_id in chosen}


def _available(data: ReportData) -> Plots:
    session, iterations = data.session, data.iterations
    measured = iterations.filter(pc.equal(iterations["pass"], "measured"))
    found: Plots = {
        "latency-histogram": (
            "Distribution of measured latency",
            lambda: latency_histogram(
                measured["latency_ns"].to_numpy().astype(np.float64),
                session["latency_p50_ns"],
                session["latency_p99_ns"],
            ),
        ),
        "iteration-latency": ("Latency per iteration", lambda: iteration_latency(iterations)),
    }
    nodes = data.op_breakdown.filter(pc.equal(data.op_breakdown["level"], "node"))
    if nodes.num_rows:
        found["op-breakdown"] = ("Share of kernel time per ONNX node", lambda: op_breakdown(nodes))
    if data.roofs and data.roofline_points.num_rows:
        envelope = data.envelope
        found["roofline"] = (
            f"Ops on the roofline of the {envelope['source']} envelope"
            + (" (not measured: published peaks)" if envelope["source"] == "datasheet" else ""),
            lambda: roofline_chart(data.roofline_points, data.roofs),
        )
    if data.telemetry.num_rows:
        found["telemetry"] = (
            "Telemetry, passes shaded",
            lambda: telemetry(data.telemetry, data.passes),
        )
    if data.generation_metrics.num_rows:
        found["generation-curves"] = (
            "Latency against throughput (batch size) and TTFT against prompt length",
            lambda: generation_curves(data.generation_metrics),
        )
        found["token-latencies"] = (
            "TTFT and TPOT distributions per scenario",
            lambda: token_latencies(data.requests),
        )
    for row in data.drift:
        if row["metric"] in DRIFT_PLOT_METRICS:
            found[drift_plot_id(row["metric"])] = (
                f"Drift history of {row['metric']}",
                lambda row=row: drift_row_plot(row),
            )
    return found

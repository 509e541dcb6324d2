"""bottleneck_report: roofline placement, envelope utilization and the bottleneck with evidence."""

import dagster as dg

from aaco_pipelines.analysis.session import explain, session_envelope, top_roofline_points
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.report.markdown_tables import markdown_table, ms, num, pct
from aaco_pipelines.report.plots import markdown_image, roofline
from assets.envelope import hardware_envelope
from assets.partitions import model_target_partitions
from resources import BenchmarkRunnerResource, TraceLakeResource


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="analysis",
    kinds={"duckdb"},
    pool=TRACELAKE_WRITER_POOL,
    deps=[hardware_envelope],
    description="Places every op on the roofline of the measured hardware envelope, computes the "
    "hardware envelope utilization, and classifies the session (launch-, CPU-, memory-, "
    "compute-bound, throttled or balanced) by a Bayesian combination of the evidence, with "
    "ranked recommendations.",
)
def bottleneck_report(
    context: dg.AssetExecutionContext,
    kernel_attribution: dict,
    tracelake: TraceLakeResource,
    runner: BenchmarkRunnerResource,
) -> dict:
    lake, session_id = tracelake.lake, kernel_attribution["session_id"]
    with lake.reading():  # the reads after explain's write share one open of the lake
        choice = session_envelope(lake, session_id, runner.target)
        envelope_id, envelope = choice.envelope_id, choice.envelope
        report, utilization = explain(
            lake, session_id, kernel_attribution["metrics"], envelope_id, envelope, note=choice.note
        )
        points = top_roofline_points(lake, session_id).to_pylist()
        roofline_points = (
            lake.query("SELECT * FROM roofline_points WHERE session_id = $sid", {"sid": session_id})
            if envelope is not None
            else None
        )
    evidence = [item for item in report.to_dict()["evidence"] if item["value"] is not None]
    context.add_output_metadata(
        {
            "session_id": session_id,
            "bottleneck": report.bottleneck,
            "confidence": round(report.confidence, 4),
            "hardware_envelope_utilization": round(utilization.hardware_envelope_utilization, 4)
            if utilization
            else None,
            "dominant_resource": utilization.dominant_resource if utilization else None,
            "posterior": dg.MetadataValue.md(
                markdown_table(
                    [
                        {"class": k, "p": v}
                        for k, v in sorted(report.posterior.items(), key=lambda kv: -kv[1])
                    ],
                    [("class", "class", None), ("p", "posterior", num)],
                )
            ),
            "evidence": dg.MetadataValue.md(
                markdown_table(
                    evidence,
                    [
                        ("signal", "signal", None),
                        ("value", "value", num),
                        ("bin", "bin", None),
                        ("favours", "favours", None),
                    ],
                )
            ),
            "recommendations": dg.MetadataValue.md(
                "\n".join(f"{r.rank}. **{r.action}** — {r.why}" for r in report.recommendations)
            ),
            "roofline_top_ops": dg.MetadataValue.md(
                markdown_table(
                    points,
                    [
                        ("onnx_node", "node", None),
                        ("op_type", "op", None),
                        ("time_ns", "ms/iter", ms),
                        ("arithmetic_intensity", "FLOP/B", num),
                        ("achieved_flops_per_s", "FLOP/s", num),
                        ("dtype", "dtype", None),
                        ("roof_dtype", "roof", None),
                        ("bound", "bound", None),
                        ("utilization", "of roof", pct),
                    ],
                )
            ),
            "plots": dg.MetadataValue.md(_plots(roofline_points, envelope))
            if envelope is not None
            else dg.MetadataValue.md(choice.note),
            "envelope_id": envelope_id,
            # measured | datasheet (published peaks, not measured) | none
            "envelope_source": choice.source,
            "envelope_note": choice.note,
            "envelope_gemm_peaks_tflops": dg.MetadataValue.json(
                {d: round(p / 1e12, 4) for d, p in envelope.gemm_peaks().items()}
            )
            if envelope is not None
            else None,
            "envelope_reference": dg.MetadataValue.json(envelope.reference)
            if envelope is not None and envelope.reference
            else None,
        }
    )
    return {**kernel_attribution, "bottleneck": report.bottleneck, "confidence": report.confidence}


def _plots(points, envelope) -> str:
    """The roofline, inline as a PNG data URI (well under 100 KB). The time per op is
    kernel_attribution's plot: drawing it again here cost every run another 0.4 s."""
    ceilings = (envelope.gemm.peak, envelope.bandwidth.peak)
    chart = roofline(points, *ceilings, dtype_roofs=envelope.gemm_peaks(), source=envelope.source)
    return markdown_image(chart, f"roofline ({envelope.source} envelope)")

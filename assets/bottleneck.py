"""bottleneck_report: roofline placement, envelope utilization and the bottleneck with evidence."""

import dagster as dg

from aaco_pipelines.analysis.bottleneck.classification import close_call_text
from aaco_pipelines.analysis.bottleneck.roofline import JudgedRoofline
from aaco_pipelines.assets.envelope import envelope_metadata, hardware_envelope
from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import as_text, session_links
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.report.breakdown_plots import roofline_chart
from aaco_pipelines.report.markdown_tables import markdown_table, ms, num, pct
from aaco_pipelines.report.plot_canvas import markdown_image
from aaco_pipelines.resources import (
    BenchmarkRunnerResource,
    ModelRegistryResource,
    TraceLakeResource,
)
from aaco_pipelines.stages.diagnose import Diagnosis, diagnose


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
    critical_path: dict,
    tracelake: TraceLakeResource,
    runner: BenchmarkRunnerResource,
    registry: ModelRegistryResource,
) -> dict:
    session_id, metrics = critical_path["session_id"], critical_path["metrics"]
    diagnosis = diagnose(tracelake.lake, session_id, metrics, runner.target)
    choice = diagnosis.choice
    if choice.measured_now:  # measured on demand: a materialization of hardware_envelope too,
        # so its page and the catalog show it (an observation left it "Never materialized")
        metadata = envelope_metadata(choice.envelope_id, choice.envelope)
        context.log_event(dg.AssetMaterialization(hardware_envelope.key, metadata=metadata))
    context.add_output_metadata(_metadata(diagnosis, registry.paths.home))
    report = diagnosis.report
    return {**critical_path, "bottleneck": report.bottleneck, "confidence": report.confidence}


def _metadata(diagnosis: Diagnosis, home) -> dict:
    choice, report, utilization = diagnosis.choice, diagnosis.report, diagnosis.utilization
    envelope, points = choice.envelope, diagnosis.top_points
    evidence = [item for item in report.to_dict()["evidence"] if item["value"] is not None]
    metadata = {
        "session_id": diagnosis.session_id,
        "roofline_plot": dg.MetadataValue.md(_plots(diagnosis.roofline_points, diagnosis.roofs))
        if envelope is not None
        else dg.MetadataValue.md(choice.note),
        **session_links(home, diagnosis.session_id),
        "bottleneck": report.bottleneck,
        "confidence": round(report.confidence, 4),
        # classes that win with the signals moved by their run-to-run spread (a close call)
        "close_calls": close_call_text(report.to_dict()["close_calls"]) or "none",
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
                    ("value", "value", num),  # a per-iteration median where there is a mean
                    ("mean", "mean", num),
                    ("bin", "bin", None),
                    ("favours", "favours", None),
                ],
            )
        ),
        "recommendations": dg.MetadataValue.md(
            "\n".join(f"{r.rank}. **{r.action}** — {r.why}" for r in report.recommendations)
        ),
        # six columns: FLOP/s, dtypes, roof, ceiling and lifts are in the HTML report
        "roofline_top_ops": dg.MetadataValue.md(
            markdown_table(
                points,
                [
                    ("onnx_node", "node", None),
                    ("op_type", "op", None),
                    ("time_ns", "ms/iter", ms),
                    ("arithmetic_intensity", "FLOP/B", num),
                    ("bound", "bound", None),
                    ("utilization", "of roof", pct),
                ],
            )
        ),
        # each GPU kernel's occupancy, counted work and class (analysis/kernels/diagnosis.py)
        "kernel_findings": dg.MetadataValue.md(_kernel_table(diagnosis))
        if diagnosis.kernels.kernels.num_rows
        else "no GPU kernels (the CPU provider's ops are judged above)",
        "envelope_id": choice.envelope_id,
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
    return as_text(metadata)


def _kernel_table(diagnosis: Diagnosis, limit: int = 10) -> str:
    """The kernels with the most time: where they ran, their class and why."""
    rows = diagnosis.kernels.kernels.slice(0, limit).to_pylist()
    return markdown_table(
        rows,
        [
            ("kernel_name", "kernel", None),  # its node is in the recommendations
            ("share", "share", pct),
            ("kernel_class", "class", None),
            ("occupancy_text", "occupancy", None),
            ("compute_utilization", "of peak", pct),
            ("bandwidth_utilization", "of bandwidth", pct),
        ],
    )


def _plots(points, roofs: JudgedRoofline) -> str:
    """The roofline under the roofs the points were judged by (lifted where an op beat one),
    inline as an SVG data URI (well under 100 KB). The time per op is kernel_attribution's
    plot: drawing it again here cost every run another 0.4 s."""
    chart = roofline_chart(points, roofs)
    return markdown_image(chart, f"roofline ({roofs.envelope.source} envelope)")

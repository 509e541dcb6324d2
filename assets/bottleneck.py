"""bottleneck_report: roofline placement, envelope utilization and the bottleneck with evidence."""

import dagster as dg

from aaco_pipelines.analysis.bottleneck.actions import MEASURE_AGAIN
from aaco_pipelines.analysis.bottleneck.classification import class_line, close_call_text
from aaco_pipelines.assets.envelope import envelope_metadata, hardware_envelope
from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import as_text, session_page
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
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
    check_specs=[
        dg.AssetCheckSpec(
            "class_is_trustworthy",
            asset="bottleneck_report",
            description="Warns when the class cannot be acted on as it stands: the evidence did "
            "not decide it, or it rests on a measurement the quality check suspects (the host "
            "was busy: measure again). Shown in the Catalog beside the class.",
        )
    ],
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
):
    session_id, metrics = critical_path["session_id"], critical_path["metrics"]
    diagnosis = diagnose(tracelake.lake, session_id, metrics, runner.target)
    choice = diagnosis.choice
    if choice.measured_now:  # measured on demand: a materialization of hardware_envelope too,
        # so its page and the catalog show it (an observation left it "Never materialized")
        metadata = envelope_metadata(choice.envelope_id, choice.envelope)
        context.log_event(dg.AssetMaterialization(hardware_envelope.key, metadata=metadata))
    metadata = _metadata(diagnosis, registry.paths.home, tracelake.lake)
    report = diagnosis.report
    yield dg.Output(
        {
            **critical_path,
            "bottleneck": report.bottleneck,
            "confidence": report.confidence,
            "decided": report.decided,
        },
        metadata=metadata,
    )
    yield _trust_check(report, metadata["summary"])


def _trust_check(report, summary) -> dg.AssetCheckResult:
    """Passes when the class is decided on a measurement nobody suspects."""
    first = report.recommendations[0].action if report.recommendations else ""
    suspect = first.startswith(MEASURE_AGAIN)
    return dg.AssetCheckResult(
        check_name="class_is_trustworthy",
        passed=report.decided and not suspect,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "decided": report.decided,
            "measurement_suspect": suspect,
            "summary": summary,
        },
    )


def _metadata(diagnosis: Diagnosis, home, lake) -> dict:
    """The report's bottleneck, roofline and kernel sections, and the figures they rest on."""
    choice, report, utilization = diagnosis.choice, diagnosis.report, diagnosis.utilization
    envelope = choice.envelope
    page = session_page(
        home,
        lake,
        diagnosis.session_id,
        sections=("bottleneck", "roofline", "kernels"),
        plots=("roofline",) if envelope is not None else (),
    )
    if envelope is None:  # no roofline to draw: the page says why where the plot would be
        page = {"session_id": diagnosis.session_id, "roofline_plot": choice.note, **page}
    if "kernel_findings" not in page:
        page["kernel_findings"] = "no GPU kernels (the CPU provider's ops are judged above)"
    metadata = {
        **page,
        "bottleneck": report.bottleneck if report.decided else class_line(report.to_dict()),
        "confidence": round(report.confidence, 4),
        # false when the evidence could not settle the class; then why, in numbers
        "decided": report.decided,
        "undecided_reason": report.undecided_reason or "",
        # classes that win with the signals moved by their run-to-run spread (a close call)
        "close_calls": close_call_text(report.to_dict()["close_calls"]) or "none",
        "hardware_envelope_utilization": round(utilization.hardware_envelope_utilization, 4)
        if utilization
        else None,
        "dominant_resource": utilization.dominant_resource if utilization else None,
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

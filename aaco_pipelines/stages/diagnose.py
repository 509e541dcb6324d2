"""Diagnose (bottleneck_report): what limits a session, with the evidence.

The envelope it is judged against (analysis.envelope.choice: this host's measured one, or for
an ingested trace its GPU's, else none), every node on the roofline under its own data type's
roof, the hardware envelope utilization, and the bottleneck (launch-, CPU-, memory-,
compute-bound, throttled or balanced) by a Bayesian combination of the evidence.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pyarrow as pa

from aaco_pipelines.analysis.bottleneck.classification import (
    BottleneckReport,
    Recommendation,
    classify_bottleneck,
)
from aaco_pipelines.analysis.bottleneck.evidence import (
    evidence_means,
    session_evidence,
    session_utilization,
)
from aaco_pipelines.analysis.bottleneck.roofline import (
    EnvelopeUtilization,
    JudgedRoofline,
    dominant_dtype,
    judge_roofline,
    node_dtypes,
    roofline_utilization,
)
from aaco_pipelines.analysis.critical_path.session_path import fix_first, node_gains
from aaco_pipelines.analysis.envelope.choice import EnvelopeChoice, session_envelope
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.analysis.kernels.diagnosis import (
    KernelDiagnoses,
    diagnose_kernels,
    recommendations,
)
from aaco_pipelines.tracelake.journal import JUDGED_AGAINST, LakeJournal
from aaco_pipelines.tracelake.queries import roofline_nodes
from aaco_pipelines.tracelake.store import TraceLake, reads_together


@dataclass(frozen=True)
class Diagnosis:
    session_id: str
    choice: EnvelopeChoice  # the envelope it was judged against, or why none
    report: BottleneckReport
    utilization: EnvelopeUtilization | None  # None without an envelope


def diagnose(
    lake: TraceLake, session_id: str, metrics: dict[str, float], target: str = "cpu"
) -> Diagnosis:
    """Choose the envelope, place the ops on its roofline and classify; stored."""
    with lake.reading():  # the envelope's choice and the judgement share one open of the lake
        choice = session_envelope(lake, session_id, target)
        report, utilization, _, _ = judge_against_envelope(
            lake, session_id, metrics, choice.envelope_id, choice.envelope, note=choice.note
        )
    # Which envelope judged it depended on the moment (the newest quiet one of today's
    # runtime): `aaco restore` judges it against the same one again.
    LakeJournal(lake.path).record(
        JUDGED_AGAINST, session_id=session_id, envelope_id=choice.envelope_id, note=choice.note
    )
    return Diagnosis(session_id, choice, report, utilization)


@reads_together
def judge_against_envelope(
    lake: TraceLake,
    session_id: str,
    metrics: dict[str, float],
    envelope_id: str | None,
    envelope: HardwareEnvelope | None,
    *,
    note: str | None = None,
) -> tuple[BottleneckReport, EnvelopeUtilization | None, JudgedRoofline, KernelDiagnoses]:
    """Place the session's ops on the roofline, each under its data type's roof and its memory
    level's ceiling, gather the evidence and classify, and judge each GPU kernel (its findings
    follow the session's recommendations); stored. A roof an op beat is lifted to
    that op's rate, for the points, the utilization and the class alike, and the note says so.
    Without an envelope (`note` says why) nothing is judged against a roof: no bound,
    utilization or intensity ratio, and the note is stored."""
    nodes = roofline_nodes(lake, session_id)
    nodes = nodes.append_column("dtype", node_dtypes(nodes))
    nodes = nodes.drop_columns(["graph_op_type", "dtypes", "runtime_ops"])
    judged = judge_roofline(nodes, envelope)
    roofline, envelope = judged.points, judged.envelope
    note = ". ".join(part.rstrip(".") for part in (note, judged.note()) if part) or None
    roofline = roofline.append_column(
        "session_id", pa.array([session_id] * roofline.num_rows, pa.string())
    )
    roofline = roofline.append_column(
        "envelope_id", pa.array([envelope_id] * roofline.num_rows, pa.string())
    )
    utilization, mean_utilization, ridge = _utilizations(
        lake, session_id, metrics, roofline, envelope
    )
    evidence = session_evidence(lake, session_id, metrics, utilization, ridge)
    report = classify_bottleneck(evidence, evidence_means(metrics, mean_utilization))
    kernels = diagnose_kernels(lake, session_id, envelope)
    first = [
        Recommendation(len(report.recommendations) + i, action, why)
        for i, (action, why) in enumerate(fix_first(lake, session_id), 1)
    ]
    rank = len(report.recommendations) + len(first) + 1
    found = recommendations(kernels, rank, node_gains(lake, session_id))
    report = dataclasses.replace(report, recommendations=[*report.recommendations, *first, *found])
    summary = report.to_dict()
    row = {
        "session_id": session_id,
        "envelope_id": envelope_id,
        "bottleneck": report.bottleneck,
        "confidence": report.confidence,
        "dominant_resource": utilization.dominant_resource if utilization else None,
        "hardware_envelope_utilization": (
            utilization.hardware_envelope_utilization if utilization else None
        ),
        "posterior_json": json.dumps(summary["posterior"]),
        "evidence_json": json.dumps(summary["evidence"]),
        "recommendations_json": json.dumps(summary["recommendations"]),
        "envelope_source": envelope.source if envelope is not None else "none",
        "envelope_note": note,
        "close_calls_json": json.dumps(summary["close_calls"]),
    }
    lake.replace_session_rows(
        session_id,
        {
            "roofline_points": roofline,
            "bottleneck_reports": pa.Table.from_pylist([row]),
            "kernel_diagnoses": kernels.kernels,
            "counter_roofline": kernels.nodes,
        },
    )
    return report, utilization, judged, kernels


def _utilizations(
    lake: TraceLake,
    session_id: str,
    metrics: dict[str, float],
    roofline: pa.Table,
    envelope: HardwareEnvelope | None,
) -> tuple[EnvelopeUtilization | None, EnvelopeUtilization | None, float]:
    """The session's utilization of its ops' median times (classified on), of their mean times
    (shown beside it), and the ridge point its intensity ratio is formed against. Without an
    envelope: none, and no intensity ratio is formed."""
    if envelope is None:
        return None, None, 1.0
    session_roof = envelope.for_dtype(dominant_dtype(roofline))
    at_means = roofline.set_column(
        roofline.schema.get_field_index("time_ns"), "time_ns", roofline["mean_ns"]
    )
    median = roofline_utilization(roofline, envelope) or session_utilization(
        lake, session_id, metrics, session_roof
    )
    mean = roofline_utilization(at_means, envelope) or session_utilization(
        lake, session_id, metrics, session_roof, mean=True
    )
    return median, mean, session_roof.ridge_point()

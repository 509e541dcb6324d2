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

from aaco_pipelines.analysis.bottleneck.actions import (
    SessionFacts,
    class_actions,
    measure_again,
    worth_reading,
)
from aaco_pipelines.analysis.bottleneck.classification import BottleneckReport, classify_bottleneck
from aaco_pipelines.analysis.bottleneck.contention import judging
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
    roof_time_per_node_us,
    roofline_utilization,
)
from aaco_pipelines.analysis.critical_path.session_path import fix_first, node_gains
from aaco_pipelines.analysis.envelope.choice import (
    EXTERNAL_TARGET,
    EnvelopeChoice,
    session_envelope,
)
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.analysis.kernels.diagnosis import (
    KernelDiagnoses,
    diagnose_kernels,
    recommendations,
)
from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality
from aaco_pipelines.tracelake.journal import JUDGED_AGAINST, LakeJournal
from aaco_pipelines.tracelake.queries import roofline_nodes
from aaco_pipelines.tracelake.store import TraceLake, reads_together
from aaco_pipelines.tracelake.tables.analysis import MEASUREMENT_QUALITY

MEASUREMENT_QUALITY_COLUMNS = [name for name in MEASUREMENT_QUALITY.names if name != "session_id"]


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
    roof_time = roof_time_per_node_us(roofline, envelope) if envelope is not None else None
    evidence = session_evidence(lake, session_id, metrics, utilization, ridge, roof_time)
    quality, facts, p50 = _measurement(lake, session_id)
    judged = judging(quality, trace_source=facts.trace_source, ingested=facts.ingested)
    report = classify_bottleneck(
        evidence,
        evidence_means(metrics, mean_utilization),
        set_aside=judged.set_aside,
        classes=judged.classes,
        context=judged.context,
    )
    kernels = diagnose_kernels(lake, session_id, envelope)
    candidates = [
        *((action, why, None) for action, why in class_actions(report, facts)),
        *fix_first(lake, session_id),
        *recommendations(kernels, node_gains(lake, session_id)),
    ]
    advice = worth_reading(measure_again(facts), candidates, p50)
    report = dataclasses.replace(report, recommendations=advice)
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
        "decided": report.decided,
        "undecided_reason": report.undecided_reason,
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


def _measurement(
    lake: TraceLake, session_id: str
) -> tuple[MeasurementQuality | None, SessionFacts, float | None]:
    """The session's measurement quality (None before it was judged), the facts that decide
    which actions apply to it, and its p50 (ns)."""
    rows = lake.query(
        "SELECT s.providers_used, s.trace_source, s.target, s.latency_p50_ns, "
        "q.* EXCLUDE (session_id) FROM session_records s "
        "LEFT JOIN measurement_quality q USING (session_id) WHERE s.session_id = $sid",
        {"sid": session_id},
    ).to_pylist()
    if not rows:
        return None, SessionFacts(), None
    row = rows[0]
    quality_fields = {k: row[k] for k in MEASUREMENT_QUALITY_COLUMNS}
    quality = (
        MeasurementQuality.from_row({"session_id": session_id, **quality_fields})
        if row["verdict"] is not None
        else None
    )
    facts = SessionFacts(
        providers=tuple(row["providers_used"] or ()),
        trace_source=row["trace_source"],
        ingested=row["target"] == EXTERNAL_TARGET,
        suspect_reasons=tuple(quality.reasons) if quality and quality.suspect else (),
    )
    return quality, facts, row["latency_p50_ns"]


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

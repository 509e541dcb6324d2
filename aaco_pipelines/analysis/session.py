"""The analysis stages of one session, reading and writing the TraceLake.

attribute     where the time went: node mapping, per-node / per-op breakdown, derived metrics
envelope      the measured hardware envelope of the target (reused while the runtime
              fingerprint is unchanged, measured when there is none)
explain       roofline per node, hardware envelope utilization, evidence and the bottleneck
"""

from __future__ import annotations

import datetime as dt
import json
import secrets

import onnx
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.attribution import attribute_session
from aaco_pipelines.analysis.classification import BottleneckReport, classify_bottleneck
from aaco_pipelines.analysis.envelope import HardwareEnvelope, measure_envelope
from aaco_pipelines.analysis.evidence import session_evidence, session_utilization
from aaco_pipelines.analysis.metrics import session_metrics
from aaco_pipelines.analysis.roofline import EnvelopeUtilization, roofline_table
from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.execution.environment import capture_environment, runtime_fingerprint
from aaco_pipelines.execution.providers import host_default_providers
from aaco_pipelines.tracelake.store import TraceLake


def attribute(lake: TraceLake, bundle: SessionBundle) -> dict[str, pa.Table]:
    """Attribute the session's kernels to ONNX nodes and derive its metrics; stored, returned."""
    path = bundle.file("optimized_model.onnx")
    optimized = onnx.load(str(path), load_external_data=False) if path.is_file() else None
    tables = attribute_session(lake, bundle.session_id, optimized)
    kernels = tables.pop("kernels")
    tables["derived_metrics"] = session_metrics(lake, bundle.session_id, kernels)
    lake.replace_session_rows(bundle.session_id, tables)
    return tables


def metrics_of(tables: dict[str, pa.Table]) -> dict[str, float]:
    derived = tables["derived_metrics"]
    return dict(zip(derived["metric"].to_pylist(), derived["value"].to_pylist(), strict=True))


# --- hardware envelope ----------------------------------------------------------------------


def save_envelope(lake: TraceLake, envelope: HardwareEnvelope) -> str:
    envelope_id = f"{envelope.target}-{envelope.runtime_fingerprint[:12]}-{secrets.token_hex(3)}"
    row = {
        "envelope_id": envelope_id,
        "target": envelope.target,
        "runtime_fingerprint": envelope.runtime_fingerprint,
        "measured_at": dt.datetime.fromtimestamp(envelope.measured_at_ns / 1e9, dt.timezone.utc),
        "providers": envelope.providers,
        "gemm_flops_per_s": envelope.gemm.peak,
        "gemm_low": envelope.gemm.spread_low,
        "gemm_high": envelope.gemm.spread_high,
        "bandwidth_bytes_per_s": envelope.bandwidth.peak,
        "bandwidth_low": envelope.bandwidth.spread_low,
        "bandwidth_high": envelope.bandwidth.spread_high,
        "envelope_json": json.dumps(envelope.to_dict()),
    }
    lake.append_rows("hardware_envelopes", pa.Table.from_pylist([row]))
    return envelope_id


def latest_envelope(
    lake: TraceLake, target: str, fingerprint: str | None = None
) -> tuple[str, HardwareEnvelope] | None:
    """The newest stored envelope of a target (for one runtime fingerprint when given)."""
    rows = lake.query(
        "SELECT envelope_id, envelope_json FROM hardware_envelopes WHERE target = $target "
        "AND ($fp IS NULL OR runtime_fingerprint = $fp) ORDER BY measured_at DESC LIMIT 1",
        {"target": target, "fp": fingerprint},
    ).to_pylist()
    if not rows:
        return None
    return rows[0]["envelope_id"], HardwareEnvelope.from_dict(json.loads(rows[0]["envelope_json"]))


def current_envelope(
    lake: TraceLake, target: str, providers: list[str] | None = None
) -> tuple[str, HardwareEnvelope]:
    """The envelope for today's runtime: stored if measured under this fingerprint, else measured
    now and stored (a new ROCm / driver / ONNX Runtime means new peaks)."""
    fingerprint = runtime_fingerprint(capture_environment())
    found = latest_envelope(lake, target, fingerprint)
    if found is not None:
        return found
    envelope = measure_envelope(target, providers or host_default_providers())
    return save_envelope(lake, envelope), envelope


# --- roofline and bottleneck ----------------------------------------------------------------


def explain(
    lake: TraceLake,
    session_id: str,
    metrics: dict[str, float],
    envelope_id: str,
    envelope: HardwareEnvelope,
) -> tuple[BottleneckReport, EnvelopeUtilization | None]:
    """Place the session's ops on the roofline, gather the evidence and classify; stored."""
    nodes = lake.query(
        "SELECT name AS onnx_node, op_type, flops, bytes_moved, mean_ns AS time_ns "
        "FROM op_breakdown WHERE session_id = $sid AND level = 'node'",
        {"sid": session_id},
    )
    roofline = roofline_table(nodes, envelope)
    roofline = roofline.append_column(
        "session_id", pa.array([session_id] * roofline.num_rows, pa.string())
    )
    roofline = roofline.append_column(
        "envelope_id", pa.array([envelope_id] * roofline.num_rows, pa.string())
    )
    utilization = session_utilization(lake, session_id, metrics, envelope)
    evidence = session_evidence(lake, session_id, metrics, utilization, envelope.ridge_point())
    report = classify_bottleneck(evidence)
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
    }
    lake.replace_session_rows(
        session_id,
        {"roofline_points": roofline, "bottleneck_reports": pa.Table.from_pylist([row])},
    )
    return report, utilization


def top_roofline_points(lake: TraceLake, session_id: str, limit: int = 10) -> pa.Table:
    points = lake.query(
        "SELECT * FROM roofline_points WHERE session_id = $sid ORDER BY time_ns DESC LIMIT $n",
        {"sid": session_id, "n": limit},
    )
    return points.filter(pc.invert(pc.is_null(points["time_ns"])))

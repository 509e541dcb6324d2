"""Everything a session report shows, read from the TraceLake in one place with SQL.

The renderers (JSON, Markdown, HTML) and the plots only see the `ReportData` gathered here, so
they never touch DuckDB and stay testable; an analysis stage that never ran for the session
(no envelope, no drift verdicts) leaves its part empty rather than failing the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from aaco_pipelines.analysis.bottleneck.roofline import JudgedRoofline, lift_to_observed
from aaco_pipelines.analysis.comparison.stored_structure import stored_since_previous
from aaco_pipelines.analysis.comparison.structure_records import StructuralDiff
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality
from aaco_pipelines.foundation.sql import used_parameters
from aaco_pipelines.tracelake.queries import (
    objective_verdicts,
    open_lake,
    other_sessions,
    resolve_session,
)
from aaco_pipelines.tracelake.store import TraceLake

TOP_KERNELS = 15

# Device kernels when the session has a device trace, else the host node executions (the
# kernels of the CPU provider), as in analysis.attribution.session.session_kernels; per profiled
# iteration, so the numbers compare with op_breakdown.
TOP_KERNELS_SQL = """
WITH chosen AS (
    SELECT CASE WHEN count(*) FILTER (category = 'Kernel') > 0 THEN 'Kernel' ELSE 'Node' END AS c
    FROM kernel_events WHERE session_id = $sid
),
kernels AS (
    SELECT coalesce(kernel_name, node_name, event_name) AS kernel, kernel_family, op_type,
           provider, iteration, duration_ns
    FROM kernel_events_with_family
    WHERE session_id = $sid AND category = (SELECT c FROM chosen) AND iteration >= 0
),
iterations AS (SELECT greatest(count(DISTINCT iteration), 1) AS n FROM kernels)
SELECT kernel, any_value(kernel_family) AS kernel_family, any_value(op_type) AS op_type,
       any_value(provider) AS provider,
       sum(duration_ns) / any_value(n) AS mean_ns,
       count(*) / any_value(n) AS calls_per_iteration,
       sum(duration_ns) / (SELECT sum(duration_ns) FROM kernels) AS share
FROM kernels, iterations GROUP BY kernel ORDER BY mean_ns DESC LIMIT $n
"""

# Per-sample telemetry series worth a panel: GPU power, clock and activity when there is a GPU,
# else the worker's CPU use, the mean core frequency and the worker's resident memory.
TELEMETRY_SQL = """
SELECT timestamp_ns,
       CASE WHEN device = 'process' THEN 'process ' || metric ELSE metric END AS series,
       avg(value) AS value, any_value(unit) AS unit
FROM telemetry
WHERE session_id = $sid AND (
    (device = 'process' AND metric IN ('cpu_utilization', 'rss'))
    OR (device LIKE 'cpu%' AND metric = 'cpu_frequency')
    OR (device LIKE 'gpu%' AND metric IN ('socket_power', 'gfx_clock', 'gfx_activity')))
GROUP BY ALL ORDER BY series, timestamp_ns
"""

PASSES_SQL = """
SELECT pass, min(start_ns) AS start_ns, max(start_ns + latency_ns) AS end_ns
FROM iterations WHERE session_id = $sid GROUP BY pass ORDER BY start_ns
"""

ENVELOPE_SQL = """
SELECT envelope_id, target, measured_at, providers, gemm_flops_per_s, gemm_low, gemm_high,
       bandwidth_bytes_per_s, bandwidth_low, bandwidth_high,
       gemm_flops_per_s / bandwidth_bytes_per_s AS ridge_point,
       coalesce(source, 'measured') AS source, device_arch, device_name, compute_units,
       gemm_peaks_json, reference, envelope_json
FROM hardware_envelopes WHERE envelope_id = $eid
"""


@dataclass(frozen=True)
class ReportData:
    session: dict  # the sessions row, without env_json
    environment: dict  # env_json, parsed
    iterations: pa.Table  # pass, iteration, start_ns, latency_ns
    passes: pa.Table  # pass, start_ns, end_ns
    telemetry: pa.Table  # timestamp_ns, series, value, unit
    op_breakdown: pa.Table  # both levels
    top_kernels: pa.Table
    derived_metrics: pa.Table
    roofline_points: pa.Table
    envelope: dict | None  # with its memory ceilings and theoretical share
    roofs: JudgedRoofline | None  # the roofs the points were judged by, lifted where beaten
    measurement: MeasurementQuality | None  # can its latencies be trusted (None before v11)
    bottleneck: dict | None  # with posterior, evidence and recommendations parsed
    drift: list[dict]  # drift_verdicts rows, JSON columns still as text
    objectives: list[dict]  # objective_verdicts rows (the model's SLOs judged on this session)
    # a generation session's figures (aaco's and LoadGen's), request latencies, phase breakdown
    generation_metrics: pa.Table
    requests: pa.Table  # run, ttft_ns, tpot_ns
    phase_breakdown: pa.Table  # op-type level: phase, name, mean_ns, share
    # the version's other sessions nearest in time, with their top op and class
    other_sessions: list[dict]  # (queries.other_sessions)
    # each GPU kernel's occupancy, counted work and class; the counted roofline per node
    kernel_diagnoses: pa.Table  # most time first (empty on the CPU provider)
    counter_roofline: pa.Table
    # the critical path (analysis/critical_path/session_path.py): the session's row, and per node, best
    # 2x gain first (empty for a session analysed before v17, or with no iterations)
    critical_path: dict | None
    critical_path_nodes: pa.Table
    # what changed in the compiled graph since the model's previous session (None: its first)
    structure: StructuralDiff | None


SESSION_SQL = "SELECT * FROM sessions WHERE session_id = $sid"
# the session an analysis stage is still working on: not yet in the view of completed ones
IN_PROGRESS_SQL = "SELECT * FROM session_records WHERE session_id = $sid"


def read_report_data(
    lake: TraceLake | str, session_id: str, *, in_progress: bool = False
) -> ReportData:
    """The session's report data; `session_id` may be "latest". `in_progress`: the session a
    running stage analyses (its asset page), complete or not, by its exact id. Its two dozen
    reads share one open of the lake (each open costs 20-40 ms)."""
    lake = open_lake(lake)
    with lake.reading():
        sid = session_id if in_progress else resolve_session(lake, session_id)
        return _read(lake, sid, in_progress)


def _read(lake: TraceLake, sid: str, in_progress: bool) -> ReportData:
    params = {"sid": sid}

    def rows(sql: str, **extra) -> pa.Table:
        return lake.query(sql, used_parameters(sql, {**params, **extra}))

    session = rows(IN_PROGRESS_SQL if in_progress else SESSION_SQL).to_pylist()[0]
    environment = json.loads(session.pop("env_json") or "{}")
    bottleneck = _bottleneck(rows("SELECT * FROM bottleneck_reports WHERE session_id = $sid"))
    envelope_id = bottleneck["envelope_id"] if bottleneck else None
    envelope = rows(ENVELOPE_SQL, eid=envelope_id).to_pylist() if envelope_id else []
    points = rows(
        "SELECT * EXCLUDE (session_id) FROM roofline_points WHERE session_id = $sid "
        "ORDER BY time_ns DESC NULLS LAST"
    )
    measured = (
        HardwareEnvelope.from_dict(json.loads(envelope[0].pop("envelope_json")))
        if envelope
        else None
    )
    return ReportData(
        session=session,
        environment=environment,
        iterations=rows(
            "SELECT pass, iteration, start_ns, latency_ns FROM iterations WHERE session_id = $sid "
            "ORDER BY start_ns"
        ),
        passes=rows(PASSES_SQL),
        telemetry=rows(TELEMETRY_SQL),
        op_breakdown=rows(
            "SELECT level, name, op_type, mean_ns, p50_ns, share, mean_share, p_top, p_top3, "
            "kernels_per_iteration, flops, bytes_moved FROM op_breakdown WHERE session_id = $sid "
            "ORDER BY level, p50_ns DESC, mean_ns DESC"
        ),
        top_kernels=rows(TOP_KERNELS_SQL, n=TOP_KERNELS),
        derived_metrics=rows(
            "SELECT metric, value, unit FROM derived_metrics WHERE session_id = $sid"
        ),
        roofline_points=points,
        envelope=_envelope(envelope[0], measured) if envelope else None,
        roofs=judged_again(points, measured) if measured else None,
        measurement=_measurement(rows("SELECT * FROM measurement_quality WHERE session_id = $sid")),
        bottleneck=bottleneck,
        drift=rows(
            "SELECT * EXCLUDE (session_id) FROM drift_verdicts WHERE session_id = $sid"
        ).to_pylist(),
        objectives=objective_verdicts(lake, sid),
        generation_metrics=rows(
            "SELECT * EXCLUDE (session_id) FROM generation_metrics WHERE session_id = $sid"
        ),
        requests=rows("SELECT run, ttft_ns, tpot_ns FROM requests WHERE session_id = $sid"),
        phase_breakdown=rows(
            "SELECT phase, name, mean_ns, share FROM phase_breakdown WHERE session_id = $sid "
            "AND level = 'op_type' ORDER BY phase DESC, mean_ns DESC"
        ),
        other_sessions=other_sessions(lake, sid),
        kernel_diagnoses=rows(
            "SELECT * EXCLUDE (session_id) FROM kernel_diagnoses WHERE session_id = $sid "
            "ORDER BY total_ns DESC LIMIT $n",
            n=TOP_KERNELS,
        ),
        counter_roofline=rows(
            "SELECT * EXCLUDE (session_id) FROM counter_roofline WHERE session_id = $sid "
            "ORDER BY time_ns DESC LIMIT $n",
            n=TOP_KERNELS,
        ),
        critical_path=next(
            iter(
                rows(
                    "SELECT * EXCLUDE (session_id) FROM critical_paths WHERE session_id = $sid"
                ).to_pylist()
            ),
            None,
        ),
        structure=stored_since_previous(lake, sid),
        critical_path_nodes=rows(
            "SELECT * EXCLUDE (session_id) FROM critical_path_nodes WHERE session_id = $sid "
            "ORDER BY gain_2x_ns DESC NULLS LAST, critical_ns DESC, kernel_ns DESC LIMIT $n",
            n=TOP_KERNELS,
        ),
    )


def _envelope(row: dict, envelope: HardwareEnvelope) -> dict:
    """The envelope row with its per-data-type peaks and datasheet reference parsed, its memory
    ceilings (a hierarchical roofline) and the share of the host's theoretical peak."""
    row["gemm_peaks"] = json.loads(row.pop("gemm_peaks_json") or "null") or {
        "fp32": row["gemm_flops_per_s"]
    }
    row["reference"] = json.loads(row["reference"]) if row["reference"] else None
    row["memory_ceilings"] = [
        {"level": level, "capacity_bytes": capacity, "bytes_per_s": peak}
        for level, capacity, peak in envelope.memory_ceilings()
    ]
    row["theoretical_share"] = envelope.theoretical_share()
    return row


def _measurement(table: pa.Table) -> MeasurementQuality | None:
    return MeasurementQuality.from_row(table.to_pylist()[0]) if table.num_rows else None


def judged_again(points: pa.Table, envelope: HardwareEnvelope) -> JudgedRoofline:
    """The roofs the session's stored points were judged by: its envelope lifted again to the
    same ops (lift_to_observed on the same points lifts the same roofs)."""
    lifted, lifts = lift_to_observed(points, envelope)
    return JudgedRoofline(points, lifted, lifts)


def _bottleneck(table: pa.Table) -> dict | None:
    if table.num_rows == 0:
        return None
    row = table.to_pylist()[0]
    for name in ("posterior", "evidence", "recommendations", "close_calls"):
        row[name] = json.loads(row.pop(f"{name}_json") or "null")
    return row

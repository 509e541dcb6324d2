"""Named TraceLake queries, so SQL about sessions lives in one place."""

from __future__ import annotations

from aaco_pipelines.tracelake.store import TraceLake

SESSION_QUALITY_SQL = """
SELECT
    (SELECT count(*) FROM session_records WHERE session_id = $sid) AS session_rows,
    (SELECT any_value(measured_iterations) FROM session_records WHERE session_id = $sid) AS measured_requested,
    (SELECT any_value(profiled_iterations) FROM session_records WHERE session_id = $sid) AS profiled_requested,
    (SELECT count(*) FROM iterations WHERE session_id = $sid AND pass = 'measured') AS measured_rows,
    (SELECT count(*) FROM iterations WHERE session_id = $sid AND pass = 'profiled') AS profiled_rows,
    (SELECT count(DISTINCT iteration) FROM kernel_events
      WHERE session_id = $sid AND category = 'Node' AND iteration >= 0) AS iterations_with_node_events,
    (SELECT count(DISTINCT timestamp_ns) FROM telemetry
      WHERE session_id = $sid AND source = 'host' AND pass = 'measured') AS measured_telemetry_samples,
    (SELECT count(DISTINCT timestamp_ns) FROM telemetry
      WHERE session_id = $sid AND source = 'host') AS telemetry_samples,
    (SELECT (count(DISTINCT timestamp_ns) - 1) * 1e9 / nullif(max(timestamp_ns) - min(timestamp_ns), 0)
       FROM telemetry WHERE session_id = $sid AND source = 'host') AS telemetry_hz
"""


def session_quality(lake: TraceLake, session_id: str) -> dict:
    """Row counts that tell whether a session landed whole (read before it is complete)."""
    table = lake.query(SESSION_QUALITY_SQL, params={"sid": session_id})
    return {name: table.column(name)[0].as_py() for name in table.column_names}


def model_sessions(lake: TraceLake, model_slug: str) -> list[dict]:
    """A model's sessions, oldest first, with their headline figures."""
    return lake.query(
        """SELECT session_id, started_at, model_sha256, latency_p50_ns, latency_p99_ns,
                  throughput_per_s, runtime_fingerprint
           FROM sessions WHERE model_slug = ? ORDER BY started_at""",
        [model_slug],
    ).to_pylist()

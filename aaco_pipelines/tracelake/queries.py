"""Named TraceLake queries, so SQL about sessions lives in one place (the `aaco` command line
runs none of its own: its queries are here)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake


def open_lake(lake: TraceLake | str) -> TraceLake:
    """The TraceLake, refusing a missing file (a query would otherwise read an empty lake). A
    shared lake is there to read: one that cannot be reached says so when first read."""
    lake = lake if isinstance(lake, TraceLake) else TraceLake(lake)
    if not lake.exists():
        raise AacoInputError(
            "no TraceLake here",
            path=lake.path,
            fix="measure a model first (aaco run --model NAME) or point AACO_TRACELAKE at one",
        )
    return lake


def resolve_session(lake: TraceLake, session_id: str) -> str:
    """The session id itself when it exists; "latest" is the most recently started session. A
    lake with nothing to read, or a session it lacks, is a one-line error with the fix (which
    names the most recent sessions, when there are any)."""
    if not lake.exists():
        raise AacoInputError(
            "no TraceLake here",
            path=lake.path,
            fix="measure a model first (aaco run --model NAME) or set AACO_TRACELAKE",
        )
    if session_id == "latest":
        rows = lake.query("SELECT session_id FROM sessions ORDER BY started_at DESC LIMIT 1")
    else:
        rows = lake.query(
            "SELECT session_id FROM sessions WHERE session_id = $sid", {"sid": session_id}
        )
    if rows.num_rows:
        return rows["session_id"][0].as_py()
    recent = lake.query("SELECT session_id FROM sessions ORDER BY started_at DESC LIMIT 3")
    known = ", ".join(recent["session_id"].to_pylist())
    what = "no sessions" if session_id == "latest" else f"no session {session_id!r}"
    raise AacoInputError(
        f"{what} in the TraceLake",
        path=lake.path,
        fix=f"use --session latest or a session id ({known})"
        if known
        else "measure a model first (aaco run --model NAME)",
    )


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


# A generation session landed whole: every batch ran one prefill and one decode step per further
# token, its cache grew by exactly one position a step, and every batch's requests are there.
GENERATION_QUALITY_SQL = """
WITH batches AS (
    SELECT run, batch_id, count(*) AS steps, max(step) AS last_step,
           count(*) FILTER (WHERE kv_length <> first_prompt + step) AS wrong_kv,
           count(*) FILTER (WHERE phase <> CASE WHEN step = 0 THEN 'prefill' ELSE 'decode' END)
               AS wrong_phase,
           any_value(batch_size) AS batch_size
    FROM (SELECT *, first_value(input_tokens) OVER (PARTITION BY run, batch_id ORDER BY step)
                    AS first_prompt
          FROM generation_steps WHERE session_id = $sid)
    GROUP BY run, batch_id
),
answered AS (
    SELECT run, batch_id, count(*) AS requests, any_value(output_tokens) AS output_tokens
    FROM requests WHERE session_id = $sid GROUP BY run, batch_id
)
SELECT
    (SELECT count(*) FROM batches) AS batches,
    (SELECT count(*) FROM batches b JOIN answered a USING (run, batch_id)
      WHERE b.steps <> a.output_tokens OR b.last_step <> a.output_tokens - 1) AS batches_with_wrong_step_count,
    (SELECT coalesce(sum(wrong_kv), 0)::BIGINT FROM batches) AS steps_with_wrong_kv_growth,
    (SELECT coalesce(sum(wrong_phase), 0)::BIGINT FROM batches) AS steps_with_wrong_phase,
    (SELECT count(*) FROM batches b JOIN answered a USING (run, batch_id)
      WHERE a.requests <> b.batch_size) AS batches_with_missing_requests,
    (SELECT count(*) FROM requests WHERE session_id = $sid) AS requests
"""


def generation_quality(lake: TraceLake, session_id: str) -> dict:
    """Counts that tell whether a generation session's steps and requests are whole (all zero
    but `batches` and `requests` when they are)."""
    table = lake.query(GENERATION_QUALITY_SQL, params={"sid": session_id})
    return {name: table.column(name)[0].as_py() for name in table.column_names}


# The session's nodes with what tells their data type: the graph node's op and output types,
# and the runtime ops that ran it (an integer GEMM ONNX Runtime fused in makes it int8).
ROOFLINE_NODES_SQL = """
WITH graph AS (
    SELECT node_name, any_value(op_type) AS graph_op_type, any_value(output_dtypes) AS dtypes
    FROM graph_nodes
    WHERE model_sha256 = (SELECT model_sha256 FROM session_records WHERE session_id = $sid)
    GROUP BY node_name
),
runtime AS (
    SELECT onnx_node, list(DISTINCT runtime_op_type) AS runtime_ops FROM node_attribution
    WHERE session_id = $sid AND onnx_node IS NOT NULL GROUP BY onnx_node
)
SELECT o.name AS onnx_node, o.op_type, o.flops, o.bytes_moved,
       -- a typical iteration's time (the median), so one preempted iteration moves no point;
       -- an op that ran in fewer than half the iterations (median 0): its mean
       CASE WHEN o.p50_ns > 0 THEN o.p50_ns ELSE o.mean_ns END AS time_ns, o.mean_ns,
       g.graph_op_type, g.dtypes, r.runtime_ops
FROM op_breakdown o
LEFT JOIN graph g ON g.node_name = o.name
LEFT JOIN runtime r ON r.onnx_node = o.name
WHERE o.session_id = $sid AND o.level = (  -- fusion groups; a session attributed before them: nodes
    SELECT CASE WHEN count(*) > 0 THEN 'fused' ELSE 'node' END FROM op_breakdown
    WHERE session_id = $sid AND level = 'fused')
"""


def roofline_nodes(lake: TraceLake, session_id: str) -> pa.Table:
    """The session's roofline points: its fusion groups (one point per group of nodes ONNX Runtime
    ran as one) with their cost, time per iteration (median; the mean beside it) and what
    tells their data type."""
    return lake.query(ROOFLINE_NODES_SQL, {"sid": session_id})


# Per model: versions measured, the last session, and the worst verdict of its last judged one.
REGISTRY_HISTORY_SQL = """
WITH last_judged AS (
    SELECT d.model_slug, arg_max(d.session_id, s.started_at) AS session_id
    FROM drift_verdicts d JOIN sessions s USING (session_id) GROUP BY d.model_slug),
verdicts AS (
    SELECT d.model_slug, arg_min(CASE WHEN d.verdict IN ('regression', 'improvement')
        THEN d.verdict || ' (' || d.metric || ')' ELSE d.verdict END, CASE d.verdict
        WHEN 'regression' THEN 0 WHEN 'improvement' THEN 1 WHEN 'unstable_series' THEN 2
        WHEN 'no_change' THEN 3 ELSE 4 END
    ) AS verdict
    FROM drift_verdicts d JOIN last_judged USING (model_slug, session_id) GROUP BY d.model_slug)
SELECT model_slug, count(DISTINCT model_sha256) AS versions, max(started_at) AS last_at,
       arg_max(latency_p50_ns, started_at) AS last_p50_ns, any_value(v.verdict) AS verdict
FROM sessions LEFT JOIN verdicts v USING (model_slug) GROUP BY model_slug
"""


def registry_history(lake: TraceLake) -> dict[str, dict]:
    """{slug: versions, last_at, last_p50_ns, verdict} for every model with sessions (the
    verdict: the worst of its last judged session's drift verdicts)."""
    rows = lake.query(REGISTRY_HISTORY_SQL).to_pylist()
    return {row["model_slug"]: row for row in rows}


RUN_SUMMARY_SQL = """
SELECT s.session_id, s.model_slug, s.providers_used, s.measured_iterations, s.latency_mean_ns,
       s.latency_p50_ns, s.latency_p99_ns, s.throughput_per_s, b.bottleneck, b.confidence,
       b.close_calls_json, b.decided, b.undecided_reason, b.evidence_json, s.workload, s.scenario
FROM sessions s LEFT JOIN bottleneck_reports b USING (session_id) WHERE s.session_id = ?
"""


def measurement_quality_row(lake: TraceLake, session_id: str) -> dict | None:
    """The session's stored measurement-quality verdict (None for one loaded before v11)."""
    rows = lake.query(
        "SELECT * FROM measurement_quality WHERE session_id = ?", [session_id]
    ).to_pylist()
    return rows[0] if rows else None


def stored_structure_row(lake: TraceLake, session_id: str) -> dict | None:
    """The session's kept structural diff row (analysis.comparison.stored_structure); None for a
    session judged before v22, and in a lake not migrated to it yet (a read never migrates)."""
    try:
        rows = lake.query(
            "SELECT previous_session_id, diff_json FROM structural_diffs WHERE session_id = ?",
            [session_id],
        ).to_pylist()
    except duckdb.CatalogException:  # no such table: a lake older than v22, read as it is
        return None
    return rows[0] if rows else None


def objective_verdicts(lake: TraceLake, session_id: str) -> list[dict]:
    """The session's objectives (SLOs) as judged, by name (none set: empty)."""
    return lake.query(
        "SELECT * EXCLUDE (session_id) FROM objective_verdicts WHERE session_id = ? "
        "ORDER BY objective",
        [session_id],
    ).to_pylist()


# The sessions of alerts people marked invalid (noise), per metric, on the judged session's
# model and target: governance.drift.series leaves them out of the metric's baseline.
NOISE_SESSIONS_SQL = """
SELECT a.metric, list(DISTINCT e.from_session) AS sessions
FROM alerts a JOIN alert_events e USING (alert_id)
WHERE a.model_slug = $slug AND a.state = 'invalid' AND a.kind IN ('regression', 'improvement')
  AND a.target IS NOT DISTINCT FROM (SELECT target FROM session_records WHERE session_id = $sid)
  AND e.event IN ('opened', 'updated', 'reopened') AND e.from_session IS NOT NULL
GROUP BY a.metric
"""


def noise_sessions(lake: TraceLake, model_slug: str, session_id: str) -> dict[str, set[str]]:
    """{metric: sessions of its alerts marked invalid} for the session's model and target."""
    rows = lake.query(NOISE_SESSIONS_SQL, {"slug": model_slug, "sid": session_id}).to_pylist()
    return {r["metric"]: set(r["sessions"]) for r in rows}


TOP_OPS_SQL = """
SELECT o.name, o.share, o.p50_ns, o.p_top, s.profiled_iterations,
       (SELECT any_value(value) FROM derived_metrics
        WHERE session_id = $sid AND metric = 'top_op_stability') AS top_op_stability
FROM op_breakdown o JOIN session_records s USING (session_id)
WHERE o.session_id = $sid AND o.level = 'node'
ORDER BY o.p50_ns DESC NULLS LAST, o.mean_ns DESC, o.name LIMIT $n
"""


def top_op(lake: TraceLake, session_id: str, contenders: int = 32) -> dict | None:
    """The session's top ONNX node by median time, its share and how stable its rank is
    (null where not judged), with the next `contenders` nodes (`ranked`, the top op first:
    name, share, p50_ns, p_top) to find its ties among, and the top op of each of its
    version's other sessions (`others`) and their classes (`other_classes`: other_sessions);
    None before attribution."""
    rows = lake.query(TOP_OPS_SQL, {"sid": session_id, "n": contenders + 1}).to_pylist()
    if not rows:
        return None
    ranked = [{k: row[k] for k in ("name", "share", "p50_ns", "p_top")} for row in rows]
    others = other_sessions(lake, session_id)
    return {
        **rows[0],
        "ranked": ranked,
        "others": [o["top_op"] for o in others],
        "other_classes": [o["bottleneck"] for o in others],
    }


# The other completed sessions of the same model version, target and runtime, nearest in time
# first, with each one's top node (op_breakdown's order: median time, then mean) and class.
OTHER_SESSIONS_SQL = """
WITH this AS (
    SELECT model_sha256, target, runtime_fingerprint, started_at FROM session_records
    WHERE session_id = $sid
), others AS (
    SELECT s.session_id, abs(epoch(s.started_at) - epoch(this.started_at)) AS apart
    FROM sessions s, this
    WHERE s.model_sha256 = this.model_sha256 AND s.target = this.target
      AND s.runtime_fingerprint IS NOT DISTINCT FROM this.runtime_fingerprint
      AND s.session_id <> $sid
    ORDER BY apart, s.session_id LIMIT $n
), tops AS (
    SELECT session_id, name AS top_op FROM op_breakdown
    WHERE level = 'node' AND session_id IN (SELECT session_id FROM others)
    QUALIFY row_number() OVER (
        PARTITION BY session_id ORDER BY p50_ns DESC NULLS LAST, mean_ns DESC, name
    ) = 1
)
SELECT o.session_id, t.top_op, b.bottleneck
FROM others o LEFT JOIN tops t USING (session_id) LEFT JOIN bottleneck_reports b USING (session_id)
ORDER BY o.apart, o.session_id
"""
OTHER_SESSIONS = 5


def other_sessions(lake: TraceLake, session_id: str, n: int = OTHER_SESSIONS) -> list[dict]:
    """The `n` other sessions of this session's model version, target and runtime nearest to it
    in time (before or after), each with its top op and class (null where not analysed): do
    this session's findings hold from run to run (analysis/across_sessions)."""
    return lake.query(OTHER_SESSIONS_SQL, {"sid": session_id, "n": n}).to_pylist()


def run_summary(lake: TraceLake, session_id: str) -> dict:
    """A session's headline figures and its bottleneck (what `aaco run` prints)."""
    return lake.query(RUN_SUMMARY_SQL, [session_id]).to_pylist()[0]


GENERATION_SUMMARY_SQL = """
SELECT run, metric, value FROM generation_metrics
WHERE session_id = ? AND source = 'aaco' AND batch_size IS NULL AND run NOT IN ('curve')
"""


def generation_summary(lake: TraceLake, session_id: str) -> dict[tuple[str, str], float]:
    """A generation session's own figures of each scenario, as {(run, metric): value}."""
    rows = lake.query(GENERATION_SUMMARY_SQL, [session_id]).to_pylist()
    return {(r["run"], r["metric"]): r["value"] for r in rows}


def session_bundle_path(lake: TraceLake, session_id: str) -> Path | None:
    """Where the session's bundle was published (None when the row names none)."""
    rows = lake.query(
        "SELECT bundle_path FROM session_records WHERE session_id = ?", [session_id]
    ).to_pylist()
    return Path(rows[0]["bundle_path"]) if rows and rows[0]["bundle_path"] else None


PREVIOUS_SESSION_SQL = """
SELECT p.session_id FROM session_records s
JOIN session_records p
  ON p.model_slug = s.model_slug AND p.target IS NOT DISTINCT FROM s.target
 AND p.started_at < s.started_at
JOIN completed_sessions c ON c.session_id = p.session_id
WHERE s.session_id = $sid
  AND EXISTS (SELECT 1 FROM node_attribution a WHERE a.session_id = p.session_id)
ORDER BY p.started_at DESC, p.session_id DESC LIMIT 1
"""


def previous_session(lake: TraceLake, session_id: str) -> str | None:
    """The model's newest analysed session on the same target before this one."""
    rows = lake.query(PREVIOUS_SESSION_SQL, {"sid": session_id}).to_pylist()
    return rows[0]["session_id"] if rows else None


# Every complete session, newest first, with its headline, class and measurement verdict.
LIST_SESSIONS_SQL = """
SELECT s.session_id, s.started_at, s.model_slug, s.target, s.trace_source, s.workload,
       s.providers_used, s.measured_iterations, s.latency_p50_ns, s.latency_p99_ns,
       s.throughput_per_s, b.bottleneck, b.confidence, b.decided, b.undecided_reason,
       q.verdict AS measurement
FROM sessions s
LEFT JOIN bottleneck_reports b USING (session_id)
LEFT JOIN measurement_quality q USING (session_id)
WHERE $slug IS NULL OR s.model_slug = $slug
ORDER BY s.started_at DESC, s.session_id DESC
LIMIT $n
"""


def list_sessions(
    lake: TraceLake, model_slug: str | None = None, limit: int | None = None
) -> list[dict]:
    """The complete sessions (of one model when given), newest first, at most `limit` (None:
    all), each with its headline figures, its class and its measurement-quality verdict."""
    return lake.query(LIST_SESSIONS_SQL, {"slug": model_slug, "n": limit}).to_pylist()


def count_sessions(lake: TraceLake, model_slug: str | None = None) -> int:
    """How many complete sessions there are (of one model when given)."""
    rows = lake.query(
        "SELECT count(*) AS n FROM sessions WHERE $slug IS NULL OR model_slug = $slug",
        {"slug": model_slug},
    )
    return rows["n"][0].as_py()

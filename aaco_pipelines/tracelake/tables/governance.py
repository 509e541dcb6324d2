"""TraceLake tables of governance: drift and objective verdicts, alerts, bisections, baselines.

Computed by aaco_pipelines.governance (and stages.bisect): verdicts per session, alerts with their
events and notifications, bisections, and named baselines keyed by their name.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.columns import BOOL, F64, I64, STR, TS

# Each metric of a session judged against its model's history: regression or not.
DRIFT_VERDICTS = pa.schema(
    [
        ("session_id", STR),  # the session judged (the newest point of the series)
        ("model_slug", STR),
        ("metric", STR),
        # regression | improvement | no_change | insufficient_history | unstable_series
        ("verdict", STR),
        ("effect_pct", F64),
        ("ci_low", F64),
        ("ci_high", F64),
        ("z", F64),
        ("p_value", F64),  # two-sided, current vs baseline (schema v5); BH-adjusted in fdr
        (
            "decided_by",
            STR,
        ),  # cusum | ewma | z_threshold | bimodal | too_noisy | fdr_controlled ...
        ("history_points", I64),
        ("baseline_json", STR),
        ("parameters_json", STR),
        ("series_json", STR),  # the points judged, with version / runtime change markers
    ]
)

# v19: each objective (SLO) of the session judged (governance/alerts/objectives.py), in the limit's
# unit (ms, per_s, MB): breached only when the interval lies beyond the limit.
OBJECTIVE_VERDICTS = pa.schema(
    [
        ("session_id", STR),
        ("model_slug", STR),
        ("target", STR),
        ("objective", STR),  # as written: latency_p99_ms, throughput_per_s_min, ...
        ("bound", STR),  # max (a ceiling) | min (a floor)
        ("limit_value", F64),
        ("unit", STR),  # ms | per_s | MB
        ("value", F64),  # the session's figure
        ("ci_low", F64),  # its 95 % interval, widened by the session-to-session spread;
        ("ci_high", F64),  # null: open (too few samples to bound it)
        ("samples", I64),
        ("spread_pct", F64),  # session-to-session log-sd, % (null: fewer than 3 sessions)
        ("spread_sessions", I64),
        ("verdict", STR),  # met | breached | uncertain | no_data
        ("suspect", BOOL),  # breached on a measurement the quality check calls suspect
        ("basis", STR),  # what the interval rests on, in words
    ]
)

# v20: alerts (governance/alerts/lifecycle.py): one per (model, target, metric, kind), its state cycling
# new -> acknowledged / invalid / fixed -> reopened; every change of it is an event.
ALERTS = pa.schema(
    [
        ("alert_id", STR),  # stable: derived from its key
        ("model_slug", STR),
        ("target", STR),
        ("metric", STR),  # a gated drift metric, or an objective (latency_p99_ms)
        ("kind", STR),  # regression | improvement | breach
        ("state", STR),  # new | acknowledged | invalid | fixed | reopened
        ("opened_at", TS),
        ("updated_at", TS),
        ("first_session_id", STR),
        ("last_session_id", STR),  # the latest session that showed it
        ("sessions", I64),  # sessions that showed it
        ("reference", F64),  # the level before (drift's baseline median) or the limit
        ("tolerance_pct", F64),  # back within this % of the reference counts as fixed...
        ("change_pct", F64),  # ...or nearer it than this change, as the alert opened with
        ("value", F64),  # the latest session's figure
        ("effect_pct", F64),  # its change from the reference, %
        ("summary", STR),  # one line, for people and notifications
        ("evidence_json", STR),  # the verdict row (and the gate's suspected cause)
        ("clear_sessions", I64),  # consecutive sessions back at the reference since
        ("invalid_until", TS),  # marked invalid: not alerted again before this
        ("checked_through", TS),  # the start of the latest session it was checked against
    ]
)

# Every change of an alert (opened, acknowledged, fixed...): its audit log.
ALERT_EVENTS = pa.schema(
    [
        ("event_id", STR),  # unique: a notification's delivery key
        ("alert_id", STR),
        ("changed_at", TS),
        ("event", STR),  # opened | updated | acknowledged | invalid | fixed | reopened
        ("state", STR),  # the alert's state after it
        ("actor", STR),  # aaco (a session's verdict), or who changed it
        ("reason", STR),
        # the session behind it (null for a person's change); not `session_id`: an audit log
        # outlives the session rows that deleting a session removes
        ("from_session", STR),
        ("notify", BOOL),  # whether a notification is due (governance/alerts/notifications.py)
    ]
)

# v20: each notification of an alert event to the webhook (governance/alerts/notifications.py):
# delivered at least once, never twice; a dead letter after its last attempt failed. The
# endpoint is kept as scheme://host only: a Slack webhook's path is its secret.
ALERT_DELIVERIES = pa.schema(
    [
        ("event_id", STR),
        ("alert_id", STR),
        ("endpoint", STR),
        ("status", STR),  # pending (to try again) | delivered | dead
        ("attempts", I64),
        ("last_error", STR),
        ("response_status", I64),
        ("next_attempt_at", TS),
        ("delivered_at", TS),
        ("updated_at", TS),
    ]
)

# v20: which model version made a model slower (stages/bisect.py, governance/gate/bisection.py);
# v21: or which runtime environment.
BISECTIONS = pa.schema(
    [
        ("bisection_id", STR),
        ("model_slug", STR),
        ("target", STR),
        ("alert_id", STR),  # the alert it was run for (null: asked directly)
        ("good_session", STR),
        ("bad_session", STR),
        ("created_at", TS),
        ("status", STR),  # pinned | unclear (a step straddled the midpoint) | no_change
        # v21: what was bisected: "version" (the model's, null in rows before v21) or
        # "runtime" (environments with other ONNX Runtimes, one model version)
        ("dimension", STR),
        ("versions", I64),  # model versions (or runtimes) from the good one to the bad one
        ("steps", I64),  # side-by-side measurements after the first (good against bad)
        ("last_good_sha256", STR),  # (null for runtimes)
        ("first_bad_sha256", STR),
        ("last_good_runtime", STR),  # v21: "onnxruntime 1.20.1 (/envs/old/bin/python)"
        ("first_bad_runtime", STR),
        ("first_bad_session", STR),  # the session that first measured the first bad version
        ("change_pct", F64),  # the bad version's p50 against the good one's, side by side
        ("change_ci_low", F64),
        ("change_ci_high", F64),
        ("result_json", STR),  # every version, step and comparison
    ]
)

# --- Governance (schema v4): named baselines, keyed by their name -----------------------------

# Named baselines: the sessions a CI gate compares with, and their summary figures.
BASELINES = pa.schema(
    [
        ("baseline_name", STR),  # unique across the lake
        ("model_slug", STR),
        ("target", STR),
        ("created_at", TS),
        ("session_ids", pa.list_(STR)),  # the sessions the reference is made of, oldest first
        ("pinned", BOOL),  # at most one pinned baseline per model_slug + target
        ("n_sessions", I64),
        ("latency_p50_ns", F64),  # medians over the sessions' own figures
        ("latency_p99_ns", F64),
        ("throughput_per_s", F64),
        ("model_sha256", STR),  # the environment of the newest session of the baseline
        ("runtime_fingerprint", STR),
        ("providers_used", pa.list_(STR)),
        ("env_json", STR),
        ("window_json", STR),  # how the sessions were chosen (ids, last N, since / until)
        ("note", STR),
    ]
)

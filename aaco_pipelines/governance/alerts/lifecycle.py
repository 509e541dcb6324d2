"""Alerts: a confirmed change a team should hear about, kept as a record with a lifecycle.

One alert per (model, target, metric, kind), its id derived from that key, so the same change
seen again is the same alert. Kinds: `regression` and `improvement` (a confirmed drift verdict
of a gated metric: p50, p99, throughput, TTFT and TPOT p50) and `breach` (a confirmed breach of
an objective, governance.alerts.objectives).
- A session that shows it opens it (new), updates it (a regression that persists night after
  night stays one alert, its sessions counted), or reopens it when it was fixed.
- People acknowledge it (updates no longer notify), mark it invalid (noise: its sessions leave
  the metric's baseline, governance.drift.series, and it is not alerted again for INVALID_WINDOW),
  or fixed (`aaco alert ack|invalid|fixed`), together with the alerts the same session opened
  for the model's other metrics (one slowdown is one thing to acknowledge).
- A regression is fixed by itself once CONFIRM_SESSIONS sessions in a row are back: within
  min_effect_pct of the level before it (`reference`: drift's baseline median when it opened),
  or twice the baseline's spread, or nearer that level than the one it changed to, whichever
  is widest (`back_within_pct`); a breach once the objective is met again. A session measured
  on a suspect host moves nothing back. Not by a `no_change` verdict: drift's baseline
  itself moves to a lasting new level after some 15 sessions.
Every change is an event (alert_events): who, why, which session, and whether a notification
is due (opened, reopened, fixed, and updates of an alert nobody acknowledged).

A sweep's verdicts are final only after its false discovery control, so its sessions are synced
after it (sensors.sweep, assets.nightly_review); a lone run's at once (stages.judge_drift).
Each alert remembers the latest session it was checked against: syncing a session again, or an
older one, changes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import hashlib
import json
import secrets
from dataclasses import dataclass

import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.drift.series import (
    CONFIRM_SESSIONS,
    DEFAULT_POLICY,
    GATED_METRICS,
    GENERATION_SERIES,
    SESSION_METRICS,
)
from aaco_pipelines.governance.gate.bisection import midpoint_pct
from aaco_pipelines.tracelake import journal
from aaco_pipelines.tracelake.queries import measurement_quality_row
from aaco_pipelines.tracelake.schema import ALERT_EVENTS, ALERTS
from aaco_pipelines.tracelake.store import TraceLake, insert_rows

KINDS = ("regression", "improvement", "breach")
STATES = ("new", "acknowledged", "invalid", "fixed", "reopened")
ACTIVE = ("new", "acknowledged", "reopened")
INVALID_WINDOW = dt.timedelta(days=14)
FIX_TOLERANCE_PCT = DEFAULT_POLICY.min_effect_pct  # back within this of the level before
HIGHER_IS_WORSE = {m: worse for m, (_, worse) in SESSION_METRICS.items()} | GENERATION_SERIES
# What a person may do, from which states.
TRANSITIONS = {
    "acknowledged": ("new", "reopened"),
    "invalid": ("new", "acknowledged", "reopened", "fixed"),
    "fixed": ("new", "acknowledged", "reopened"),
}

SESSION_SQL = """
SELECT session_id, model_slug, target, started_at FROM session_records
WHERE session_id IN (SELECT unnest($ids)) ORDER BY started_at, session_id
"""
DRIFT_SQL = """
SELECT metric, verdict, effect_pct, ci_low, ci_high, p_value, decided_by, baseline_json,
       series_json
FROM drift_verdicts WHERE session_id = $sid AND metric IN (SELECT unnest($metrics))
"""
OBJECTIVES_SQL = """
SELECT objective, verdict, suspect, value, limit_value, unit, bound, ci_low, ci_high, basis
FROM objective_verdicts WHERE session_id = $sid
"""


@dataclass(frozen=True)
class Observation:
    """What one session says about one (metric, kind): a change it shows, or a level."""

    metric: str
    kind: str
    shows: bool  # a confirmed change of this kind
    value: float | None
    reference: float | None  # drift's baseline median, or the objective's limit
    effect_pct: float | None
    summary: str
    evidence: dict
    # how close to the reference counts as back: drift's minimum effect, or twice the baseline's
    # own spread where that is wider (a noisy series is never "back" by chance)
    tolerance_pct: float | None = None
    suspect: bool = False  # measured on a host the quality check suspects: it moves nothing back


def alert_id(model_slug: str, target: str, metric: str, kind: str) -> str:
    """Short and stable: the same change is the same alert wherever it is seen."""
    key = "\0".join((model_slug, target or "", metric, kind))
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def observations(lake, session_id: str) -> list[Observation]:
    """The session's gated drift verdicts and objective verdicts, as alerts read them; a
    regression's evidence carries the gate's suspected cause and recommendation."""
    found = []
    gate = _gate_said(lake, session_id)
    quality = measurement_quality_row(lake, session_id)
    suspect = quality is not None and quality["verdict"] == "suspect"
    for row in lake.query(
        DRIFT_SQL, {"sid": session_id, "metrics": list(GATED_METRICS)}
    ).to_pylist():
        series = json.loads(row["series_json"])
        value = series["values"][-1]
        baseline = json.loads(row["baseline_json"] or "null") or {}
        reference = baseline.get("median")
        tolerance = FIX_TOLERANCE_PCT
        if reference and baseline.get("scale"):
            tolerance = max(tolerance, 200.0 * baseline["scale"] / abs(reference))
        evidence = {k: v for k, v in row.items() if k != "series_json"}
        if row["verdict"] == "regression":
            evidence["gate"] = gate()
        for kind in ("regression", "improvement"):
            found.append(Observation(
                row["metric"], kind, row["verdict"] == kind, value, reference, row["effect_pct"],
                _drift_summary(row), evidence, tolerance, suspect,
            ))  # fmt: skip
    for row in lake.query(OBJECTIVES_SQL, {"sid": session_id}).to_pylist():
        limit = row["limit_value"]
        effect = None if row["value"] is None else (row["value"] - limit) / limit * 100.0
        found.append(Observation(
            row["objective"], "breach", row["verdict"] == "breached" and not row["suspect"],
            row["value"], limit, effect, _objective_summary(row), row, None, suspect,
        ))  # fmt: skip
    return found


def _gate_said(lake, session_id: str):
    """The gate's suspected cause and recommendation for the session, asked once when needed
    (None where it has nothing to compare with)."""
    said: list = []

    def ask() -> dict | None:
        if not said:
            # the gate's whole analysis stack (onnx): imported when an alert needs it, which
            # keeps `aaco alert list` light
            from aaco_pipelines.governance.gate.decision import gate_verdict

            try:
                verdict = gate_verdict(lake, session_id).to_dict()
                said.append({k: verdict.get(k) for k in ("suspected_cause", "recommendation")})
            except AacoInputError:
                said.append(None)
        return said[0]

    return ask


def _drift_summary(row: dict) -> str:
    effect = f"{row['effect_pct']:+.1f}%" if row["effect_pct"] is not None else "?"
    ci = (
        f" (95% CI {row['ci_low']:+.1f}% to {row['ci_high']:+.1f}%)"
        if row["ci_low"] is not None
        else ""
    )
    return f"{row['metric']} {row['verdict']} {effect}{ci}, decided by {row['decided_by']}"


def _objective_summary(row: dict) -> str:
    sign = "<=" if row["bound"] == "max" else ">="
    value = "no data" if row["value"] is None else f"{row['value']:.4g}"
    suspect = ", suspect measurement" if row["suspect"] else ""
    return (
        f"objective {row['objective']} {sign} {row['limit_value']:g} {row['unit']}: "
        f"{value} ({row['verdict']}{suspect})"
    )


def sync_alerts(
    lake: TraceLake, session_ids: list[str], now: dt.datetime | None = None
) -> list[dict]:
    """Open, update, reopen or fix the alerts of these sessions' models, session by session in
    the order they started; the events written. Each session's changes commit together."""
    written = []
    sessions = lake.query(SESSION_SQL, {"ids": list(session_ids)}).to_pylist()
    for session in sessions:
        found = observations(lake, session["session_id"])
        with lake.transaction() as con:
            alerts = _alerts_of(con, session["model_slug"], session["target"])
            changed, events = _apply(alerts, session, found, now or _now())
            _store(lake, con, session["model_slug"], session["target"], changed, events)
        written += events
    return written


def _apply(alerts: dict[str, dict], session: dict, found: list[Observation], now):
    """The alerts a session changes, and the events: pure, so it can be reasoned about alone."""
    changed, events = {}, []
    sid, started = session["session_id"], session["started_at"]

    def event(alert: dict, name: str, reason: str, notify: bool) -> None:
        events.append({"event_id": secrets.token_hex(8), "alert_id": alert["alert_id"],
                       "changed_at": now, "event": name,
                       "state": alert["state"], "actor": "aaco", "reason": reason,
                       "from_session": sid, "notify": notify})  # fmt: skip

    for obs in found:
        key = alert_id(session["model_slug"], session["target"], obs.metric, obs.kind)
        alert = alerts.get(key)
        if alert is not None and alert["checked_through"] and alert["checked_through"] >= started:
            continue  # this session, or a later one, was already applied
        if obs.shows:
            alert = _seen(alert, key, session, obs, now)
            name, reason, notify = _transition(alert, obs, now)
            event(alert, name, reason, notify)
        elif alert is not None and alert["state"] in ACTIVE and not obs.suspect:
            if _back(alert, obs):
                alert = {**alert, "checked_through": started}
                alert["clear_sessions"] += 1
                if alert["clear_sessions"] >= CONFIRM_SESSIONS or obs.kind == "breach":
                    alert["state"], alert["updated_at"] = "fixed", now
                    event(alert, "fixed", _fixed_reason(alert, obs), True)
            elif _persists(alert, obs):  # drift may await confirmation: the alert knows
                reason = (
                    f"{obs.metric} still {obs.value / alert['reference'] - 1:+.1%} from its "
                    f"level before, {alert['reference']:.4g} ({obs.summary})"
                )
                alert = _seen(alert, key, session, dataclasses.replace(obs, summary=reason), now)
                event(alert, "updated", reason, alert["state"] != "acknowledged")
            else:
                alert = {**alert, "checked_through": started, "clear_sessions": 0}
        else:
            continue
        changed[key] = alerts[key] = alert
    return changed, events


def _seen(alert: dict | None, key: str, session: dict, obs: Observation, now) -> dict:
    """The alert as this session leaves it, before its state moves."""
    base = alert or {
        "alert_id": key, "model_slug": session["model_slug"], "target": session["target"],
        "metric": obs.metric, "kind": obs.kind, "state": None, "opened_at": now,
        "first_session_id": session["session_id"], "sessions": 0, "reference": obs.reference,
        "tolerance_pct": obs.tolerance_pct, "change_pct": _change(obs), "invalid_until": None,
    }  # fmt: skip
    return {
        **base,
        "updated_at": now,
        "last_session_id": session["session_id"],
        "sessions": base["sessions"] + 1,
        "value": obs.value,
        "effect_pct": obs.effect_pct,
        "summary": f"{session['model_slug']} on {session['target']}: {obs.summary}",
        "evidence_json": json.dumps(obs.evidence, default=str),
        "clear_sessions": 0,
        "checked_through": session["started_at"],
    }


def _transition(alert: dict, obs: Observation, now) -> tuple[str, str, bool]:
    """(event, reason, notify) for a session that shows the change; the state moved."""
    state = alert["state"]
    if state is None:
        alert["state"] = "new"
        return "opened", obs.summary, True
    if state == "invalid" and alert["invalid_until"] and now < alert["invalid_until"]:
        return (
            "updated",
            f"marked invalid until {alert['invalid_until']:%Y-%m-%d}: not alerted",
            False,
        )
    if state in ("fixed", "invalid"):
        alert["state"], alert["invalid_until"] = "reopened", None
        alert["reference"], alert["tolerance_pct"] = obs.reference, obs.tolerance_pct
        alert["change_pct"] = _change(obs)
        return "reopened", obs.summary, True
    return "updated", obs.summary, state != "acknowledged"


def _back(alert: dict, obs: Observation) -> bool:
    """Whether the session is back on the good side of what the alert is about."""
    if obs.kind == "breach":
        return obs.evidence.get("verdict") == "met"
    if obs.kind == "improvement" or obs.value is None or not alert["reference"]:
        return False  # an improvement is news, not a state that ends
    return _worse_pct(obs.metric, obs.value, alert["reference"]) < back_within_pct(alert)


def back_within_pct(alert: dict) -> float:
    """How far from the level before a session may be and count as back: its tolerance, or,
    for a large change, nearer the level before than the level it changed to (the geometric
    midpoint, as a bisection tells good from bad): a 5x slowdown is not still there in a
    session 30 % slow on a busy host."""
    change = abs(alert["change_pct"] or 0.0)
    return max(alert["tolerance_pct"] or FIX_TOLERANCE_PCT, midpoint_pct(change))


def _change(obs: Observation) -> float | None:
    """The change in the worse direction, %, as the session that opened the alert showed it."""
    if obs.value is None or not obs.reference:
        return None
    return _worse_pct(obs.metric, obs.value, obs.reference)


def _worse_pct(metric: str, value: float, reference: float) -> float:
    """How far `value` is from `reference` the metric's worse way, %."""
    sign = 1.0 if HIGHER_IS_WORSE.get(metric, True) else -1.0
    return sign * (value - reference) / abs(reference) * 100.0


def _persists(alert: dict, obs: Observation) -> bool:
    """A regression's session still beyond its tolerance the worse way (not back, and not a
    gap): the same change, another session of it."""
    return obs.kind == "regression" and obs.value is not None and bool(alert["reference"])


def _fixed_reason(alert: dict, obs: Observation) -> str:
    if obs.kind == "breach":
        return f"{obs.metric} met again: {obs.summary}"
    return (
        f"{obs.metric} back within {back_within_pct(alert):.3g}% of "
        f"{alert['reference']:.4g} for "
        f"{alert['clear_sessions']} sessions in a row (latest {obs.value:.4g})"
    )


# --- people's changes --------------------------------------------------------------------


def set_state(
    lake: TraceLake, alert: str, state: str, reason: str, actor: str | None = None,
    now: dt.datetime | None = None, together: bool = True,
) -> list[dict]:  # fmt: skip
    """A person acknowledges an alert, marks it invalid (noise) or fixed; the alerts as they
    now are, this one first. `alert`: its id, or a prefix of it that names one alert.
    `together`: the same change's other alerts go with it (those the same session opened for
    the model, of the same kind: one slowdown opens one per metric, and is one thing to
    acknowledge), each with an event of its own."""
    if state not in TRANSITIONS:
        raise AacoInputError(f"an alert cannot be set to {state!r}", fix="ack, invalid or fixed")
    if not reason.strip():
        raise AacoInputError("say why", fix='--reason "what you found"')
    now = now or _now()
    with lake.transaction() as con:
        row = _one_alert(con, alert)
        if row["state"] not in TRANSITIONS[state]:
            raise AacoInputError(
                f"alert {row['alert_id']} is {row['state']}: it cannot become {state}",
                fix=f"an alert becomes {state} from {', '.join(TRANSITIONS[state])}",
            )
        rows = [row] + (_same_change(con, row, TRANSITIONS[state]) if together else [])
        changed, events = {}, []
        for i, one in enumerate(rows):
            one = {**one, "state": state, "updated_at": now, "clear_sessions": 0}
            if state == "invalid":
                one["invalid_until"] = now + INVALID_WINDOW
            why = reason if i == 0 else f"{reason} (with {row['alert_id']})"
            changed[one["alert_id"]] = one
            events.append({"event_id": secrets.token_hex(8), "alert_id": one["alert_id"],
                           "changed_at": now, "event": state, "state": state,
                           "actor": actor or _who(), "reason": why, "from_session": None,
                           "notify": False})  # fmt: skip
        _store(lake, con, row["model_slug"], row["target"], changed, events)
    return list(changed.values())


SAME_CHANGE_SQL = """
SELECT * FROM alerts
WHERE model_slug = $slug AND target IS NOT DISTINCT FROM $target AND kind = $kind
  AND first_session_id = $first AND alert_id <> $id AND list_contains($states, state)
ORDER BY alert_id
"""


def _same_change(con, row: dict, states: tuple[str, ...]) -> list[dict]:
    """The other alerts the same session opened for the model, of the same kind, that can
    change as this one does."""
    params = {"slug": row["model_slug"], "target": row["target"], "kind": row["kind"],
              "first": row["first_session_id"], "id": row["alert_id"], "states": list(states)}  # fmt: skip
    return con.sql(SAME_CHANGE_SQL, params=params).to_arrow_table().to_pylist()


def attach(lake: TraceLake, alert: str, event: str, reason: str, session: str | None = None):
    """Something aaco found about an alert (a bisection's answer), as one of its events; its
    state stays."""
    now = _now()
    with lake.transaction() as con:
        row = {**_one_alert(con, alert), "updated_at": now}
        record = {"event_id": secrets.token_hex(8), "alert_id": row["alert_id"],
                  "changed_at": now, "event": event, "state": row["state"], "actor": "aaco",
                  "reason": reason, "from_session": session, "notify": False}  # fmt: skip
        _store(lake, con, row["model_slug"], row["target"], {row["alert_id"]: row}, [record])
    return row


def find_alert(lake, alert: str) -> dict:
    """One alert by its id, or a prefix of it that names one alert."""
    return _only(lake.query(ALERT_SQL, {"id": alert}).to_pylist(), alert)


ALERT_SQL = "SELECT * FROM alerts WHERE starts_with(alert_id, $id) ORDER BY alert_id"


def _one_alert(con, alert: str) -> dict:
    return _only(con.sql(ALERT_SQL, params={"id": alert}).to_arrow_table().to_pylist(), alert)


def _only(rows: list[dict], alert: str) -> dict:
    if len(rows) != 1:
        raise AacoInputError(
            f"no alert {alert!r}" if not rows else f"{len(rows)} alerts start with {alert!r}",
            fix="aaco alert list shows every alert's id",
        )
    return rows[0]


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        return "unknown"


# --- storage -----------------------------------------------------------------------------


def _alerts_of(con, model_slug: str, target: str) -> dict[str, dict]:
    rows = con.sql(
        "SELECT * FROM alerts WHERE model_slug = ? AND target IS NOT DISTINCT FROM ?",
        params=[model_slug, target],
    ).to_arrow_table()
    return {r["alert_id"]: r for r in rows.to_pylist()}


def _store(lake, con, model_slug: str, target: str, changed: dict, events: list[dict]) -> None:
    """The changed alerts replaced and their events appended, in the caller's transaction,
    and the model's alerts as they now are journaled (a restore brings them back)."""
    if not changed and not events:
        return
    con.execute("DELETE FROM alerts WHERE list_contains(?, alert_id)", [list(changed)])
    insert_rows(con, "alerts", pa.Table.from_pylist(list(changed.values()), schema=ALERTS))
    insert_rows(con, "alert_events", pa.Table.from_pylist(events, schema=ALERT_EVENTS))
    rows = con.sql(
        "SELECT * FROM alerts WHERE model_slug = ? AND target IS NOT DISTINCT FROM ? "
        "ORDER BY alert_id",
        params=[model_slug, target],
    ).to_arrow_table()
    journal.LakeJournal(lake.path).record(
        journal.ALERTS, model_slug=model_slug, target=target, rows=rows.to_pylist(), events=events
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --- reading -----------------------------------------------------------------------------

LIST_SQL = """
SELECT * FROM alerts
WHERE ($state IS NULL OR state = $state) AND ($model IS NULL OR model_slug = $model)
  AND ($target IS NULL OR target = $target) AND ($active IS NULL OR list_contains($active, state))
ORDER BY state IN ('new', 'reopened') DESC, updated_at DESC, alert_id
"""


def list_alerts(
    lake, state: str | None = None, model: str | None = None, target: str | None = None,
    active: bool = False,
) -> list[dict]:  # fmt: skip
    """Alerts, the ones waiting for someone first, newest change first; `active`: only those
    new, acknowledged or reopened."""
    if state is not None and state not in STATES:
        raise AacoInputError(f"no alert state {state!r}", fix=f"one of {', '.join(STATES)}")
    params = {"state": state, "model": model, "target": target,
              "active": list(ACTIVE) if active else None}  # fmt: skip
    return lake.query(LIST_SQL, params).to_pylist()


def alert_history(lake, alert: str) -> list[dict]:
    """Every event of one alert, oldest first."""
    return lake.query(
        "SELECT * FROM alert_events WHERE alert_id = $id ORDER BY changed_at, event", {"id": alert}
    ).to_pylist()

"""Notifications: alert events a team should hear about, delivered to a webhook.

Which events: those governance.alerts.lifecycle marks `notify` (opened, reopened, fixed, and updates of an
alert nobody acknowledged). Each is POSTed as one JSON body that is both a generic record (the
alert, the event, the verdict's evidence, the suspected cause, links) and Slack's
incoming-webhook shape (`text` and `blocks`, which Slack reads; it ignores the rest).

Delivered at least once, never twice: a delivery is recorded per event (alert_deliveries) and
only an event without a delivered or dead one is tried, so a sensor that ticks twice, or two
deliverers at once, send it once (the record is claimed before the POST). A failed attempt
(an error, a timeout, a non-2xx answer) is tried again on a later call, after a backoff that
doubles (30 s, 1 min, 2 min, ...); after MAX_ATTEMPTS it is a dead letter, kept with its last
error. Nothing waits inside a call: a slow endpoint costs one deadline per attempt, however
it trickles (foundation.bounded_http: a total deadline, an answer of 64 KiB at most, and no
redirect followed: a redirect is a failed delivery that names it, never a POST turned into an
empty GET or a body and signature re-sent to another origin). The body is strict JSON: a
figure that is not finite is null, never `Infinity`.

Signed when a secret is set: `X-AACO-Signature: sha256=<hex>` is the HMAC-SHA256 of
`<X-AACO-Timestamp>.<body>` (the timestamp binds the signature to its moment, so an old body
cannot be replayed as new); `X-AACO-Delivery` is the event id, for a receiver to deduplicate.
The secret is never stored, logged or shown; the URL only as scheme://host (a Slack webhook's
path is its secret).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import math
import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.bounded_http import ExchangeFailed, post
from aaco_pipelines.tracelake.schema import ALERT_DELIVERIES
from aaco_pipelines.tracelake.store import TraceLake, insert_rows

URL_VARIABLE, SECRET_VARIABLE = "AACO_ALERT_WEBHOOK_URL", "AACO_ALERT_WEBHOOK_SECRET"
MAX_ATTEMPTS = 6
FIRST_BACKOFF = dt.timedelta(seconds=30)
MAX_BACKOFF = dt.timedelta(hours=1)
TIMEOUT_S = 10.0

# Events due: notify, no delivery that ended (delivered or dead), and none waiting for later.
DUE_SQL = """
SELECT e.*, a.* EXCLUDE (alert_id, state), d.attempts AS attempts_so_far
FROM alert_events e JOIN alerts a USING (alert_id)
LEFT JOIN alert_deliveries d USING (event_id)
WHERE e.notify AND (d.event_id IS NULL OR (d.status = 'pending' AND d.next_attempt_at <= $now))
ORDER BY e.changed_at, e.event_id
"""


@dataclass(frozen=True)
class Webhook:
    """Where notifications go. `secret` signs them (HMAC-SHA256)."""

    url: str
    secret: str | None = None
    timeout_s: float = TIMEOUT_S

    def __post_init__(self):
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AacoInputError(
                f"the alert webhook is not an http(s) URL ({self.endpoint})",
                fix=f"set {URL_VARIABLE} to https://host/path (Slack: its incoming-webhook URL)",
            )

    @property
    def endpoint(self) -> str:
        """scheme://host[:port]: what logs and records may show."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"

    def __repr__(self) -> str:  # never the path, the query or the secret
        return f"Webhook({self.endpoint}, signed={self.secret is not None})"

    @classmethod
    def from_env(cls, environ=None) -> Webhook | None:
        environ = os.environ if environ is None else environ
        url = environ.get(URL_VARIABLE)
        return cls(url, environ.get(SECRET_VARIABLE) or None) if url else None


@dataclass(frozen=True)
class Delivery:
    event_id: str
    alert_id: str
    status: str  # delivered | pending | dead
    attempts: int
    error: str | None


def deliver_due(
    lake: TraceLake, webhook: Webhook, now: dt.datetime | None = None, links: dict | None = None
) -> list[Delivery]:
    """Try every due notification once; what became of each event. The events one session
    caused on one model (a slowdown regresses p50, p99 and throughput at once) go out as one
    notification. `links`: extra links for the body (the Dagster UI's address, say)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    results = []
    for group in _groups(lake.query(DUE_SQL, {"now": now}).to_pylist()):
        group = _claim(lake, group, webhook, now)
        if not group:
            continue  # another deliverer has them
        body = strict_json(payload(group, links)).encode()
        key = group[0]["event_id"] if len(group) == 1 else _group_key(group)
        status, error = _post(webhook, body, key)
        results += _record(lake, group, webhook, now, status, error)
    return results


def strict_json(value) -> str:
    """JSON that every parser reads: NaN and infinities (a 5e-324 limit's effect) as null."""
    return json.dumps(_finite(value), default=str, sort_keys=True, allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _groups(rows: list[dict]) -> list[list[dict]]:
    """Due events by (session, event, model, target), in the order they happened."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["from_session"] or row["event_id"], row["event"], row["model_slug"],
               row["target"])  # fmt: skip
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _group_key(group: list[dict]) -> str:
    ids = "\0".join(sorted(row["event_id"] for row in group))
    return hashlib.sha256(ids.encode()).hexdigest()[:16]


def payload(group: list[dict], links: dict | None = None) -> dict:
    """The body: a generic record (the notification, then each alert in it), with Slack's
    `text` and `blocks`."""
    first = group[0]
    metrics = ", ".join(row["metric"] for row in group)
    kinds = "/".join(dict.fromkeys(row["kind"] for row in group))
    headline = f"[aaco] {kinds} {first['event']}: {first['model_slug']}@{first['target']} {metrics}"
    summaries = "\n".join(f"- {row['summary']}" for row in group)
    session = first["from_session"] or first["last_session_id"]
    return {
        "event": first["event"],
        "model": first["model_slug"],
        "target": first["target"],
        "session": session,
        "changed_at": first["changed_at"],
        "reason": first["reason"],
        "alerts": [_alert_record(row) for row in group],
        "links": {
            "commands": [
                *(f"aaco alert show {row['alert_id']}" for row in group),
                f"aaco report --session {session}",
            ],
            **(links or {}),
        },
        "text": f"{headline}\n{summaries}",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": headline[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": summaries[:3000]}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"`aaco alert show {first['alert_id']}`"}],
            },
        ],
    }


def _alert_record(row: dict) -> dict:
    evidence = json.loads(row.get("evidence_json") or "{}")
    return {
        "alert_id": row["alert_id"],
        "event_id": row["event_id"],
        "state": row["state"],
        "metric": row["metric"],
        "kind": row["kind"],
        "summary": row["summary"],
        "sessions": row["sessions"],
        "first_session_id": row["first_session_id"],
        "last_session_id": row["last_session_id"],
        "reference": row["reference"],
        "value": row["value"],
        "effect_pct": row["effect_pct"],
        "evidence": evidence,
        "suspected_cause": (evidence.get("gate") or {}).get("suspected_cause"),
    }


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of `<timestamp>.<body>`, as a receiver checks it."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def _post(webhook: Webhook, body: bytes, event_id: str) -> tuple[int | None, str | None]:
    """(HTTP status, error): error None on a 2xx answer. No exception leaves: the caller
    records what happened. Errors name the endpoint, never the URL."""
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "aaco-pipelines",
        "X-AACO-Delivery": event_id,
        "X-AACO-Timestamp": timestamp,
    }
    if webhook.secret:
        headers["X-AACO-Signature"] = signature(webhook.secret, timestamp, body)
    try:
        answer = post(webhook.url, body, headers, webhook.timeout_s)
    except ExchangeFailed as exc:
        return None, f"{webhook.endpoint}: {exc}"
    if 200 <= answer.status < 300:
        return answer.status, None
    if 300 <= answer.status < 400:
        where = urlsplit(answer.location or "")
        host = where.netloc.rsplit("@", 1)[-1]  # never a user or password it names
        to = f"{where.scheme}://{host}" if host else "an address it did not give"
        return answer.status, (
            f"{webhook.endpoint} answered HTTP {answer.status}, a redirect to {to}: not "
            f"followed (set {URL_VARIABLE} to the address it names)"
        )
    return answer.status, f"{webhook.endpoint} answered HTTP {answer.status}"


def _claim(lake: TraceLake, group: list[dict], webhook: Webhook, now) -> list[dict]:
    """Take the group's events for this attempt: each delivery set pending with its next
    attempt pushed past this one, so a concurrent deliverer skips them. The events still
    free (none when someone took them all)."""
    with lake.transaction() as con:
        free = []
        for row in group:
            taken = con.execute(
                "SELECT status, next_attempt_at, attempts FROM alert_deliveries WHERE event_id = ?",
                [row["event_id"]],
            ).fetchall()
            attempts = row["attempts_so_far"] or 0
            if taken and (taken[0][0] != "pending" or taken[0][1] > now or taken[0][2] != attempts):
                continue
            free.append(row)
        _write(con, free, webhook, now, "pending", None, "being delivered", now + MAX_BACKOFF)
    return free


def _record(lake: TraceLake, group: list[dict], webhook: Webhook, now, status, error):
    attempts = max(row["attempts_so_far"] or 0 for row in group) + 1
    if error is None:
        state, next_at = "delivered", None
    elif attempts >= MAX_ATTEMPTS:
        state, next_at = "dead", None
    else:
        state, next_at = "pending", now + min(FIRST_BACKOFF * 2 ** (attempts - 1), MAX_BACKOFF)
    with lake.transaction() as con:
        _write(con, group, webhook, now, state, status, error, next_at, attempts)
    return [Delivery(r["event_id"], r["alert_id"], state, attempts, error) for r in group]


def _write(con, rows, webhook, now, state, status, error, next_at, attempts=None) -> None:
    """The deliveries of these events, replaced."""
    if not rows:
        return
    ids = [row["event_id"] for row in rows]
    con.execute("DELETE FROM alert_deliveries WHERE list_contains(?, event_id)", [ids])
    records = [
        {
            "event_id": row["event_id"],
            "alert_id": row["alert_id"],
            "endpoint": webhook.endpoint,
            "status": state,
            "attempts": (row["attempts_so_far"] or 0) if attempts is None else attempts,
            "last_error": error,
            "response_status": status,
            "next_attempt_at": next_at,
            "delivered_at": now if state == "delivered" else None,
            "updated_at": now,
        }
        for row in rows
    ]
    insert_rows(con, "alert_deliveries", pa.Table.from_pylist(records, schema=ALERT_DELIVERIES))


def dead_letters(lake) -> list[dict]:
    """Notifications given up on, with their last error."""
    return lake.query(
        "SELECT * FROM alert_deliveries WHERE status = 'dead' ORDER BY updated_at"
    ).to_pylist()

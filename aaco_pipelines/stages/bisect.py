"""Bisect: which model version, between a good session and a bad one, made the model slower.

The versions come from the TraceLake: every model_sha256 the model's sessions on this target
measured, in the order each was first measured, from the good session's to the bad session's;
each is measured again from its first session's request and its bytes in the model store
(governance.paired.session_request). The search (governance.bisection) measures side by side:
the bad version against the good one first, then each midpoint against the last known good one.
The answer is stored (bisections) and, for an alert, attached to it as an event.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable

import pyarrow as pa

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.side_by_side import DEFAULT_ROUNDS, measure_side_by_side
from aaco_pipelines.governance import alerts
from aaco_pipelines.governance.bisection import (
    Bisection,
    Comparison,
    bisect_versions,
)
from aaco_pipelines.governance.paired import (
    BATCHES,
    paired_comparison,
    session_request,
    settled,
)
from aaco_pipelines.tracelake.schema import BISECTIONS
from aaco_pipelines.tracelake.store import TraceLake, insert_rows

THRESHOLD_PCT = 3.0  # the gate's default: a change smaller than this is none

SESSIONS_SQL = """
SELECT session_id, model_slug, target, model_sha256, started_at FROM sessions
WHERE session_id IN (SELECT unnest($ids))
"""
# Each version of the model on the target, with the first session that measured it.
VERSIONS_SQL = """
SELECT model_sha256, min(started_at) AS first_seen, arg_min(session_id, started_at) AS first_session
FROM sessions WHERE model_slug = $slug AND target IS NOT DISTINCT FROM $target
GROUP BY model_sha256 ORDER BY first_seen
"""
# The latest session before the alert's first one that measured another version: the good one.
GOOD_SQL = """
SELECT p.session_id FROM sessions p JOIN sessions b ON b.session_id = $bad
WHERE p.model_slug = b.model_slug AND p.target IS NOT DISTINCT FROM b.target
  AND p.started_at < b.started_at AND p.model_sha256 <> b.model_sha256
ORDER BY p.started_at DESC LIMIT 1
"""


def bisect_model(
    lake: TraceLake,
    paths: AacoPaths,
    good_session: str,
    bad_session: str,
    *,
    rounds: int = DEFAULT_ROUNDS,
    alert_id: str | None = None,
    model: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> dict:
    """Bisect the versions between two sessions of one model (`model`, when given, is checked
    against theirs); the stored bisections row."""
    say = on_progress or (lambda message: None)
    good, bad = _sessions(lake, good_session, bad_session)
    if model is not None and bad["model_slug"] != model:
        raise AacoInputError(
            f"the sessions measured {bad['model_slug']}, not {model}", fix="check --model"
        )
    versions = _versions(lake, good, bad)
    requests = {sha: session_request(paths, first) for sha, first in versions.items()}
    say(f"bisecting {len(versions)} versions of {bad['model_slug']} on {bad['target']}")

    def compare(a: str, b: str, half: float | None) -> Comparison:
        say(f"measuring {b[:12]} side by side with {a[:12]} ({rounds} rounds)")
        return _side_by_side(requests[a], requests[b], rounds, half)

    found = bisect_versions(list(versions), compare)
    row = _row(found, good, bad, versions, alert_id)
    with lake.transaction() as con:
        insert_rows(con, "bisections", pa.Table.from_pylist([row], schema=BISECTIONS))
    if alert_id:
        alerts.attach(lake, alert_id, "bisected", bisection_line(row), row["first_bad_session"])
    say(bisection_line(row))
    return row


def bisect_alert(lake: TraceLake, paths: AacoPaths, alert: str, **options) -> dict:
    """Bisect a regression alert: its first session is the bad one, the latest earlier session
    of another model version the good one."""
    row = alerts.find_alert(lake, alert)
    if row["kind"] != "regression":
        raise AacoInputError(
            f"alert {row['alert_id']} is a {row['kind']}: bisection looks for a regression",
            fix="bisect a regression alert, or give --good and --bad sessions",
        )
    good = lake.query(GOOD_SQL, {"bad": row["first_session_id"]})["session_id"].to_pylist()
    if not good:
        raise AacoInputError(
            f"no earlier session of {row['model_slug']} measured another model version: the "
            "change did not come with a new version (runtime, host?)",
            fix="aaco alert show " + row["alert_id"] + " names the suspected cause",
        )
    return bisect_model(
        lake, paths, good[0], row["first_session_id"], alert_id=row["alert_id"], **options
    )


def _side_by_side(request_a: dict, request_b: dict, rounds: int, half: float | None) -> Comparison:
    """B against A side by side; measured again in a new process (up to BATCHES) while it is
    unsettled: for the whole change as the gate settles it, for a midpoint while its interval
    straddles the midpoint."""
    measured = measure_side_by_side(request_a, request_b, rounds=rounds)
    for batch in range(BATCHES):
        paired = paired_comparison(
            measured, THRESHOLD_PCT, 0.95, 0, "", request_a["model_sha256"],
            request_b["model_sha256"],
        )  # fmt: skip
        p50 = paired.latency_p50
        done = settled(paired) if half is None else not (p50["ci_low"] < half <= p50["ci_high"])
        if done or batch == BATCHES - 1:
            break
        measured = measured.extended(measure_side_by_side(request_a, request_b, rounds=rounds))
    return Comparison(
        p50["effect_pct"], p50["ci_low"], p50["ci_high"], paired.rounds, paired.decision
    )


def _sessions(lake: TraceLake, good_session: str, bad_session: str) -> tuple[dict, dict]:
    rows = {
        r["session_id"]: r
        for r in lake.query(SESSIONS_SQL, {"ids": [good_session, bad_session]}).to_pylist()
    }
    for sid in (good_session, bad_session):
        if sid not in rows:
            raise AacoInputError(
                f"no session {sid}", fix="aaco registry list names the models' sessions"
            )
    good, bad = rows[good_session], rows[bad_session]
    if (good["model_slug"], good["target"]) != (bad["model_slug"], bad["target"]):
        raise AacoInputError(
            "the good and the bad session measured different models or targets",
            fix="give two sessions of one model on one target",
        )
    if good["model_sha256"] == bad["model_sha256"]:
        raise AacoInputError(
            "both sessions measured the same model version: there is no version to bisect",
            fix="the change came from elsewhere: aaco diff names the suspected cause",
        )
    if good["started_at"] >= bad["started_at"]:
        raise AacoInputError("the good session must come before the bad one", fix="swap them")
    return good, bad


def _versions(lake: TraceLake, good: dict, bad: dict) -> dict[str, str]:
    """{model_sha256: its first session}, from the good session's version to the bad one's."""
    rows = lake.query(VERSIONS_SQL, {"slug": good["model_slug"], "target": good["target"]})
    shas, firsts = rows["model_sha256"].to_pylist(), rows["first_session"].to_pylist()
    start, end = shas.index(good["model_sha256"]), shas.index(bad["model_sha256"])
    if start > end:
        raise AacoInputError(
            "the bad session's version was first measured before the good session's: the "
            "history does not order them",
            fix="choose a good session whose version came first",
        )
    return dict(zip(shas[start : end + 1], firsts[start : end + 1], strict=True))


def _row(found: Bisection, good: dict, bad: dict, versions: dict, alert_id) -> dict:
    change = found.change
    return {
        "bisection_id": secrets.token_hex(6),
        "model_slug": bad["model_slug"],
        "target": bad["target"],
        "alert_id": alert_id,
        "good_session": good["session_id"],
        "bad_session": bad["session_id"],
        "created_at": dt.datetime.now(dt.timezone.utc),
        "status": found.status,
        "versions": len(found.versions),
        "steps": len(found.steps),
        "last_good_sha256": found.last_good,
        "first_bad_sha256": found.first_bad,
        "first_bad_session": versions.get(found.first_bad) if found.first_bad else None,
        "change_pct": change.effect_pct,
        "change_ci_low": change.ci_low,
        "change_ci_high": change.ci_high,
        "result_json": json.dumps(found.to_dict()),
    }


def bisection_line(row: dict) -> str:
    """One line: what the bisection found."""
    change = (
        f"{row['change_pct']:+.1f} % [{row['change_ci_low']:+.1f}, {row['change_ci_high']:+.1f}]"
    )
    if row["status"] == "no_change":
        return (
            f"no version to blame: side by side the bad version is {change} of the good one's "
            "p50, not a regression"
        )
    found = (
        f"first slower version {row['first_bad_sha256'][:12]} (after "
        f"{row['last_good_sha256'][:12]}), first measured by {row['first_bad_session']}"
    )
    unclear = ", one step unclear: measure it again" if row["status"] == "unclear" else ""
    return (
        f"{found}: the whole change {change}, {row['versions']} versions in {row['steps']} "
        f"steps{unclear}"
    )

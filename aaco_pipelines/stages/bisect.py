"""Bisect: which model version, between a good session and a bad one, made the model slower.

The versions come from the TraceLake: every model_sha256 the model's sessions on this target
measured, in the order each was first measured, from the good session's to the bad session's;
each is measured again from its first session's request and its bytes in the model store
(governance.gate.paired.session_request). The search (governance.gate.bisection) measures side by side:
the bad version against the good one first, then each midpoint against the last known good one.
The answer is stored (bisections) and, for an alert, attached to it as an event.

Across runtimes (bisect_runtimes), the "versions" are environments that each hold another
ONNX Runtime (execution.runtime_envs), oldest to newest as the user names them: one model
version, the session's request, measured under two of them at a time in two runtime
processes (execution.across_runtimes), by the same search.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import secrets
from collections.abc import Callable

import pyarrow as pa

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.across_runtimes import measure_across_runtimes
from aaco_pipelines.execution.environment import capture_environment
from aaco_pipelines.execution.runtime_envs import Runtime, find_runtime
from aaco_pipelines.execution.side_by_side import (
    DEFAULT_ROUNDS,
    SideBySide,
    measure_side_by_side,
)
from aaco_pipelines.governance.alerts import lifecycle as alerts
from aaco_pipelines.governance.gate.bisection import (
    Bisection,
    Comparison,
    bisect_versions,
)
from aaco_pipelines.governance.gate.paired import (
    BATCHES,
    paired_comparison,
    session_request,
    settled,
)
from aaco_pipelines.tracelake.schema import BISECTIONS
from aaco_pipelines.tracelake.store import TraceLake, insert_rows

THRESHOLD_PCT = 3.0  # the gate's default: a change smaller than this is none

SESSIONS_SQL = """
SELECT session_id, model_slug, target, model_sha256, started_at, runtime_fingerprint FROM sessions
WHERE session_id IN (SELECT unnest($ids))
"""
LATEST_SQL = """
SELECT session_id FROM sessions WHERE model_slug = $slug ORDER BY started_at DESC LIMIT 1
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
# The same, for a change of runtime: the latest earlier session with another runtime fingerprint.
GOOD_RUNTIME_SQL = """
SELECT p.session_id FROM sessions p JOIN sessions b ON b.session_id = $bad
WHERE p.model_slug = b.model_slug AND p.target IS NOT DISTINCT FROM b.target
  AND p.started_at < b.started_at
  AND p.runtime_fingerprint IS DISTINCT FROM b.runtime_fingerprint
ORDER BY p.started_at DESC LIMIT 1
"""
# The first session of the model on the target that a runtime (its fingerprint) measured.
FIRST_WITH_RUNTIME_SQL = """
SELECT session_id FROM sessions
WHERE model_slug = $slug AND target IS NOT DISTINCT FROM $target AND runtime_fingerprint = $fp
ORDER BY started_at LIMIT 1
"""


def bisect(
    lake: TraceLake,
    paths: AacoPaths,
    *,
    alert: str | None = None,
    good: str | None = None,
    bad: str | None = None,
    runtimes: list[str] | None = None,
    **options,
) -> dict:
    """What `aaco bisect` and the Dagster job ask for: an alert (its versions, or with
    `runtimes` its runtimes), or a good and a bad session's versions, or runtimes with the bad
    session (or `model`'s latest); the stored bisections row."""
    if alert and (good or bad):
        raise AacoInputError(
            "bisect an alert, or a good and a bad session", fix="--alert ID, or --good S1 --bad S2"
        )
    if good and not bad:
        raise AacoInputError("--good needs --bad", fix="--good S1 --bad S2")
    if alert:
        return bisect_alert(lake, paths, alert, runtimes, **options)
    if runtimes:
        return bisect_runtimes(lake, paths, runtimes, good_session=good, bad_session=bad, **options)
    if not (good and bad):
        raise AacoInputError(
            "bisect an alert, or a good and a bad session",
            fix="--alert ID, or --good S1 --bad S2 (with --runtime ENV ...: runtimes)",
        )
    return bisect_model(lake, paths, good, bad, **options)


def blamed(row: dict) -> tuple[str | None, str | None]:
    """A bisection's last good and first bad version (or runtime)."""
    if row.get("dimension") == "runtime":
        return row["last_good_runtime"], row["first_bad_runtime"]
    return row["last_good_sha256"], row["first_bad_sha256"]


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
    _of_model(bad, model)
    versions = _versions(lake, good, bad)
    requests = {sha: session_request(paths, first) for sha, first in versions.items()}
    say(f"bisecting {len(versions)} versions of {bad['model_slug']} on {bad['target']}")

    def compare(a: str, b: str, half: float | None) -> Comparison:
        say(f"measuring {b[:12]} side by side with {a[:12]} ({rounds} rounds)")
        measure = functools.partial(measure_side_by_side, requests[a], requests[b], rounds)
        return _settled(measure, requests[a]["model_sha256"], requests[b]["model_sha256"], half)

    found = bisect_versions(list(versions), compare)
    row = _row(found, good, bad, alert_id)
    row |= {
        "dimension": "version",
        "last_good_sha256": found.last_good,
        "first_bad_sha256": found.first_bad,
        "first_bad_session": versions.get(found.first_bad) if found.first_bad else None,
    }
    return _store(lake, row, say)


def bisect_runtimes(
    lake: TraceLake,
    paths: AacoPaths,
    environments: list[str],
    *,
    good_session: str | None = None,
    bad_session: str | None = None,
    model: str | None = None,
    rounds: int = DEFAULT_ROUNDS,
    alert_id: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> dict:
    """Bisect runtime environments (oldest first: the first is the good one, the last the bad
    one) with one model version: the bad session's (or, with only `model`, its latest
    session's) request, measured under two runtimes at a time. The stored bisections row."""
    say = on_progress or (lambda message: None)
    good, bad = _runtime_sessions(lake, good_session, bad_session, model)
    runtimes = _runtimes(environments)
    request = session_request(paths, bad["session_id"])
    host = capture_environment()
    notes = _fingerprint_notes(good, bad, runtimes, host)
    for note in notes:
        say(f"warning: {note}")
    by_python = {runtime.python: runtime for runtime in runtimes}
    say(f"bisecting {len(runtimes)} runtimes with {bad['model_slug']} on {bad['target']}")

    def compare(a: str, b: str, half: float | None) -> Comparison:
        say(f"measuring {by_python[b].label} side by side with {by_python[a].label}")
        measure = functools.partial(
            measure_across_runtimes, request, by_python[a], by_python[b], rounds
        )
        sha = request["model_sha256"]
        return _settled(measure, sha, sha, half)

    found = bisect_versions(list(by_python), compare)
    measured = {
        "model_sha256": bad["model_sha256"],
        "runtimes": [
            {**dataclasses.asdict(r), "fingerprint": r.fingerprint(host)} for r in runtimes
        ],
        "notes": notes,
    }
    row = _row(found, good, bad, alert_id, measured) | _runtimes_found(
        lake, found, by_python, bad, host
    )
    return _store(lake, row, say)


def _runtimes_found(
    lake: TraceLake, found: Bisection, by_python: dict[str, Runtime], bad: dict, host: dict
) -> dict:
    """The row's runtime columns: the last good and first bad runtime, and the first session
    measured with the bad one, where its fingerprint tells it from the good one's."""
    if found.first_bad is None:
        return {"dimension": "runtime"}
    good, first_bad = by_python[found.last_good], by_python[found.first_bad]
    told_apart = first_bad.fingerprint(host) != good.fingerprint(host)
    return {
        "dimension": "runtime",
        "last_good_runtime": good.label,
        "first_bad_runtime": first_bad.label,
        "first_bad_session": _first_session(lake, bad, first_bad.fingerprint(host))
        if told_apart
        else None,
    }


def _store(lake: TraceLake, row: dict, say: Callable[[str], None]) -> dict:
    """Store the bisection and attach it to its alert."""
    with lake.transaction() as con:
        insert_rows(con, "bisections", pa.Table.from_pylist([row], schema=BISECTIONS))
    if row["alert_id"]:
        alerts.attach(
            lake,
            row["alert_id"],
            "bisected",
            bisection_line(row),
            row["first_bad_session"] or row["bad_session"],
        )
    say(bisection_line(row))
    return row


def bisect_alert(
    lake: TraceLake,
    paths: AacoPaths,
    alert: str,
    runtimes: list[str] | None = None,
    **options,
) -> dict:
    """Bisect a regression alert: its first session is the bad one, the latest earlier session
    of another model version the good one; with `runtimes` (environments, oldest first), the
    latest earlier session of another runtime, and the runtimes are bisected."""
    row = alerts.find_alert(lake, alert)
    if row["kind"] != "regression":
        raise AacoInputError(
            f"alert {row['alert_id']} is a {row['kind']}: bisection looks for a regression",
            fix="bisect a regression alert, or give --good and --bad sessions",
        )
    if runtimes:
        before = lake.query(GOOD_RUNTIME_SQL, {"bad": row["first_session_id"]})
        good_runtime = before["session_id"].to_pylist()
        return bisect_runtimes(
            lake, paths, runtimes, good_session=(good_runtime or [None])[0],
            bad_session=row["first_session_id"], alert_id=row["alert_id"], **options,
        )  # fmt: skip
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


def _settled(
    measure: Callable[[], SideBySide], sha_a: str, sha_b: str, half: float | None
) -> Comparison:
    """B against A side by side; measured again in new processes (up to BATCHES) while it is
    unsettled: for the whole change as the gate settles it, for a midpoint while its interval
    straddles the midpoint."""
    measured = measure()
    for batch in range(BATCHES):
        paired = paired_comparison(measured, THRESHOLD_PCT, 0.95, 0, "", sha_a, sha_b)
        p50 = paired.latency_p50
        done = settled(paired) if half is None else not (p50["ci_low"] < half <= p50["ci_high"])
        if done or batch == BATCHES - 1:
            break
        measured = measured.extended(measure())
    return Comparison(
        p50["effect_pct"], p50["ci_low"], p50["ci_high"], paired.rounds, paired.decision
    )


def _session_rows(lake: TraceLake, ids: list[str]) -> dict[str, dict]:
    """The sessions' rows by id; an id no session has is refused."""
    rows = {r["session_id"]: r for r in lake.query(SESSIONS_SQL, {"ids": ids}).to_pylist()}
    for sid in ids:
        if sid not in rows:
            raise AacoInputError(
                f"no session {sid}", fix="aaco registry list names the models' sessions"
            )
    return rows


def _one_model(good: dict, bad: dict) -> None:
    if (good["model_slug"], good["target"]) != (bad["model_slug"], bad["target"]):
        raise AacoInputError(
            "the good and the bad session measured different models or targets",
            fix="give two sessions of one model on one target",
        )


def _sessions(lake: TraceLake, good_session: str, bad_session: str) -> tuple[dict, dict]:
    rows = _session_rows(lake, [good_session, bad_session])
    good, bad = rows[good_session], rows[bad_session]
    _one_model(good, bad)
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


def _runtime_sessions(
    lake: TraceLake, good_session: str | None, bad_session: str | None, model: str | None
) -> tuple[dict | None, dict]:
    """The sessions a runtime bisection rests on: the bad one (its request is measured; with
    only `model`, the model's latest session) and the good one, when known."""
    if bad_session is None:
        latest = lake.query(LATEST_SQL, {"slug": model})["session_id"].to_pylist() if model else []
        if not latest:
            raise AacoInputError(
                f"no session of {model} to take the model version and its inputs from"
                if model
                else "a runtime bisection needs a session to measure again",
                fix="give --bad SESSION (and --good), --alert ID, or the --model of a measured "
                "model",
            )
        bad_session = latest[0]
    rows = _session_rows(lake, [bad_session] + ([good_session] if good_session else []))
    bad, good = rows[bad_session], rows.get(good_session) if good_session else None
    _of_model(bad, model)
    if good:
        _one_model(good, bad)
    return good, bad


def _of_model(session: dict, model: str | None) -> None:
    """`--model`, when given, is a check: the sessions must be its."""
    if model is not None and session["model_slug"] != model:
        raise AacoInputError(
            f"the sessions measured {session['model_slug']}, not {model}", fix="check --model"
        )


def _runtimes(environments: list[str]) -> list[Runtime]:
    """Each environment probed, in the order given (oldest first)."""
    runtimes = [find_runtime(environment) for environment in environments]
    pythons = [runtime.python for runtime in runtimes]
    if len(runtimes) < 2 or len(set(pythons)) < len(pythons):
        raise AacoInputError(
            f"a runtime bisection needs two or more different environments, got {pythons}",
            fix="--runtime OLD_ENV ... --runtime NEW_ENV, oldest first",
        )
    return runtimes


def _fingerprint_notes(
    good: dict | None, bad: dict, runtimes: list[Runtime], host: dict
) -> list[str]:
    """Where the sessions were measured with other runtimes than the first and the last
    environment: the bisection then does not span the sessions' change."""
    notes = []
    for role, session, runtime in (("good", good, runtimes[0]), ("bad", bad, runtimes[-1])):
        if session and session["runtime_fingerprint"] != runtime.fingerprint(host):
            notes.append(
                f"the {role} session {session['session_id']} was measured with another "
                f"runtime (fingerprint {str(session['runtime_fingerprint'])[:12]}) than "
                f"{runtime.label} (fingerprint {runtime.fingerprint(host)[:12]} on this host)"
            )
    return notes


def _first_session(lake: TraceLake, bad: dict, fingerprint: str) -> str | None:
    params = {"slug": bad["model_slug"], "target": bad["target"], "fp": fingerprint}
    return (lake.query(FIRST_WITH_RUNTIME_SQL, params)["session_id"].to_pylist() or [None])[0]


def _row(
    found: Bisection, good: dict | None, bad: dict, alert_id, measured: dict | None = None
) -> dict:
    """The bisections row, less what was found (the version and the runtime search each fill
    theirs); `measured` joins the search's record in result_json."""
    change = found.change
    result = found.to_dict() | (measured or {})
    return dict.fromkeys(BISECTIONS.names) | {
        "bisection_id": secrets.token_hex(6),
        "model_slug": bad["model_slug"],
        "target": bad["target"],
        "alert_id": alert_id,
        "good_session": good["session_id"] if good else None,
        "bad_session": bad["session_id"],
        "created_at": dt.datetime.now(dt.timezone.utc),
        "status": found.status,
        "versions": len(found.versions),
        "steps": len(found.steps),
        "change_pct": change.effect_pct,
        "change_ci_low": change.ci_low,
        "change_ci_high": change.ci_high,
        "result_json": json.dumps(result),
    }


def bisection_line(row: dict) -> str:
    """One line: what the bisection found."""
    change = (
        f"{row['change_pct']:+.1f} % [{row['change_ci_low']:+.1f}, {row['change_ci_high']:+.1f}]"
    )
    what = "runtime" if row.get("dimension") == "runtime" else "version"
    if row["status"] == "no_change":
        return (
            f"no {what} to blame: side by side the bad {what} is {change} of the good one's "
            "p50, not a regression"
        )
    last_good, first_bad = blamed(row)
    if what == "version":  # a content hash: its start names it
        last_good, first_bad = last_good[:12], first_bad[:12]
    found = f"first slower {what} {first_bad} (after {last_good})"
    if row["first_bad_session"]:
        found += f", first measured by {row['first_bad_session']}"
    unclear = ", one step unclear: measure it again" if row["status"] == "unclear" else ""
    return (
        f"{found}: the whole change {change}, {row['versions']} {what}s in {row['steps']} "
        f"steps{unclear}"
    )

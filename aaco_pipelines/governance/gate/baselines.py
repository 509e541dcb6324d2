"""Named baselines: a chosen set of sessions of one model and target, kept in the TraceLake with
the environment they were measured in, so "compare with the release baseline" means the same
sessions tomorrow as today instead of "whatever the last 30 points were".

One baseline per model+target may be pinned: it is the reference CI gates and reports use. A
comparison against a baseline gives each headline metric's effect with a hierarchical bootstrap
CI (baseline sessions, then iterations within them; the current session's iterations), so the
baseline's session-to-session spread is part of the interval, not only its iteration noise.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import duckdb
import numpy as np
import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.drift.session_bootstrap import ITERATION_FIGURES, bootstrap_effects
from aaco_pipelines.tracelake import journal
from aaco_pipelines.tracelake.schema import BASELINES
from aaco_pipelines.tracelake.store import TraceLake

DEFAULT_LAST = 10  # sessions in a baseline chosen by model+target without a window
METRICS = ITERATION_FIGURES  # metric -> higher is worse

SUMMARY_SQL = """
SELECT list(session_id ORDER BY started_at, session_id) AS session_ids,
       any_value(model_slug) AS model_slug, any_value(target) AS target,
       count(DISTINCT model_slug) AS models, count(DISTINCT target) AS targets,
       count(*) AS n_sessions,
       median(latency_p50_ns) AS latency_p50_ns, median(latency_p99_ns) AS latency_p99_ns,
       median(throughput_per_s) AS throughput_per_s,
       arg_max(model_sha256, started_at) AS model_sha256,
       arg_max(runtime_fingerprint, started_at) AS runtime_fingerprint,
       arg_max(providers_used, started_at) AS providers_used,
       arg_max(env_json, started_at) AS env_json
FROM sessions WHERE session_id IN (SELECT unnest($ids))
"""

# A window's sessions; those whose measurement was judged suspect (measurement_quality) left out
# unless asked for: a baseline built from a preempted run would make every later one look fast.
WINDOW_SQL = """
SELECT session_id FROM sessions
WHERE model_slug = $slug AND target = $target
  AND ($since IS NULL OR started_at >= $since) AND ($until IS NULL OR started_at <= $until)
  AND ($include_suspect OR session_id NOT IN (
      SELECT session_id FROM measurement_quality WHERE verdict = 'suspect'))
ORDER BY started_at DESC, session_id DESC LIMIT $last
"""
SUSPECT_IN_WINDOW_SQL = """
SELECT count(*) AS n FROM sessions JOIN measurement_quality USING (session_id)
WHERE model_slug = $slug AND target = $target AND verdict = 'suspect'
  AND ($since IS NULL OR started_at >= $since) AND ($until IS NULL OR started_at <= $until)
"""


@dataclass(frozen=True)
class Baseline:
    name: str
    model_slug: str
    target: str
    created_at: dt.datetime
    session_ids: tuple[str, ...]
    pinned: bool
    n_sessions: int
    latency_p50_ns: float
    latency_p99_ns: float
    throughput_per_s: float
    model_sha256: str | None
    runtime_fingerprint: str | None
    providers_used: tuple[str, ...]
    env: dict
    window: dict
    note: str | None

    @property
    def shortfall(self) -> str | None:
        """How the baseline falls short of the sessions its window asked for, in a phrase
        ("2 sessions where the last 10 were asked for"); None when it has them all."""
        asked = self.window.get("last")
        if asked is None or self.n_sessions >= asked:
            return None
        left_out = self.window.get("suspect_left_out")
        return (
            f"{self.n_sessions} session{'s' * (self.n_sessions != 1)} where the last {asked} were "
            "asked for" + (f" ({left_out} with a suspect measurement left out)" if left_out else "")
        )

    @classmethod
    def from_row(cls, row: dict) -> Baseline:
        return cls(
            name=row["baseline_name"],
            model_slug=row["model_slug"],
            target=row["target"],
            created_at=row["created_at"],
            session_ids=tuple(row["session_ids"] or ()),
            pinned=bool(row["pinned"]),
            n_sessions=row["n_sessions"],
            latency_p50_ns=row["latency_p50_ns"],
            latency_p99_ns=row["latency_p99_ns"],
            throughput_per_s=row["throughput_per_s"],
            model_sha256=row["model_sha256"],
            runtime_fingerprint=row["runtime_fingerprint"],
            providers_used=tuple(row["providers_used"] or ()),
            env=json.loads(row["env_json"] or "{}"),
            window=json.loads(row["window_json"] or "{}"),
            note=row["note"],
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    baseline_value: float  # the statistic of the pooled baseline iterations
    current_value: float
    effect_pct: float  # (current - baseline) / baseline * 100
    ci_low: float
    ci_high: float
    higher_is_worse: bool
    verdict: str  # regression | improvement | no_change (the CI includes 0)


@dataclass(frozen=True)
class BaselineComparison:
    baseline: str
    session_id: str
    metrics: dict[str, MetricComparison]
    parameters: dict

    def to_dict(self) -> dict:
        return asdict(self)


# --- create, pin, read --------------------------------------------------------------------------


def create_baseline(
    lake: TraceLake,
    name: str,
    *,
    session_ids: Sequence[str] | None = None,
    model_slug: str | None = None,
    target: str | None = None,
    last: int | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    pin: bool = False,
    note: str | None = None,
    replace: bool = False,
    include_suspect: bool = False,
) -> Baseline:
    """Store a baseline of explicit `session_ids`, or of a model's sessions on a target in a
    window (the `last` N, and/or `since` / `until`; the last DEFAULT_LAST when none is given),
    leaving out sessions whose measurement was judged suspect unless `include_suspect`.
    An existing name is an error unless `replace` (a replaced pinned baseline stays pinned)."""
    if not name or not name.strip():
        raise AacoInputError("a baseline needs a name", fix="pass a non-empty name")
    if session_ids is not None:
        ids, window = _explicit_ids(lake, session_ids, model_slug, target), {"session_ids": True}
    else:
        ids, window = _window_ids(lake, model_slug, target, last, since, until, include_suspect)
    summary = lake.query(SUMMARY_SQL, {"ids": ids}).to_pylist()[0]
    if summary["models"] > 1 or summary["targets"] > 1:
        raise AacoInputError(
            f"baseline {name!r} mixes models or targets",
            fix="choose sessions of one model on one target",
        )
    row = _row(name, summary, window, pin, note)
    with lake.transaction() as con:
        existing = con.execute(
            "SELECT pinned FROM baselines WHERE baseline_name = ?", [name]
        ).fetchall()
        if existing and not replace:
            raise AacoInputError(
                f"a baseline named {name!r} already exists",
                fix="choose another name, or pass replace=True (--replace) to overwrite it",
            )
        row["pinned"] = pin or bool(existing and existing[0][0])
        con.execute("DELETE FROM baselines WHERE baseline_name = ?", [name])
        con.register("incoming", pa.Table.from_pylist([row], schema=BASELINES))
        con.execute("INSERT INTO baselines BY NAME SELECT * FROM incoming")
        con.unregister("incoming")
        if row["pinned"]:
            _pin(con, name, row["model_slug"], row["target"])
        _journal(lake, con, row["model_slug"], row["target"])
    return get_baseline(lake, name)


def pin_baseline(lake: TraceLake, name: str) -> Baseline:
    """Make `name` the pinned baseline of its model+target, unpinning any other."""
    baseline = get_baseline(lake, name)
    with lake.transaction() as con:
        _pin(con, name, baseline.model_slug, baseline.target)
        _journal(lake, con, baseline.model_slug, baseline.target)
    return get_baseline(lake, name)


def get_baseline(lake: TraceLake, name: str) -> Baseline:
    rows = _rows(lake, "SELECT * FROM baselines WHERE baseline_name = ?", [name])
    if not rows:
        known = [b.name for b in list_baselines(lake)]
        raise AacoInputError(
            f"no baseline named {name!r}",
            fix=f"use one of {known}" if known else "create one with create_baseline first",
        )
    return Baseline.from_row(rows[0])


def list_baselines(lake: TraceLake, model_slug: str | None = None) -> list[Baseline]:
    """Every baseline (of one model when given), by model, target and creation time."""
    rows = _rows(
        lake,
        "SELECT * FROM baselines WHERE $slug IS NULL OR model_slug = $slug "
        "ORDER BY model_slug, target, created_at, baseline_name",
        {"slug": model_slug},
    )
    return [Baseline.from_row(row) for row in rows]


def pinned_baseline(lake: TraceLake, model_slug: str, target: str) -> Baseline | None:
    rows = _rows(
        lake,
        "SELECT * FROM baselines WHERE model_slug = ? AND target = ? AND pinned",
        [model_slug, target],
    )
    return Baseline.from_row(rows[0]) if rows else None


def _rows(lake: TraceLake, sql: str, params: list | dict) -> list[dict]:
    """Baseline rows; none in a lake older than the baselines table (schema v4)."""
    try:
        return lake.query(sql, params).to_pylist()
    except duckdb.CatalogException:
        return []


# --- compare ------------------------------------------------------------------------------------


def compare_to_baseline(
    lake: TraceLake,
    session_id: str,
    name: str,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BaselineComparison:
    """Effect of the session on p50, p99 and throughput against the baseline, with bootstrap CIs
    from the per-iteration latencies of the measured pass."""
    baseline = get_baseline(lake, name)
    check_comparable(lake, session_id, baseline)
    sampled = bootstrap_effects(lake, baseline, session_id, resamples, seed)
    tail = (1.0 - confidence) / 2.0
    metrics = {}
    for column, (metric, worse) in enumerate(METRICS.items()):
        b, c = float(sampled.baseline[column]), float(sampled.current[column])
        low, high = (float(v) for v in np.quantile(sampled.effects[:, column], [tail, 1 - tail]))
        metrics[metric] = MetricComparison(
            metric, b, c, (c - b) / b * 100.0, low, high, worse, _verdict(low, high, worse)
        )
    parameters = {
        "resamples": resamples,
        "confidence": confidence,
        "seed": seed,
        "bootstrap": "hierarchical: baseline sessions, then iterations; current iterations",
        **sampled.sizes,
    }
    return BaselineComparison(name, session_id, metrics, parameters)


def _verdict(low: float, high: float, higher_is_worse: bool) -> str:
    if low <= 0.0 <= high:
        return "no_change"
    return "regression" if (low > 0.0) == higher_is_worse else "improvement"


def check_comparable(lake: TraceLake, session_id: str, baseline: Baseline) -> None:
    rows = lake.query(
        "SELECT model_slug, target FROM sessions WHERE session_id = ?", [session_id]
    ).to_pylist()
    if not rows:
        raise AacoInputError(
            f"no session {session_id!r} in the TraceLake",
            fix="pass the id of an ingested session (see `aaco sessions`)",
        )
    if (rows[0]["model_slug"], rows[0]["target"]) != (baseline.model_slug, baseline.target):
        raise AacoInputError(
            f"session {session_id!r} is {rows[0]['model_slug']} on {rows[0]['target']}, "
            f"baseline {baseline.name!r} is {baseline.model_slug} on {baseline.target}",
            fix="compare a session with a baseline of the same model and target",
        )


# --- choosing sessions and writing -----------------------------------------------------------


def _explicit_ids(
    lake: TraceLake, session_ids: Sequence[str], model_slug: str | None, target: str | None
) -> list[str]:
    ids = list(dict.fromkeys(session_ids))
    if not ids:
        raise AacoInputError("a baseline needs at least one session", fix="pass session ids")
    found = lake.query(
        "SELECT session_id, model_slug, target FROM sessions "
        "WHERE session_id IN (SELECT unnest($ids))",
        {"ids": ids},
    ).to_pylist()
    missing = sorted(set(ids) - {r["session_id"] for r in found})
    if missing:
        raise AacoInputError(
            f"unknown sessions {missing}", fix="pass ids of sessions ingested in this TraceLake"
        )
    for key, wanted in (("model_slug", model_slug), ("target", target)):
        if wanted is not None and {r[key] for r in found} != {wanted}:
            raise AacoInputError(
                f"sessions {ids} are not all {key} {wanted!r}",
                fix="choose sessions of one model on one target",
            )
    return ids


def _window_ids(
    lake: TraceLake,
    model_slug: str | None,
    target: str | None,
    last: int | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
    include_suspect: bool = False,
) -> tuple[list[str], dict]:
    if model_slug is None:
        raise AacoInputError(
            "a baseline needs session ids or a model", fix="pass session_ids or model_slug"
        )
    if last is not None and last < 1:
        raise AacoInputError(f"last must be at least 1, got {last}", fix="pass last >= 1")
    target = target or _only_target(lake, model_slug)
    if last is None and since is None and until is None:
        last = DEFAULT_LAST
    window = {"model_slug": model_slug, "target": target, "last": last}
    window |= {"since": _iso(since), "until": _iso(until)}
    params = {"slug": model_slug, "target": target, "since": since, "until": until}
    ids = lake.query(
        WINDOW_SQL, params | {"last": last or 2**62, "include_suspect": include_suspect}
    )["session_id"].to_pylist()
    if not include_suspect:
        window["suspect_left_out"] = lake.query(SUSPECT_IN_WINDOW_SQL, params)["n"][0].as_py()
    if not ids and window.get("suspect_left_out"):
        raise AacoInputError(
            f"every session of {model_slug!r} on {target!r} in the window was judged suspect "
            f"({window['suspect_left_out']}: see measurement_quality)",
            fix="measure again on a quieter host, or keep them with --include-suspect",
        )
    if not ids:
        raise AacoInputError(
            f"no sessions of {model_slug!r} on {target!r} in the window {window}",
            fix="widen the window (last / since / until) or measure the model first",
        )
    return ids[::-1], window


def _only_target(lake: TraceLake, model_slug: str) -> str:
    targets = lake.query(
        "SELECT DISTINCT target FROM sessions WHERE model_slug = ? ORDER BY target", [model_slug]
    )["target"].to_pylist()
    if len(targets) != 1:
        raise AacoInputError(
            f"model {model_slug!r} has sessions on targets {targets}"
            if targets
            else f"no sessions of model {model_slug!r}",
            fix="pass target=" if targets else "measure the model first, or check its slug",
        )
    return targets[0]


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _row(name: str, summary: dict, window: dict, pin: bool, note: str | None) -> dict:
    return {
        "baseline_name": name,
        "model_slug": summary["model_slug"],
        "target": summary["target"],
        "created_at": dt.datetime.now(dt.timezone.utc),
        "session_ids": summary["session_ids"],
        "pinned": pin,
        "n_sessions": summary["n_sessions"],
        "latency_p50_ns": summary["latency_p50_ns"],
        "latency_p99_ns": summary["latency_p99_ns"],
        "throughput_per_s": summary["throughput_per_s"],
        "model_sha256": summary["model_sha256"],
        "runtime_fingerprint": summary["runtime_fingerprint"],
        "providers_used": summary["providers_used"],
        "env_json": summary["env_json"],
        "window_json": json.dumps(window),
        "note": note,
    }


def _pin(con, name: str, model_slug: str, target: str) -> None:
    con.execute(
        "UPDATE baselines SET pinned = (baseline_name = ?) WHERE model_slug = ? AND target = ?",
        [name, model_slug, target],
    )


def _journal(lake: TraceLake, con, model_slug: str, target: str) -> None:
    """The model+target's baselines as they now are, in the lake's journal: no bundle holds
    them, and `aaco restore` brings them back from it. Written inside the write's transaction,
    under the writer lock, so the journal's order is the lake's."""
    rows = con.sql(
        "SELECT * FROM baselines WHERE model_slug = ? AND target = ? ORDER BY baseline_name",
        params=[model_slug, target],
    ).to_arrow_table()
    journal.LakeJournal(lake.path).record(
        journal.BASELINES, model_slug=model_slug, target=target, rows=rows.to_pylist()
    )

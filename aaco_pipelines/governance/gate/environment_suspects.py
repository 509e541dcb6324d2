"""Root cause suspects in what the session ran with: the model file, runtime and execution
providers (binary changes, credited the whole delta), clocks and throttling (telemetry), and
other processes on the host (measurement_quality)."""

from __future__ import annotations

import json

from aaco_pipelines.analysis.envelope.record import CONTENDED_SHARE
from aaco_pipelines.governance.gate.suspect import Delta, RootCauseParams, Suspect, share
from aaco_pipelines.tracelake.store import TraceLake

RUNTIME_KEYS = (
    "onnxruntime_version",
    "rocm_version",
    "gpu_driver_version",
    "onnxruntime_providers",
)
CLOCK_METRICS = ("cpu_frequency", "gfx_clock", "memory_clock")
VIOLATION_METRICS = ("power_violation", "thermal_violation")


# --- binary changes ----------------------------------------------------------------------------


def environment_suspects(sessions: list[dict], current: str, delta: Delta) -> list[Suspect]:
    """Model file, runtime and providers: a change when the current value is none of the
    baseline's; "before" is the newest baseline session's. They are credited the whole delta."""
    base = [r for r in sessions if r["session_id"] != current]
    cur, newest = next(r for r in sessions if r["session_id"] == current), base[-1]
    suspects = []
    for kind, value in (
        ("model_version", lambda r: r["model_sha256"]),
        ("runtime", lambda r: r["runtime_fingerprint"]),
        ("execution_provider", lambda r: ",".join(r["providers_used"] or [])),
    ):
        if value(cur) in {value(r) for r in base}:
            continue
        before, after, detail = value(newest), value(cur), {}
        if kind == "model_version":
            before, after = (before or "")[:12] or None, (after or "")[:12] or None
            detail = {"model_sha256": [value(newest), value(cur)]}
        if kind == "runtime":
            before, after, detail = _runtime_difference(newest, cur)
        suspects.append(
            Suspect(kind, kind, before, after, delta.measured / 1e6, 1.0, detail=detail)
        )
    return suspects


def _runtime_difference(before: dict, after: dict) -> tuple[str, str, dict]:
    """The runtime parts that differ (ORT, ROCm, driver, providers), else the fingerprints."""
    env_before = json.loads(before["env_json"] or "{}")
    env_after = json.loads(after["env_json"] or "{}")
    changed = {
        key: (env_before.get(key), env_after.get(key))
        for key in RUNTIME_KEYS
        if env_before.get(key) != env_after.get(key)
    }
    if not changed:
        fp = (before["runtime_fingerprint"] or "")[:12], (after["runtime_fingerprint"] or "")[:12]
        return f"fingerprint {fp[0]}", f"fingerprint {fp[1]}", {"changed": {}}
    text = [", ".join(f"{k}={v[i]}" for k, v in changed.items()) for i in (0, 1)]
    return text[0], text[1], {"changed": {k: list(v) for k, v in changed.items()}}


# --- clocks and the host --------------------------------------------------------------------

CLOCK_SQL = """
WITH per_session AS (
    SELECT session_id, metric,
           CASE WHEN metric IN (SELECT unnest($violations)) THEN max(value) ELSE avg(value) END
           AS value
    FROM telemetry
    WHERE metric IN (SELECT unnest($metrics)) AND value IS NOT NULL
      AND (session_id = $cur OR session_id IN (SELECT unnest($base)))
    GROUP BY session_id, metric)
SELECT metric, median(value) FILTER (WHERE session_id <> $cur) AS base,
       any_value(value) FILTER (WHERE session_id = $cur) AS cur
FROM per_session GROUP BY metric ORDER BY metric
"""


def clock_suspects(
    lake: TraceLake, ids: dict, delta: Delta, params: RootCauseParams
) -> list[Suspect]:
    """Clocks that moved (explaining latency * (f_before / f_after - 1), as if compute-bound)
    and power / thermal violation that rose (of unknown size)."""
    rows = lake.query(
        CLOCK_SQL,
        ids
        | {"metrics": [*CLOCK_METRICS, *VIOLATION_METRICS], "violations": list(VIOLATION_METRICS)},
    ).to_pylist()
    suspects = []
    for row in rows:
        base, cur = row["base"], row["cur"]
        if base is None or cur is None:
            continue
        if row["metric"] in VIOLATION_METRICS:
            if cur - base >= params.min_violation_change:
                suspects.append(
                    Suspect("clocks", row["metric"], f"{base:.0f}%", f"{cur:.0f}%", None, None)
                )
        elif cur > 0 and abs(cur - base) >= params.min_change * base:
            explained = delta.reference * (base / cur - 1.0)
            suspects.append(
                Suspect(
                    "clocks",
                    row["metric"],
                    f"{base:.0f} MHz",
                    f"{cur:.0f} MHz",
                    explained / 1e6,
                    share(explained, delta.measured),
                )
            )
    return suspects


CONTENTION_SQL = """
SELECT (SELECT median(host_contention) FROM measurement_quality
        WHERE list_contains($base, session_id)) AS base,
       (SELECT any_value(host_contention) FROM measurement_quality
        WHERE session_id = $cur) AS cur
"""


def contention_suspects(lake: TraceLake, ids: dict, params: RootCauseParams) -> list[Suspect]:
    """Other processes' share of the host's CPU while measuring, when it differs between the
    sides by min_contention_change and one side was contended (of unknown size: it slows what
    it preempts). A contended baseline makes an unchanged session look faster, too."""
    [row] = lake.query(CONTENTION_SQL, ids).to_pylist()
    base, cur = row["base"], row["cur"]
    if base is None or cur is None or abs(cur - base) < params.min_contention_change:
        return []
    if max(base, cur) <= CONTENDED_SHARE:
        return []
    return [
        Suspect(
            "host_contention",
            "other processes' share of the host's CPU",
            f"{base:.0%}",
            f"{cur:.0%}",
            None,
            None,
            detail={"measured_pass_contention": {"baseline_median": base, "current": cur}},
        )
    ]

"""Measurement quality: whether a session's latencies can be trusted, and why not.

A session measured while other processes took the host's CPUs, or whose measured pass holds a
few preempted iterations 40x the rest, looks like any other in a summary, a baseline or a gate.
So every session gets a verdict from what was recorded during its measured pass:

  host_contention   other processes' share of the host's CPU time (every CPU's utilization
                    less the measuring process's own), mean over the measured pass's telemetry
                    ticks (over the whole session's when the pass was shorter than a tick)
  laboratory_contention  in laboratory mode, other processes' share of the pinned cores' time
                    (their utilization less the measuring process's own, which runs only
                    there), over the same ticks: pinned threads cannot move away from a busy
                    core, so this judges a run whose host looks quiet overall (one busy core of
                    many)
  p99_over_p50      tail against median
  mean_over_p50     a mean pulled up by a few very slow iterations
  outlier_share     iterations beyond Tukey's far fence (Q3 + 3 IQR), MIN_OUTLIERS at least

"suspect" when any is beyond its limit (the reasons say which, in numbers), else "ok". The
coefficient of variation is kept beside them but judges nothing: a 0.1 ms model's CV is 0.2-0.6
on a shared host, and the median and its interval, which the gate uses, stay sound. The
profiled pass's overhead is kept beside it: above PROFILE_DISTORTED the op shares carry the
profiler's own cost (a launch-bound model's nodes are mostly profiler), which is said but does
not make the latencies suspect. New baselines leave suspect sessions out by default, and the
gate names them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from aaco_pipelines.analysis.envelope.record import CONTENDED_SHARE
from aaco_pipelines.execution.laboratory import BUSY_CORE_SHARE

MAX_P99_OVER_P50 = 3.0
MAX_MEAN_OVER_P50 = 1.5
MAX_OUTLIER_SHARE = 0.05
MIN_OUTLIERS = 3  # one slow iteration in 20 is not a pattern
# How a reason that other processes held the CPUs begins (the host's or the laboratory cores').
CONTENTION_REASON = "other processes took"
# Fair share: with other processes holding a share c of the CPU time, the measuring process held
# at most 1 - c of it, so its work took at most 1 / (1 - c) as long; SHARED_RESOURCES_FACTOR
# doubles that for what shared caches and memory bandwidth add on top of the time taken away.
SHARED_RESOURCES_FACTOR = 2.0
MIN_FREE_SHARE = 0.01  # a host 100 % busy still left the measuring process its scheduler slice
PROFILE_DISTORTED_PCT = 100.0

QUALITY_SQL = """
WITH measured AS (
    SELECT latency_ns::DOUBLE AS ns FROM iterations WHERE session_id = $sid AND pass = 'measured'
),
fences AS (
    SELECT quantile_cont(ns, 0.25) AS q1, quantile_cont(ns, 0.75) AS q3,
           quantile_cont(ns, 0.5) AS p50, quantile_cont(ns, 0.99) AS p99,
           avg(ns) AS mean, stddev_samp(ns) AS sd, count(*) AS n
    FROM measured
),
all_ticks AS (
    SELECT timestamp_ns, any_value(pass) FILTER (WHERE pass IS NOT NULL) AS pass,
           avg(value) FILTER (WHERE device LIKE 'cpu%') AS host_pct,
           count(*) FILTER (WHERE device LIKE 'cpu%') AS cpus,
           sum(value) FILTER (WHERE list_contains($lab::VARCHAR[], device)) AS lab_pct,
           count(*) FILTER (WHERE list_contains($lab::VARCHAR[], device)) AS lab_cpus,
           any_value(value) FILTER (WHERE device = 'process') AS measuring_pct
    FROM telemetry
    WHERE session_id = $sid AND metric = 'cpu_utilization'
    GROUP BY timestamp_ns
),
ticks AS (  -- the measured pass's, or every tick when it was shorter than one
    SELECT * FROM all_ticks
    WHERE pass = 'measured' OR NOT EXISTS (SELECT 1 FROM all_ticks WHERE pass = 'measured')
)
SELECT f.n AS iterations, f.p50, f.p99, f.mean, f.sd,
       (SELECT count(*) FROM measured, fences WHERE ns > q3 + 3 * (q3 - q1)) AS outliers,
       (SELECT avg(greatest(host_pct - coalesce(measuring_pct, 0) / cpus, 0)) / 100
        FROM ticks WHERE cpus > 0) AS host_contention,
       (SELECT avg(greatest(lab_pct - coalesce(measuring_pct, 0), 0) / lab_cpus) / 100
        FROM ticks WHERE lab_cpus > 0) AS laboratory_contention,
       (SELECT profiling_overhead_pct FROM session_records WHERE session_id = $sid)
           AS profiling_overhead_pct
FROM fences f
"""


@dataclass(frozen=True)
class MeasurementQuality:
    session_id: str
    verdict: str  # ok | suspect | unknown (no measured iterations)
    reasons: list[str]  # why suspect, each with its numbers
    iterations: int
    host_contention: float | None
    cv: float | None
    p99_over_p50: float | None
    mean_over_p50: float | None
    outlier_share: float | None
    profiling_overhead_pct: float | None
    cautions: list[str]  # what does not make the latencies suspect but should be read with them

    @property
    def suspect(self) -> bool:
        return self.verdict == "suspect"

    @property
    def contention_reasons(self) -> list[str]:
        """Why suspect because other processes held the CPUs (not for a tail or outliers)."""
        return [reason for reason in self.reasons if reason.startswith(CONTENTION_REASON)]

    def slowdown_bound(self) -> float | None:
        """The most the contention measured can have slowed the session (x); None when it
        was not measured. A breach or a change larger than this is the model's, not the host's."""
        if self.host_contention is None:
            return None
        return contention_slowdown_bound(self.host_contention)

    def line(self) -> str:
        """One line for a summary's first row."""
        if self.verdict == "ok":
            text = f"measurement ok ({self.iterations} iterations"
            if self.host_contention is not None:
                text += f", host {self.host_contention:.0%} busy with other work"
            return text + ")" + "".join(f"; {c}" for c in self.cautions)
        if self.verdict == "unknown":
            return "measurement quality unknown: no measured iterations"
        return "measurement SUSPECT: " + "; ".join(self.reasons + self.cautions)

    @classmethod
    def from_row(cls, row: dict) -> MeasurementQuality:
        """From its stored measurement_quality row."""
        fields = {k: v for k, v in row.items() if k not in ("reasons_json", "cautions_json")}
        return cls(
            **fields,
            reasons=json.loads(row["reasons_json"] or "[]"),
            cautions=json.loads(row["cautions_json"] or "[]"),
        )

    def row(self) -> dict:
        row = asdict(self)
        row["reasons_json"] = json.dumps(row.pop("reasons"))
        row["cautions_json"] = json.dumps(row.pop("cautions"))
        return row


def measurement_quality(
    lake, session_id: str, laboratory_cores: Sequence[int] = ()
) -> MeasurementQuality:
    """The session's verdict from its stored iterations and telemetry; `laboratory_cores`, the
    cores a laboratory session's measuring process was pinned to, are judged on their own too."""
    params = {"sid": session_id, "lab": [f"cpu{core}" for core in laboratory_cores]}
    [figures] = lake.query(QUALITY_SQL, params).to_pylist()
    return judge(session_id, figures)


def judge(session_id: str, f: dict) -> MeasurementQuality:
    """The verdict from QUALITY_SQL's figures (iterations, p50, p99, mean, sd, outliers,
    host_contention, laboratory_contention (absent: not a laboratory session),
    profiling_overhead_pct)."""
    n = int(f["iterations"] or 0)
    overhead = f["profiling_overhead_pct"]
    cautions = []
    if overhead is not None and overhead > PROFILE_DISTORTED_PCT:
        cautions.append(
            f"the profiled pass ran {1 + overhead / 100:.1f}x slower than the measured one: "
            "op shares carry the profiler's own cost"
        )
    if n == 0 or not f["p50"]:
        return MeasurementQuality(
            session_id, "unknown", [], n, f["host_contention"], None, None, None, None,
            overhead, cautions,
        )  # fmt: skip
    p50 = f["p50"]
    figures = {
        "cv": (f["sd"] or 0.0) / f["mean"] if f["mean"] else None,
        "p99_over_p50": f["p99"] / p50,
        "mean_over_p50": f["mean"] / p50,
        "outlier_share": f["outliers"] / n,
    }
    contention = f["host_contention"]
    reasons = []
    if contention is not None and contention > CONTENDED_SHARE:
        reasons.append(f"{CONTENTION_REASON} {contention:.0%} of the host's CPU time meanwhile")
    pinned = f.get("laboratory_contention")
    if pinned is not None and pinned > BUSY_CORE_SHARE:
        reasons.append(f"{CONTENTION_REASON} {pinned:.0%} of the laboratory cores' time meanwhile")
    if figures["p99_over_p50"] > MAX_P99_OVER_P50:
        reasons.append(f"p99 is {figures['p99_over_p50']:.1f}x p50")
    if figures["mean_over_p50"] > MAX_MEAN_OVER_P50:
        reasons.append(f"the mean is {figures['mean_over_p50']:.1f}x p50")
    if figures["outlier_share"] > MAX_OUTLIER_SHARE and f["outliers"] >= MIN_OUTLIERS:
        reasons.append(
            f"{figures['outlier_share']:.0%} of iterations are far outliers (beyond Q3 + 3 IQR)"
        )
    return MeasurementQuality(
        session_id,
        "suspect" if reasons else "ok",
        reasons,
        n,
        contention,
        **figures,
        profiling_overhead_pct=overhead,
        cautions=cautions,
    )


def contention_slowdown_bound(share: float) -> float:
    """The factor by which other processes holding `share` of the CPU time can at most have
    stretched a measured time (see SHARED_RESOURCES_FACTOR)."""
    return SHARED_RESOURCES_FACTOR / max(1.0 - share, MIN_FREE_SHARE)

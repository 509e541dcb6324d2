"""A generation session's evidence → requests, generation_steps and generation_metrics rows.

The measuring process wrote every request and step it ran
(generation_requests/steps.<passes>.parquet) and LoadGen its summary of each scenario
(loadgen/<scenario>/mlperf_log_summary.txt). Here the per-request figures (queueing, TTFT, TPOT,
end-to-end) and the per-run metrics are computed in DuckDB: percentiles p50/p90/p99 of TTFT,
TPOT, inter-token latency (ITL) and end-to-end latency, output tokens/s, requests/s and goodput
at the workload's SLO; per point of the curves; and LoadGen's own figures beside them, as an
independent cross-check.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.llm.decoder_io import DecoderIO
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.schema import (
    GENERATION_METRICS,
    GENERATION_STEPS,
    REQUESTS,
    conform,
    sql_projection,
)

NOT_MEASURED = ("warmup", "profiled")  # runs without figures of their own

REQUESTS_SQL = f"""
SELECT {
    sql_projection(
        REQUESTS,
        {
            "session_id": "$sid",
            **{
                c: c
                for c in (
                    "run",
                    "request_id",
                    "sample_index",
                    "batch_id",
                    "batch_size",
                    "prompt_tokens",
                    "output_tokens",
                    "arrival_ns",
                    "start_ns",
                    "first_token_ns",
                    "end_ns",
                )
            },
            "queue_ns": "start_ns - arrival_ns",
            "ttft_ns": "first_token_ns - arrival_ns",
            "tpot_ns": "CASE WHEN output_tokens > 1 "
            "THEN (end_ns - first_token_ns) / (output_tokens - 1) END",
            "e2e_ns": "end_ns - arrival_ns",
        },
    )
}
FROM raw_requests ORDER BY run, arrival_ns, request_id
"""

# Profiled steps carry the index of their run in the profile: counted from the first step
# after the pass's warm-up steps, as kernel_events.iteration is.
STEPS_SQL = f"""
SELECT {
    sql_projection(
        GENERATION_STEPS,
        {
            "session_id": "$sid",
            **{
                c: c
                for c in (
                    "run",
                    "batch_id",
                    "step",
                    "phase",
                    "batch_size",
                    "input_tokens",
                    "kv_length",
                    "start_ns",
                    "end_ns",
                )
            },
            "kv_bytes": "batch_size::BIGINT * kv_length * $kv_bytes_per_token",
            "iteration": "CASE WHEN run = 'profiled' THEN row_number() OVER "
            "(PARTITION BY run ORDER BY start_ns) - 1 - $profiled_warmup END",
        },
    )
}
FROM raw_steps ORDER BY run, start_ns
"""

# One row per (run, curve point or NULL for the whole run, metric). Inter-token latencies
# come from the steps: each decode step gives every sequence of its batch one token, so a
# step counts once per sequence.
_PERCENTILES = ", ".join(
    f"quantile_cont({{col}}, {q}) AS {{name}}_p{int(q * 100)}_ns" for q in (0.5, 0.9, 0.99)
)
METRICS_SQL = f"""
WITH req AS (SELECT * FROM requests WHERE run NOT IN {NOT_MEASURED}),
itl AS (
    SELECT run, batch_id, end_ns - lag(end_ns) OVER (PARTITION BY run, batch_id ORDER BY step) AS itl_ns
    FROM generation_steps WHERE run NOT IN {NOT_MEASURED}
    QUALIFY step > 0
),
itl_tokens AS (
    SELECT i.run, r.batch_size, r.prompt_tokens, i.itl_ns
    FROM itl i JOIN (SELECT DISTINCT run, batch_id, batch_size, prompt_tokens FROM req) r USING (run, batch_id)
    CROSS JOIN range(r.batch_size)
),
points AS (
    SELECT run, NULL::INTEGER AS batch_size, NULL::INTEGER AS prompt_tokens, * EXCLUDE (run, batch_size, prompt_tokens)
    FROM req WHERE run <> 'curve'
    UNION ALL BY NAME
    SELECT * FROM req WHERE run = 'curve'
),
per_point AS (
    SELECT run, batch_size, prompt_tokens,
           count(*) AS requests,
           sum(output_tokens) AS output_tokens,
           (max(end_ns) - min(arrival_ns)) / 1e9 AS duration_s,
           {_PERCENTILES.format(col="ttft_ns", name="ttft")},
           {_PERCENTILES.format(col="tpot_ns", name="tpot")},
           {_PERCENTILES.format(col="e2e_ns", name="e2e")},
           {_PERCENTILES.format(col="queue_ns", name="queue")},
           {_PERCENTILES.format(col="first_token_ns - start_ns", name="prefill")},
           avg(ttft_ns) AS ttft_mean_ns, avg(tpot_ns) AS tpot_mean_ns, avg(e2e_ns) AS e2e_mean_ns,
           avg(queue_ns) AS queue_mean_ns, avg(first_token_ns - start_ns) AS prefill_mean_ns,
           count(*) FILTER (WHERE ttft_ns <= $slo_ttft_ns AND coalesce(tpot_ns, 0) <= $slo_tpot_ns)
               AS within_slo,
           (count(*) - 1) / nullif((max(arrival_ns) - min(arrival_ns)) / 1e9, 0) AS arrival_rate_per_s,
           avg(batch_size) AS batch_size_mean
    FROM points GROUP BY ALL
),
per_batch AS (  -- a curve point's throughput: tokens of a batch over its own time
    SELECT run, batch_size, prompt_tokens, batch_id,
           sum(output_tokens) / ((max(end_ns) - min(start_ns)) / 1e9) AS tokens_per_s,
           count(*) / ((max(end_ns) - min(start_ns)) / 1e9) AS requests_per_s
    FROM req WHERE run = 'curve' GROUP BY ALL
),
itl_point AS (
    SELECT run, NULL::INTEGER AS batch_size, NULL::INTEGER AS prompt_tokens,
           {_PERCENTILES.format(col="itl_ns", name="itl")}
    FROM itl_tokens WHERE run <> 'curve' GROUP BY run
    UNION ALL BY NAME
    SELECT run, batch_size, prompt_tokens, {_PERCENTILES.format(col="itl_ns", name="itl")}
    FROM itl_tokens WHERE run = 'curve' GROUP BY ALL
),
figures AS (
    SELECT p.*, i.* EXCLUDE (run, batch_size, prompt_tokens),
           CASE WHEN p.run = 'curve' THEN b.tokens_per_s ELSE p.output_tokens / p.duration_s END
               AS output_tokens_per_s,
           CASE WHEN p.run = 'curve' THEN b.requests_per_s ELSE p.requests / p.duration_s END
               AS requests_per_s,
           p.within_slo / p.duration_s AS goodput_per_s,
           p.within_slo / p.requests AS slo_attainment
    FROM per_point p
    LEFT JOIN itl_point i ON i.run = p.run AND i.batch_size IS NOT DISTINCT FROM p.batch_size
        AND i.prompt_tokens IS NOT DISTINCT FROM p.prompt_tokens
    LEFT JOIN (SELECT run, batch_size, prompt_tokens, median(tokens_per_s) AS tokens_per_s,
                      median(requests_per_s) AS requests_per_s FROM per_batch GROUP BY ALL) b
        ON b.run = p.run AND b.batch_size = p.batch_size AND b.prompt_tokens = p.prompt_tokens
)
SELECT $sid AS session_id, run, batch_size, prompt_tokens, metric, value, 'aaco' AS source
FROM (UNPIVOT (SELECT * EXCLUDE (within_slo) FROM figures)
      ON COLUMNS(* EXCLUDE (run, batch_size, prompt_tokens)) INTO NAME metric VALUE value)
WHERE value IS NOT NULL
ORDER BY run, batch_size NULLS FIRST, prompt_tokens NULLS FIRST, metric
"""


def generation_tables(bundle: SessionBundle) -> dict[str, pa.Table] | None:
    """The requests, steps and metrics tables of a generation session; None for a forward one."""
    plan = bundle.request.get("generation")
    if not plan:
        return None
    raw_requests = _read_parts(bundle, "requests")
    raw_steps = _read_parts(bundle, "steps")
    workload = plan["workload"]
    params = {
        "sid": bundle.session_id,
        "kv_bytes_per_token": DecoderIO(**plan["decoder"]).kv_bytes(batch=1, length=1),
        "profiled_warmup": bundle.session.get("profiled_warmup_iterations", 0),
    }
    with engine.connect() as con:
        con.register("raw_requests", raw_requests)
        con.register("raw_steps", raw_steps)
        requests = con.sql(REQUESTS_SQL, params={"sid": params["sid"]}).to_arrow_table()
        steps = con.sql(STEPS_SQL, params=params).to_arrow_table()
        con.register("requests", requests)
        con.register("generation_steps", steps)
        metrics = con.sql(
            METRICS_SQL,
            params={
                "sid": bundle.session_id,
                "slo_ttft_ns": workload["slo"]["ttft_ms"] * 1e6,
                "slo_tpot_ns": workload["slo"]["tpot_ms"] * 1e6,
            },
        ).to_arrow_table()
    units = [_unit(metric) for metric in metrics["metric"].to_pylist()]  # a few hundred figures
    metrics = metrics.append_column("unit", pa.array(units, pa.string()))
    loadgen = loadgen_metrics(bundle, workload["scenarios"])
    return {
        "requests": conform(requests, REQUESTS),
        "generation_steps": conform(steps, GENERATION_STEPS),
        "generation_metrics": pa.concat_tables(
            [conform(metrics, GENERATION_METRICS), conform(loadgen, GENERATION_METRICS)]
        ),
    }


def _read_parts(bundle: SessionBundle, what: str) -> pa.Table:
    files = sorted(bundle.path.glob(f"generation_{what}.*.parquet"))
    if not files:
        raise AacoInputError(
            f"generation session has no {what} (generation_{what}.*.parquet)",
            path=bundle.path,
            fix="the measuring process did not finish: re-run the benchmark",
        )
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


# LoadGen's summary lines → our metric names (ns unless said); both scenario spellings.
LOADGEN_LINES = {
    r"50\.00 percentile first token latency \(ns\)": "ttft_p50_ns",
    r"90\.00 percentile first token latency \(ns\)": "ttft_p90_ns",
    r"99\.00 percentile first token latency \(ns\)": "ttft_p99_ns",
    r"50\.00 percentile time to output token \(ns\)": "tpot_p50_ns",
    r"90\.00 percentile time to output token \(ns\)": "tpot_p90_ns",
    r"99\.00 percentile time to output token \(ns\)": "tpot_p99_ns",
    r"50\.00 percentile latency \(ns\)": "e2e_p50_ns",
    r"90\.00 percentile latency \(ns\)": "e2e_p90_ns",
    r"99\.00 percentile latency \(ns\)": "e2e_p99_ns",
    r"(?:Completed tokens|Tokens) per second": "output_tokens_per_s",
    r"(?:Completed samples|Samples) per second": "requests_per_s",
    r"Scheduled samples per second": "arrival_rate_per_s",
}


def loadgen_metrics(bundle: SessionBundle, scenarios: list[str]) -> pa.Table:
    """LoadGen's own figures of each scenario (its summary file), and whether it judged the
    run valid (`result_valid`: 1 or 0; short CI runs fail its early-stopping rule). A negative
    time (LoadGen's TPOT of one-token requests) or a figure that is not finite is left out,
    never stored."""
    rows = []
    for scenario in scenarios:
        summary = bundle.path / "loadgen" / scenario / "mlperf_log_summary.txt"
        if not summary.is_file():
            continue
        for metric, value in parse_loadgen_summary(summary).items():
            if not math.isfinite(value) or (metric.endswith("_ns") and value < 0):
                continue
            rows.append({"session_id": bundle.session_id, "run": scenario, "metric": metric,
                         "value": value, "unit": _unit(metric), "source": "loadgen"})  # fmt: skip
    return pa.Table.from_pylist(rows, schema=GENERATION_METRICS)


def parse_loadgen_summary(path: Path) -> dict[str, float]:
    """The figures of one mlperf_log_summary.txt; the first occurrence of each line counts."""
    found: dict[str, float] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "Result is":
            found.setdefault("result_valid", 1.0 if value == "VALID" else 0.0)
            continue
        for pattern, metric in LOADGEN_LINES.items():
            if re.fullmatch(pattern, key):
                try:
                    found.setdefault(metric, float(value))
                except ValueError:
                    pass
    return found


def _unit(metric: str) -> str:
    """A figure's unit, from its name's suffix (the names say it: ttft_p50_ns, requests_per_s)."""
    if metric.endswith("_ns"):
        return "ns"
    if metric.endswith("_per_s"):
        return "1/s"
    return "s" if metric.endswith("_s") else ""

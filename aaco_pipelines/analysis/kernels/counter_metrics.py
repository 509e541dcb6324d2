"""Per-dispatch and per-kernel hardware metrics from a session's counters, in DuckDB.

A counter run (`rocprofv3 --pmc`, one `pmc_N/` folder per pass) stores one `counters` row per
dispatch and counter. Here the rows of a dispatch become one row, joined to its kernel's traced
duration and to its GPU's gfx target, and the formulas of execution.gpu_counters for that target
give its FLOPs by data type, HBM, L2 and LDS bytes, L2 hit rate, LDS bank conflicts, VALU lanes
in use, and their rates. A metric whose counters were not collected is null and `missing` names
them; `note` says what the architecture cannot count. Nothing is guessed.

Entry points: `kernel_hardware_metrics` (one row per counted dispatch) and
`kernel_hardware_summary` (one row per device, kernel name and gfx target).

Concepts: docs/concepts/kernel-diagnosis.md.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from aaco_pipelines.analysis.envelope.datasheets import session_gpu_targets
from aaco_pipelines.execution.gpu_counters import (
    DTYPES,
    FAMILIES,
    SUM_SUFFIX,
    CounterFormulas,
    all_counters,
    no_formulas_reason,
)
from aaco_pipelines.foundation.sql import sql_identifier, sql_literal

NO_SESSION = "\x00"  # no session has this id: a query for it has the columns and no rows

# The output metrics, each as the formula quantities it sums (a ratio: its two parts).
_DTYPE_PARTS = {f"{d}_flops": (f"{d}_vector_flops", f"{d}_matrix_flops") for d in DTYPES}
_SUMS = {
    **_DTYPE_PARTS,
    "int8_ops": ("int8_matrix_ops",),
    "vector_flops": tuple(f"{d}_vector_flops" for d in DTYPES),
    "matrix_flops": tuple(f"{d}_matrix_flops" for d in DTYPES),
    "hbm_read_bytes": ("hbm_read_bytes",),
    "hbm_write_bytes": ("hbm_write_bytes",),
    "lds_bank_conflict_cycles": ("lds_bank_conflict_cycles",),
    "l2_bytes": ("l2_bytes",),
    "lds_bytes": ("lds_bytes",),
}
_RATIOS = {  # metric: (numerator quantity, the quantities whose sum is the denominator)
    "l2_hit_rate": ("l2_hits", ("l2_hits", "l2_misses")),
    "lds_bank_conflict_rate": ("lds_bank_conflict_cycles", ("lds_active_cycles",)),
    "valu_thread_utilization": ("valu_thread_cycles", ("valu_lane_cycles",)),
}
_REPORTED = (
    *_DTYPE_PARTS,
    "int8_ops",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "l2_bytes",
    "lds_bytes",
    *_RATIOS,
)


def kernel_hardware_metrics(con: duckdb.DuckDBPyConnection, session_id: str) -> pa.Table:
    """One row per counted dispatch of the session, ordered by dispatch id; only the kernel
    rows a counted dispatch can match are read, and none for a session without counters (most
    traces: its table has the columns and no rows)."""
    counted = con.execute(
        "SELECT count(*) > 0 FROM (SELECT 1 FROM counters WHERE session_id = $sid LIMIT 1)",
        {"sid": session_id},
    ).fetchone()[0]
    session_id = session_id if counted else NO_SESSION
    con.register("_counter_agents", _agent_targets(con, session_id))
    try:
        return con.sql(_dispatch_sql(), params={"sid": session_id}).to_arrow_table()
    finally:
        con.unregister("_counter_agents")


def kernel_hardware_summary(dispatches: pa.Table) -> pa.Table:
    """Per device, kernel name and gfx target: dispatch count, summed time, work (per data type,
    and the type with the most) and bytes (HBM, L2, LDS), and rates weighted by time (FLOP/s
    and bytes/s as sums over sums of the dispatches that have both)."""
    with duckdb.connect() as con:
        con.register("dispatches", dispatches)
        return con.sql(_SUMMARY_SQL).to_arrow_table()


def _agent_targets(con: duckdb.DuckDBPyConnection, session_id: str) -> pa.Table:
    """The session's GPU agents as (agent number, gfx target, why it has no formulas)."""
    gpus = session_gpu_targets(con, session_id)
    reasons = [
        no_formulas_reason(gfx or name)
        for gfx, name in zip(gpus["gfx"].to_pylist(), gpus["name"].to_pylist(), strict=True)
    ]
    return pa.table(
        {"agent": gpus["device"], "gfx": gpus["gfx"], "reason": pa.array(reasons, pa.string())}
    )


def _pivot_columns() -> str:
    """avg(value) of each formula counter, under either spelling (X or X_sum)."""
    return ",\n".join(
        f"avg(value) FILTER (WHERE counter IN ({sql_literal(n)}, {sql_literal(n + SUM_SUFFIX)}))"
        f" AS {sql_identifier(n)}"
        for n in all_counters()
    )


def _linear(family: CounterFormulas, quantities: tuple[str, ...]) -> str | None:
    """The sum of a family's formulas for these quantities, None when it has none of them."""
    terms = [
        f"{factor!r} * {sql_identifier(counter)}"
        for formula in family.formulas
        if formula.quantity in quantities
        for counter, factor in formula.terms
    ]
    return f"({' + '.join(terms)})" if terms else None


def _needed(family: CounterFormulas, quantities: tuple[str, ...]) -> list[str]:
    counters = (
        c for formula in family.formulas if formula.quantity in quantities for c in formula.counters
    )
    return list(dict.fromkeys(counters))


def _by_family(expression) -> str:
    """CASE over the gfx target: each family's SQL (from `expression(family)`), else NULL."""
    branches = [
        f"WHEN gfx IN ({', '.join(sql_literal(t) for t in family.targets)}) THEN {sql}"
        for family in FAMILIES
        if (sql := expression(family)) is not None
    ]
    return f"CASE {' '.join(branches)} END" if branches else "NULL"


def _metric(name: str) -> str:
    if name in _SUMS:
        return _by_family(lambda family: _linear(family, _SUMS[name]))
    numerator, denominator = _RATIOS[name]

    def ratio(family: CounterFormulas) -> str | None:
        top, bottom = _linear(family, (numerator,)), _linear(family, denominator)
        return top and bottom and f"{top} / nullif({bottom}, 0)"

    return _by_family(ratio)


def _missing_entry(name: str) -> str:
    """'metric (COUNTER, ...)' when a counter the metric needs is null on this row."""
    quantities = _SUMS.get(name) or (_RATIOS[name][0], *_RATIOS[name][1])

    def entry(family: CounterFormulas) -> str | None:
        counters = _needed(family, quantities)
        if not counters:
            return None
        nulls = ", ".join(
            f"CASE WHEN {sql_identifier(c)} IS NULL THEN {sql_literal(c)} END" for c in counters
        )
        return f"nullif({sql_literal(name + ' (')} || concat_ws(', ', {nulls}) || ')', {sql_literal(name + ' ()')})"

    return _by_family(entry)


def _family_note() -> str:
    return _by_family(lambda family: family.not_counted and sql_literal(family.not_counted))


def _dispatch_sql() -> str:
    metrics = ",\n".join(f"{_metric(m)} AS {m}" for m in _SUMS | _RATIOS)
    missing = ", ".join(_missing_entry(m) for m in _REPORTED)
    return f"""
WITH counted AS (
    SELECT dispatch_id,
           CASE WHEN dispatch_id IS NULL THEN correlation_id END AS uncounted_key,
           TRY_CAST(regexp_extract(agent, '[0-9]+$') AS INTEGER) AS agent,
           any_value(correlation_id) AS correlation_id,
           kernel_name,
           {_pivot_columns()}
    FROM counters WHERE session_id = $sid
    GROUP BY ALL
),
kernels AS (  -- only the kernel rows a counted dispatch can match (a trace has millions)
    SELECT dispatch_id, correlation_id, device_id, kernel_name, duration_ns
    FROM kernel_events WHERE session_id = $sid AND category = 'Kernel'
      AND (dispatch_id IN (SELECT dispatch_id FROM counted)
           OR correlation_id IN (SELECT correlation_id FROM counted)
           OR kernel_name IN (SELECT kernel_name FROM counted))
),
by_dispatch AS (
    SELECT dispatch_id, device_id, kernel_name, quantile_disc(duration_ns, 0.5) AS duration_ns
    FROM kernels WHERE dispatch_id IN (SELECT dispatch_id FROM counted) GROUP BY ALL
),
by_correlation AS (
    SELECT correlation_id, device_id, kernel_name, quantile_disc(duration_ns, 0.5) AS duration_ns
    FROM kernels WHERE correlation_id IN (SELECT correlation_id FROM counted) GROUP BY ALL
),
by_name AS (
    SELECT device_id, kernel_name, quantile_disc(duration_ns, 0.5) AS duration_ns
    FROM kernels WHERE kernel_name IN (SELECT kernel_name FROM counted) GROUP BY ALL
),
joined AS (
    SELECT c.*,
           coalesce(c.agent, d.device_id, r.device_id, n.device_id) AS device,
           coalesce(c.kernel_name, d.kernel_name, r.kernel_name) AS kernel,
           coalesce(d.duration_ns, r.duration_ns, n.duration_ns) AS duration_ns,
           CASE WHEN d.duration_ns IS NOT NULL THEN 'dispatch'
                WHEN r.duration_ns IS NOT NULL THEN 'correlation'
                WHEN n.duration_ns IS NOT NULL THEN 'kernel_median' END AS duration_source
    FROM counted c
    LEFT JOIN by_dispatch d
      ON d.dispatch_id = c.dispatch_id
     AND d.device_id IS NOT DISTINCT FROM coalesce(c.agent, d.device_id)
     AND d.kernel_name IS NOT DISTINCT FROM coalesce(c.kernel_name, d.kernel_name)
    LEFT JOIN by_correlation r
      ON d.dispatch_id IS NULL AND r.correlation_id = c.correlation_id
     AND r.device_id IS NOT DISTINCT FROM coalesce(c.agent, r.device_id)
     AND r.kernel_name IS NOT DISTINCT FROM coalesce(c.kernel_name, r.kernel_name)
    LEFT JOIN by_name n
      ON d.dispatch_id IS NULL AND r.correlation_id IS NULL AND n.kernel_name = c.kernel_name
     AND n.device_id IS NOT DISTINCT FROM coalesce(c.agent, n.device_id)
),
targeted AS (
    SELECT j.*, a.gfx, CASE WHEN a.agent IS NULL THEN $no_agent ELSE a.reason END AS reason
    FROM joined j LEFT JOIN _counter_agents a ON a.agent = j.device
),
metrics AS (
    SELECT dispatch_id, correlation_id, kernel AS kernel_name, device, gfx, duration_ns,
           duration_source,
           {metrics},
           list_filter([{missing},
                        CASE WHEN duration_ns IS NULL THEN 'duration_ns (no kernel trace row)' END],
                       lambda m: m IS NOT NULL) AS missing,
           coalesce(reason, {_family_note()}) AS note
    FROM targeted
)
SELECT dispatch_id, correlation_id, kernel_name, device, gfx, duration_ns, duration_source,
       {", ".join(_DTYPE_PARTS)}, int8_ops, vector_flops, matrix_flops,
       vector_flops + matrix_flops AS total_flops,
       hbm_read_bytes, hbm_write_bytes, hbm_read_bytes + hbm_write_bytes AS hbm_bytes,
       l2_hit_rate, lds_bank_conflict_cycles, lds_bank_conflict_rate, valu_thread_utilization,
       l2_bytes, lds_bytes,
       l2_bytes / (nullif(duration_ns, 0) * 1e-9) AS l2_bytes_per_s,
       lds_bytes / (nullif(duration_ns, 0) * 1e-9) AS lds_bytes_per_s,
       (vector_flops + matrix_flops) / (nullif(duration_ns, 0) * 1e-9) AS flops_per_s,
       (hbm_read_bytes + hbm_write_bytes) / (nullif(duration_ns, 0) * 1e-9) AS bytes_per_s,
       (vector_flops + matrix_flops) / nullif(hbm_read_bytes + hbm_write_bytes, 0)
           AS arithmetic_intensity,
       missing, note
FROM metrics
ORDER BY dispatch_id NULLS LAST, correlation_id
""".replace("$no_agent", sql_literal(no_formulas_reason(None)))


def _rate(column: str) -> str:
    """Summed `column` over the summed time of the dispatches that counted it."""
    return (
        f"sum({column}) FILTER (WHERE duration_ns > 0) / (sum(duration_ns) "
        f"FILTER (WHERE duration_ns > 0 AND {column} IS NOT NULL) * 1e-9)"
    )


_FLOPS_BY_DTYPE = ", ".join(f"coalesce(sum({d}_flops), 0)" for d in DTYPES)
_SUMMARY_SQL = f"""
SELECT device, kernel_name, gfx, count(*) AS dispatches, sum(duration_ns)::BIGINT AS duration_ns,
       {", ".join(f"sum({d}_flops) AS {d}_flops" for d in DTYPES)},
       -- the data type with the most counted FLOPs (null: none counted)
       CASE WHEN greatest({_FLOPS_BY_DTYPE}) > 0 THEN
           [{", ".join(repr(d) for d in DTYPES)}][list_position([{_FLOPS_BY_DTYPE}],
                                                             greatest({_FLOPS_BY_DTYPE}))]
       END AS dtype,
       sum(total_flops) AS total_flops, sum(hbm_bytes) AS hbm_bytes,
       sum(total_flops) FILTER (WHERE duration_ns > 0)
           / (sum(duration_ns) FILTER (WHERE duration_ns > 0 AND total_flops IS NOT NULL) * 1e-9)
           AS flops_per_s,
       sum(hbm_bytes) FILTER (WHERE duration_ns > 0)
           / (sum(duration_ns) FILTER (WHERE duration_ns > 0 AND hbm_bytes IS NOT NULL) * 1e-9)
           AS bytes_per_s,
       sum(l2_bytes) AS l2_bytes, sum(lds_bytes) AS lds_bytes,
       {_rate("l2_bytes")} AS l2_bytes_per_s, {_rate("lds_bytes")} AS lds_bytes_per_s,
       sum(l2_hit_rate * duration_ns) / sum(duration_ns) FILTER (WHERE l2_hit_rate IS NOT NULL)
           AS l2_hit_rate,
       sum(lds_bank_conflict_rate * duration_ns)
           / sum(duration_ns) FILTER (WHERE lds_bank_conflict_rate IS NOT NULL)
           AS lds_bank_conflict_rate,
       sum(valu_thread_utilization * duration_ns)
           / sum(duration_ns) FILTER (WHERE valu_thread_utilization IS NOT NULL)
           AS valu_thread_utilization
FROM dispatches
GROUP BY device, kernel_name, gfx
ORDER BY duration_ns DESC NULLS LAST, kernel_name
"""

"""A GPU trace's spans predicted with some kernels made faster (or slower), by re-timing its
chains (`device_chains`), their blocks and the host synchronisations between them.

Synchronisations (device_chains.SYNC_CALLS) cut an iteration into blocks. A sync called at c returns at
max(c, end E of the kernels it waits for) + r, r its observed return time. When every host
time after a sync shifts by the same amount, every chain end after it does too, so the shift
after block b is a running sum of each block's own change
    delta_b = max(c_b, E'_b) - max(c_b, E_b)      (E'_b: the block's end re-timed, unshifted)
and a what-if is one pass over the kernels and one over the blocks, whatever the number of
syncs. (A sync that returned before its block's kernels ended did not wait for them: 0.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa

from aaco_pipelines.analysis.critical_path.device_chains import KEYS, session_chains
from aaco_pipelines.errors import AacoInputError

PREDICTED = pa.schema(
    [
        ("iteration", pa.int64()),
        ("span_ns", pa.int64()),
        ("predicted_span_ns", pa.float64()),
    ]
)


# Every chain re-timed with new durations, unshifted; each block's change of its sync's end;
# the shifts (cumulative within the iteration); the predicted end of each iteration. Several
# what-ifs at once: scenario k's columns carry the suffix _k, and every running sum shares the
# one streaming pass over the chains (a pass per what-if cost ~1.5 s at 10^7 kernels).
PREDICT_SQL = """
WITH timed AS (
    SELECT part, it, seg, row, a, {timed}
    FROM (SELECT part, it, seg, row, a, g, {durations} FROM {chains})
),
queues AS (
    SELECT any_value(it) AS it, any_value(seg) AS seg, {queue_ends}
    FROM timed GROUP BY part
),
changes AS (
    SELECT q.it, q.seg, {changes}
    FROM queues q JOIN device_blocks o USING (it, seg) GROUP BY q.it, q.seg
),
shifted AS (
    SELECT it, {shifted}
    FROM changes
)
SELECT s.it AS iteration, round(i.t_end - i.t0)::BIGINT AS span_ns, {spans}
FROM shifted s JOIN device_iterations i USING (it)
GROUP BY s.it, i.t0, i.t_end ORDER BY s.it
"""


def _predict_sql(factors: Sequence[str], chains: str) -> str:
    """PREDICT_SQL for these what-ifs (each a SQL expression of a kernel's factor) over the
    chains' table or view `chains`."""
    ks = range(len(factors))

    def each(template: str, sep: str = ", ") -> str:
        return sep.join(template.format(k=k) for k in ks)

    durations = ", ".join(f"d / ({factor}) AS d_{k}" for k, factor in enumerate(factors))
    return PREDICT_SQL.format(
        chains=chains,
        durations=durations,
        timed=each("d_{k}, sum(g + d_{k}) OVER (ROWS UNBOUNDED PRECEDING) AS P_{k}"),
        queue_ends=each("arg_max(P_{k}, row) + max(a + d_{k} - P_{k}) AS queue_end_{k}"),
        changes=each(
            "max(q.queue_end_{k}) AS end0_{k}, CASE WHEN any_value(o.waited) "
            "THEN greatest(any_value(o.sync_start), max(q.queue_end_{k})) "
            "- greatest(any_value(o.sync_start), any_value(o.block_end)) ELSE 0 END AS delta_{k}"
        ),
        shifted=each(
            "end0_{k} + coalesce(sum(delta_{k}) OVER (PARTITION BY it ORDER BY seg "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS predicted_end_{k}"
        ),
        spans=each("max(s.predicted_end_{k}) - i.t0 AS predicted_span_ns_{k}"),
    )


def predict_device_spans(
    lake, session_id: str, speedups: pa.Table, key: str, kernels=None
) -> pa.Table:
    """Each iteration's span and its span predicted with the kernels of some nodes, kernel
    names or families sped up (`speedups`: columns `key` and `speedup`; 2 halves a kernel's
    time, 0.5 doubles it), by re-timing the chains, blocks and syncs (PREDICTED)."""
    return predict_device_spans_many(lake, session_id, [speedups], key, kernels)[0]


def predict_device_spans_many(
    lake, session_id: str, scenarios: Sequence[pa.Table], key: str, kernels=None
) -> list[pa.Table]:
    """predict_device_spans for several what-ifs (one speedups table each) over one placing
    of the kernels on their chains, the costly part: one sort of the trace, then one pass
    per what-if (a node's 2x gain for each of 20 candidates)."""
    tables = [checked_speedups(speedups, key) for speedups in scenarios]
    with lake.connect() as con, session_chains(con, session_id, kernels, key) as chains:
        if chains is None:
            return [PREDICTED.empty_table() for _ in tables]
        return predicted_spans(con, session_id, tables, key, "device_chain")


def predicted_spans(
    con, session_id: str, tables: list[pa.Table], key: str, chains: str
) -> list[pa.Table]:
    """One PREDICTED table per speedups table, over the chains placed on `con` (`chains`:
    device_chain or device_timed, whichever is at hand): all of them in one pass."""
    if not tables:
        return []
    factors = [_known_factors(con, session_id, table, key) for table in tables]
    found = con.sql(_predict_sql(factors, chains)).to_arrow_table()
    return [
        pa.table(
            {
                "iteration": found["iteration"],
                "span_ns": found["span_ns"],
                "predicted_span_ns": found[f"predicted_span_ns_{k}"],
            }
        ).cast(PREDICTED)
        for k in range(len(tables))
    ]


# A factor a what-if can mean: an infinitely fast node made the path zero long (a division by
# zero), a 1e-300 one overflowed int64 nanoseconds into a faster p50.
SPEEDUP_RANGE = (1e-3, 1e6)


def usable_speedup(factor) -> bool:
    low, high = SPEEDUP_RANGE
    return isinstance(factor, int | float) and math.isfinite(factor) and low <= factor <= high


def checked_speedups(speedups: pa.Table, key: str) -> pa.Table:
    """(value, speedup) rows, refused in one line when they cannot mean a what-if."""
    if key not in KEYS:
        raise AacoInputError(f"cannot re-time by {key!r}", fix=f"key by one of {', '.join(KEYS)}")
    missing = {key, "speedup"} - set(speedups.column_names)
    if missing:
        raise AacoInputError(
            f"the speedups name no {' and no '.join(sorted(missing))} column",
            fix=f"give a table with columns {key} and speedup",
        )
    values = speedups[key].cast(pa.string()).to_pylist()
    factors = speedups["speedup"].cast(pa.float64()).to_pylist()
    for value, factor in zip(values, factors, strict=True):
        if value is None or not usable_speedup(factor):
            raise AacoInputError(
                f"speedup {factor!r} for {key} {value!r} is not a number from "
                f"{SPEEDUP_RANGE[0]:g} to {SPEEDUP_RANGE[1]:g}",
                fix="2 halves its kernels' time, 0.5 doubles it",
            )
    if len(set(values)) < len(values):
        raise AacoInputError(
            f"the speedups give one {key} two factors",
            fix=f"give each {key} once",
        )
    return pa.table({"value": pa.array(values, pa.string()), "speedup": pa.array(factors)})


def _known_factors(con, session_id: str, table: pa.Table, key: str) -> str:
    """Each kernel's factor as a SQL expression of its key (numbers only: the values are
    matched by hash here); a what-if of something the session never ran is refused, as it
    would predict no change."""
    con.register("speedup_values", table)
    try:
        rows = con.execute(
            "SELECT v.value, n.key_id, v.speedup FROM speedup_values v "
            "LEFT JOIN key_names n ON n.name = v.value"
        ).fetchall()
    finally:
        con.unregister("speedup_values")
    unknown = [value for value, key_id, _ in rows if key_id is None]
    if unknown:
        known = con.execute("SELECT name FROM key_names ORDER BY name LIMIT 3").fetchall()
        raise AacoInputError(
            f"session {session_id} ran no kernel with {key} {unknown[0]!r}",
            fix=f"name one its kernels have, e.g. {', '.join(repr(k[0]) for k in known)}",
        )
    cases = " ".join(f"WHEN {int(k)}::UBIGINT THEN {float(f)!r}" for _, k, f in rows)
    return f"CASE key_id {cases} ELSE 1.0 END"

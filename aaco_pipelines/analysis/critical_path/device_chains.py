"""A GPU trace's chains: its kernels placed on their device queues, in profiled iterations and
in blocks between host synchronisations, behind the host launches that feed them; what the
critical path (`device_path`) reads and the what-ifs (`device_whatif`) re-time.

On one queue, within one iteration and block, a kernel ends at e_i = max(e_{i-1} + g_i, a_i) + d_i
(its dispatch gap g_i, its launch call's end a_i, its duration d_i), whose closed form is a
running maximum: every quantity is a window function in DuckDB over the chains, sorted once.
Synchronisations (SYNC_CALLS) cut an iteration into blocks; the model's approximations are
reported in `caveats` when they apply.

Entry point: `session_chains` (the chains of a session's kernels, as temporary tables).

Concepts: docs/concepts/critical-path.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aaco_pipelines.foundation.sql import used_parameters

# Host calls that block until the device has finished the work before them. `_spt` variants
# (per-thread default stream) are the same calls. Sources:
SYNC_CALLS = {
    # "the host thread gets blocked until all the commands associated with streams associated
    # with the device" - hipfort API reference, hipdevicesynchronize,
    # https://rocm.docs.amd.com/projects/hipfort/en/docs-10.1.0/doxygen/html/interfacehipfort_1_1hipdevicesynchronize.html
    "hipDeviceSynchronize": "waits for every stream of the device",
    "hipCtxSynchronize": "the context form of hipDeviceSynchronize",
    # "This command is host-synchronous: the host will block until all operations on the
    # specified stream ... are completed" - hipfort, hipstreamsynchronize (docs-10.1.0)
    "hipStreamSynchronize": "waits for one stream",
    # "will block until the event is ready, waiting for all previous work in the stream
    # specified when event was recorded" - hipfort, hipeventsynchronize (docs-10.2.0)
    "hipEventSynchronize": "waits for the work before an event",
    # "akin to hipMemcpyAsync + hipStreamSynchronize" - hipfort, hipmemcpywithstream
    # (docs-10.1.0)
    "hipMemcpyWithStream": "a copy, then a stream sync",
    # HIP follows CUDA's memcpy rules: "For transfers from device to either pageable or pinned
    # host memory, the function returns only once the copy has completed"; from pinned host
    # memory "the function is synchronous with respect to the host" - CUDA Runtime API, API
    # synchronization behavior, https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html
    "hipMemcpy": "a blocking copy",
    "hipMemcpyDtoH": "a blocking device-to-host copy",
    "hipMemcpyHtoD": "a blocking host-to-device copy",
    "hipMemcpy2D": "a blocking 2-D copy",
    "hipMemcpyFromSymbol": "a blocking copy from a device symbol",
}
KEYS = ("node_name", "kernel_name", "kernel_family")
UNMATCHED = "(unmatched) "
MAX_NUMBERED_LANES = 1024  # more queue/stream pairs than this are keyed by a hash
# What a `kernels` table (attribution.session_kernels) must carry: the node and iteration the
# attribution gave each kernel, and what placing it on its queue needs.
KERNEL_COLUMNS = ("iteration", "node_name", "kernel_name", "kernel_family", "duration_ns",
                  "queue_id", "stream_id", "correlation_id", "trace_start_ns")  # fmt: skip

# --- The chains: kernels placed on their queues, iterations and blocks ----------------------
#
# Every pass over the kernels but one reads them in chain order: the chains are sorted once
# into a temporary table, then each running sum, running maximum and previous row is a window
# with an empty OVER clause, which DuckDB computes streaming, in the table's order ("Window
# functions with an empty OVER clause" preserve order: DuckDB, Order Preservation,
# https://duckdb.org/docs/2.0/sql/dialect/order_preservation.html). A sort per window would
# cost four times as much at 10^7 kernels. Chains need no PARTITION BY: a running sum over all
# of them differs from each chain's own by a constant, which its formulas cancel; the running
# maximum restarts at each chain through a key (chain number, T) packed in a HUGEINT.

# The session's kernels as stored, when no attribution says which node and iteration each is
# (a trace without ONNX Runtime's profile is one iteration).
STORED_KERNELS_SQL = """
SELECT coalesce(iteration, 0) AS iteration, node_name, kernel_name, {family} AS kernel_family,
       duration_ns, queue_id, stream_id, correlation_id, start_ns AS trace_start_ns
FROM {table} WHERE session_id = $sid AND category = 'Kernel'
"""

# Each key as (id, name): a what-if and the per-node table key kernels by it. The id hashes
# the columns (no string built per kernel); the name is made once per key.
KEY_SQL = {
    "node_name": (
        "hash(coalesce(node_name, kernel_name, '?'), node_name IS NULL)",
        f"CASE WHEN node_name IS NULL THEN '{UNMATCHED}' || coalesce(kernel_name, '?') "
        "ELSE node_name END",
        "node_name, kernel_name",
    ),
    "kernel_name": (
        "hash(coalesce(kernel_name, '?'))",
        "coalesce(kernel_name, '?')",
        "kernel_name",
    ),
    "kernel_family": (
        "hash(coalesce(kernel_family, '?'))",
        "coalesce(kernel_family, '?')",
        "kernel_family",
    ),
}

# The host synchronisations in order of their end: sync `idx` closes block `idx` (the kernels
# launched after sync idx-1 returned). Times are ns after `$origin`, as DOUBLE: exact for
# integers below 2^53 (104 days), and what-ifs divide.
SYNCS_SQL = """
CREATE OR REPLACE TEMP TABLE device_syncs AS
SELECT row_number() OVER (ORDER BY start_ns + coalesce(duration_ns, 0), start_ns) - 1 AS idx,
       (start_ns - $origin)::DOUBLE AS sync_start,
       (start_ns + coalesce(duration_ns, 0) - $origin)::DOUBLE AS sync_end,
       thread_id
FROM api_calls
WHERE session_id = $sid AND start_ns IS NOT NULL
  AND api_name IN (SELECT unnest($syncs))
"""

# Each kernel's launch call: the call with its correlation id, or, when a trace has several
# calls with one id (merged processes), the first of them.
LAUNCHES_SQL = {
    "unique": """
        SELECT correlation_id, (start_ns - $origin)::DOUBLE AS launch_start,
               (start_ns + coalesce(duration_ns, 0) - $origin)::DOUBLE AS launch_end
        FROM api_calls
        WHERE session_id = $sid AND correlation_id IS NOT NULL AND start_ns IS NOT NULL
    """,
    "first": """
        SELECT correlation_id, (min(start_ns) - $origin)::DOUBLE AS launch_start,
               (arg_min(start_ns + coalesce(duration_ns, 0), start_ns) - $origin)::DOUBLE
                   AS launch_end
        FROM api_calls
        WHERE session_id = $sid AND correlation_id IS NOT NULL AND start_ns IS NOT NULL
        GROUP BY correlation_id
    """,
}

KERNELS_SQL = """
SELECT iteration AS it, {lane} AS lane, {key_id} AS key_id, correlation_id,
       (trace_start_ns - $origin)::DOUBLE AS s, duration_ns::DOUBLE AS d
FROM {source}
WHERE iteration >= 0 AND trace_start_ns IS NOT NULL AND duration_ns >= 0
"""

# The queues and streams kernels ran on, each numbered (a lane): narrow sort keys keep the
# sort of 10^7 kernels within DuckDB's memory (it spilled, and took twice as long, with wide
# ones).
LANES_SQL = """
SELECT DISTINCT coalesce(queue_id, -1) AS queue, coalesce(stream_id, -1) AS stream
FROM {source} WHERE iteration >= 0 AND trace_start_ns IS NOT NULL AND duration_ns >= 0
ORDER BY ALL
"""

# The keys' names and how many kernels each has (a what-if names its nodes; the count checks
# the launch join).
NAMES_SQL = """
CREATE OR REPLACE TEMP TABLE key_names AS
SELECT {key_id} AS key_id, any_value({name}) AS name, sum(kernels) AS kernels
FROM (
    SELECT {columns}, count(*) AS kernels FROM {source}
    WHERE iteration >= 0 AND trace_start_ns IS NOT NULL AND duration_ns >= 0
    GROUP BY ALL
)
GROUP BY ALL
"""

# Per kernel: its block (the syncs that returned before its launch) and its launch; sorted
# into chains (iteration, block, queue and stream: a lane) in start order. The one sort.
SORTED_SQL = """
CREATE OR REPLACE TEMP TABLE device_sorted AS
WITH placed AS (
    SELECT k.*, l.launch_end, coalesce(l.launch_start, k.s) AS host_time
    FROM ({kernels}) k LEFT JOIN ({launches}) l USING (correlation_id)
)
SELECT p.it::INTEGER AS it, ({seg})::INTEGER AS seg, p.lane, p.key_id, p.s, p.d, p.launch_end,
       least(p.host_time, p.s) AS first_time
FROM placed p {blocks}
ORDER BY p.it, seg, p.lane, p.s
"""
# Which block a kernel is in: how many syncs returned before its launch (all in block 0
# when there are none).
BLOCK_OF = {
    True: ("coalesce(y.idx + 1, 0)", "ASOF LEFT JOIN device_syncs y ON p.host_time >= y.sync_end"),
    False: ("0::BIGINT", ""),
}

# The previous kernel of the same chain (streaming, in device_sorted's order).
PREVIOUS_SQL = """
CREATE OR REPLACE TEMP VIEW device_previous AS
SELECT *, row_number() OVER () AS row,
       lag(it) OVER () IS DISTINCT FROM it OR lag(seg) OVER () IS DISTINCT FROM seg
           OR lag(lane) OVER () IS DISTINCT FROM lane AS first,
       lag(s + d) OVER () AS previous_end, lag(s) OVER () AS previous_start
FROM device_sorted
"""

# Each lane's usual dispatch gap: the median gap after kernels whose launch came before the
# queue drained (pure device time between two kernels). And a check that the rows came in
# chain order: no kernel before the previous one of its chain.
GAPS_SQL = """
SELECT lane,
       greatest(coalesce(quantile_disc(s - previous_end, 0.5)
                         FILTER (WHERE NOT first AND launch_end <= previous_end), 0), 0) AS gap,
       count(*) FILTER (WHERE NOT first AND s < previous_start) AS disordered
FROM device_previous GROUP BY lane
"""

# g and a of every kernel, read off the trace, and its chain's number; in chain order. Kernel i
# is device-bound when its launch ended before the previous kernel did (a_i <= e_{i-1}), or it
# started within the queue's usual dispatch gap of it: then g_i = s_i - e_{i-1} and
# a_i := min(a_i, s_i). Otherwise it is host-bound: a_i := s_i (it waited for the host; the launch
# latency counts as host) and g_i := the queue's median device-bound gap. Both give back the
# observed timeline exactly; the classification decides which constraint binds when durations
# change. A kernel with no launch call is device-bound (the host is never on the path before
# it); the first of a chain is anchored at its start.
CHAIN_SQL = """
CREATE OR REPLACE TEMP VIEW device_chain AS
SELECT row, part, it, seg, key_id, s, d,
       CASE WHEN prev_end IS NULL THEN 0 WHEN device_bound THEN s - prev_end
            ELSE least(gap, s - prev_end) END AS g,
       CASE WHEN NOT device_bound THEN s WHEN launch_end IS NULL THEN NULL
            ELSE least(launch_end, s) END AS a
FROM (
    SELECT *, prev_end IS NOT NULL AND (launch_end IS NULL OR launch_end <= prev_end
                                        OR s - prev_end <= gap) AS device_bound
    FROM (
        SELECT *, CASE WHEN first THEN NULL ELSE previous_end END AS prev_end,
               {gap} AS gap,
               sum(first::BIGINT) OVER (ROWS UNBOUNDED PRECEDING) AS part
        FROM device_previous
    )
)
"""

# The iterations' start (first launch or kernel) and observed end, each block's observed end
# and the sync closing it.
ITERATIONS_SQL = """
CREATE OR REPLACE TEMP TABLE device_iterations AS
SELECT it, min(first_time) AS t0, max(s + d) AS t_end FROM device_sorted GROUP BY it
"""

BLOCKS_SQL = """
CREATE OR REPLACE TEMP TABLE device_blocks AS
SELECT b.it, b.seg, b.block_end, y.sync_start, y.sync_end,
       coalesce(y.sync_end >= b.block_end, false) AS waited
FROM (SELECT it, seg, max(s + d) AS block_end FROM device_sorted GROUP BY it, seg) b
LEFT JOIN device_syncs y ON y.idx = b.seg
"""

# A running maximum that restarts with each chain: max over (chain, T) packed in a HUGEINT,
# unpacked (T is a whole number of ns here: observed times).
_OFFSET = "(1::HUGEINT << 62)"
_RUNNING_MAX_T = (
    f"((max((part::HUGEINT << 64) + (T::BIGINT::HUGEINT + {_OFFSET})) "
    f"OVER (ROWS UNBOUNDED PRECEDING)) & ((1::HUGEINT << 64) - 1)) - {_OFFSET}"
)

# The chains timed as observed: running sums P, T, running maxima M and ends e (the path
# reads them: `_Chains.timed`).
TIMED_SQL = f"""
CREATE OR REPLACE TEMP TABLE device_timed AS
SELECT part, it, seg, row, key_id, d, a, g, T, M, P + M AS e,
       greatest(d + least(g, 0), 0) AS on_path_ns
FROM (
    SELECT *, ({_RUNNING_MAX_T})::DOUBLE AS M
    FROM (
        SELECT *, a + d - P AS T
        FROM (SELECT *, sum(g + d) OVER (ROWS UNBOUNDED PRECEDING) AS P FROM device_chain)
    )
)
"""


@contextlib.contextmanager
def session_chains(con, session_id: str, kernels, key: str) -> Iterator[_Chains | None]:
    """The session's chains as temporary tables of `con` for the block (None: no kernels),
    dropped after it. Their streaming passes need DuckDB to keep a table's row order, its
    default, which a writer's connection turns off."""
    (kept,) = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0]
    if not kept:
        con.execute("SET preserve_insertion_order = true")
    chains = _Chains(con, session_id, kernels, key)
    try:
        yield chains if chains.build() else None
    finally:
        chains.drop()
        if not kept:
            con.execute("SET preserve_insertion_order = false")


class _Chains:
    """The temporary tables of one session's chains on one connection."""

    VIEWS = ("device_chain", "device_previous")
    TABLES = ("device_timed", "device_sorted", "device_syncs", "device_iterations", "device_blocks",
              "key_names", "device_queues", "device_path_blocks")  # fmt: skip

    def __init__(self, con, session_id: str, kernels, key: str):
        self.con = con
        self.params = {"sid": session_id}
        self.key_id, self.name, self.columns = KEY_SQL[key]
        if kernels is None:
            table = "kernel_events_with_family" if key == "kernel_family" else "kernel_events"
            family = "kernel_family" if key == "kernel_family" else "NULL::VARCHAR"
            self.source = f"({STORED_KERNELS_SQL.format(table=table, family=family)})"
            self.stored = True
        elif isinstance(kernels, str):
            self.source, self.stored = f"({kernels})", False
        else:
            missing = [c for c in KERNEL_COLUMNS if c not in kernels.column_names]
            if missing:
                raise ValueError(f"kernels lack the columns {missing} (session_kernels' table)")
            con.register("device_kernels", kernels)
            self.source, self.stored = "device_kernels", False

    def build(self) -> bool:
        """The chains' tables and views; False when the session has no kernels."""
        origin = self._query(f"SELECT min(trace_start_ns) FROM {self.source}").fetchall()[0][0]
        if origin is None:
            return False
        params = {**self.params, "origin": origin}
        sync_names = [*SYNC_CALLS, *(f"{name}_spt" for name in SYNC_CALLS)]  # no regex per call
        self._execute(SYNCS_SQL, {**params, "syncs": sync_names})
        names = NAMES_SQL.format(
            key_id=self.key_id, name=self.name, columns=self.columns, source=self.source
        )
        self._execute(names, self.params)
        lanes = self._query(LANES_SQL.format(source=self.source)).fetchall()
        lane = " ".join(
            f"WHEN coalesce(queue_id, -1) = {int(q)} AND coalesce(stream_id, -1) = {int(s)} "
            f"THEN {i}"
            for i, (q, s) in enumerate(lanes)
        )
        kernels = KERNELS_SQL.format(
            key_id=self.key_id,
            source=self.source,
            lane=f"(CASE {lane} END)::INTEGER"
            if len(lanes) <= MAX_NUMBERED_LANES
            else "hash(coalesce(queue_id, -1), coalesce(stream_id, -1))",
        )
        (expected,) = self.con.execute("SELECT sum(kernels) FROM key_names").fetchall()[0]
        syncs = self.con.execute("SELECT count(*) FROM device_syncs").fetchall()[0][0]
        seg, blocks = BLOCK_OF[syncs > 0]
        for launches in LAUNCHES_SQL.values():  # one call per correlation id, as a rule
            sql = SORTED_SQL.format(kernels=kernels, launches=launches, seg=seg, blocks=blocks)
            self._execute(sql, params)
            if self.con.execute("SELECT count(*) FROM device_sorted").fetchall()[0][0] == expected:
                break
        self.con.execute(PREVIOUS_SQL)
        gaps = self.con.execute(GAPS_SQL).fetchall()
        if any(disordered for _, _, disordered in gaps):
            raise RuntimeError("DuckDB did not read the sorted chains in order")
        cases = " ".join(f"WHEN {int(lane)} THEN {float(gap)!r}" for lane, gap, _ in gaps)
        self.con.execute(CHAIN_SQL.format(gap=f"CASE lane {cases} ELSE 0.0 END"))
        self.con.execute(ITERATIONS_SQL)
        self.con.execute(BLOCKS_SQL)
        return True

    def timed(self) -> str:
        """The chains with their running sums and maxima, computed into a table that the path,
        the per-node table and the what-ifs after it read; its name. A what-if alone reads
        device_chain instead: it needs its own running sums, not the observed ones."""
        self.con.execute(TIMED_SQL)
        return "device_timed"

    def caveats(self) -> list[str]:
        """What the model assumed about this session, in words."""
        kernels, unlaunched, overlapping = self.con.execute(
            "SELECT count(*), count(*) FILTER (WHERE launch_end IS NULL), "
            "count(*) FILTER (WHERE NOT first AND s < previous_end) FROM device_previous"
        ).fetchall()[0]
        syncs, threads = self.con.execute(
            "SELECT count(*), count(DISTINCT thread_id) FROM device_syncs"
        ).fetchall()[0]
        copies = self._query(
            "SELECT count(*) FROM memory_copies WHERE session_id = $sid"
        ).fetchall()[0][0]
        notes = []
        if unlaunched:
            notes.append(
                f"{unlaunched} of {kernels} kernels have no launch call in the trace (no HIP API "
                "trace, or no call with their correlation id): taken as device-bound, so the "
                "host is never on the path before them"
            )
        if overlapping:
            notes.append(
                f"{overlapping} kernels start before the previous kernel of their queue ended "
                "(concurrent kernels on one queue): each keeps its observed offset to it"
            )
        if syncs:
            notes.append(
                f"{syncs} host synchronisations on {threads} thread(s) are each taken to wait "
                "for every queue and to hold back every later launch"
            )
        if copies:
            notes.append(
                f"{copies} memory copies are not on the queues' chains: a blocking copy counts "
                "as a host synchronisation, an asynchronous copy's device time is not kept"
            )
        if self.stored:
            notes.append(
                "kernels are keyed by their stored node or kernel name and iteration, without "
                "the launch attribution (a trace without ONNX Runtime's profile is one iteration)"
            )
        return notes

    def drop(self) -> None:
        for name in self.VIEWS:
            self.con.execute(f"DROP VIEW IF EXISTS {name}")
        for name in self.TABLES:
            self.con.execute(f"DROP TABLE IF EXISTS {name}")
        if self.source == "device_kernels":
            self.con.unregister("device_kernels")

    def _query(self, sql: str):
        return self.con.execute(sql, used_parameters(sql, self.params))

    def _execute(self, sql: str, params: dict) -> None:
        self.con.execute(sql, used_parameters(sql, params))

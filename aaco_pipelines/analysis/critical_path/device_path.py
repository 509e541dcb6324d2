"""The critical path of a GPU trace: device queues and the host launches that feed them.

On the session's chains (`device_chains`: each queue's kernels in start order, within one
profiled iteration and between two host synchronisations, with ends e_i = P_i + M_i):

- The chain's end e_n = P_n + M_n. Its critical run starts at j*, the kernel whose T_j = M_n
  (the last, on a tie): kernels j*..n are on the path, the host is on it before a_{j*}.
- Slack of kernel k (how much longer it may run without moving the end) = M_n - M_k, plus the
  gap from its queue's end to the block's end (the latest of the queues), plus the block's own
  slack: before a synchronisation that waits for it, the time the host was still busy
  (sync call start - block end); in the iteration's last block, nothing.

The what-ifs asked for with the path re-time the same chains (`device_whatif`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from aaco_pipelines.analysis.critical_path.device_chains import session_chains
from aaco_pipelines.analysis.critical_path.device_whatif import checked_speedups, predicted_spans

PER_NODE = pa.schema(
    [
        ("node_name", pa.string()),  # runtime node, or '(unmatched) <kernel name>'
        ("kernel_ns", pa.float64()),  # its kernels' time per iteration, median
        ("critical_ns", pa.float64()),  # its time on the critical path per iteration, median
        ("slack_ns", pa.float64()),  # how much longer a dispatch may run, median of dispatches
        ("dispatches_per_iteration", pa.float64()),
    ]
)
PER_ITERATION = pa.schema(
    [
        ("iteration", pa.int64()),
        ("span_ns", pa.int64()),  # first launch (or kernel) start to last kernel end
        ("path_ns", pa.int64()),  # the critical path: host part + device part
        ("host_ns", pa.int64()),  # the host on the path (launching, before the critical runs)
        ("device_ns", pa.int64()),  # kernels and dispatch gaps on the path
    ]
)


@dataclass(frozen=True)
class DevicePath:
    """A session's device critical path: per runtime node (or kernel) and per iteration."""

    per_node: pa.Table  # PER_NODE, most critical time first
    per_iteration: pa.Table  # PER_ITERATION
    host_share: float | None  # median over iterations of host_ns / path_ns
    caveats: list[str] = field(default_factory=list)


# --- The observed path ----------------------------------------------------------------------

# Per chain: its end, M_n, and its device part (end - a_{j*}, j* the last row setting the
# running maximum); per block: the latest chain, whether it is on the path and its slack.
PATH_SQL = """
CREATE OR REPLACE TEMP TABLE device_queues AS
SELECT part, any_value(it) AS it, any_value(seg) AS seg, max(e) AS queue_end, max(M) AS m_end,
       max(e) - arg_max(a, row) FILTER (WHERE T = M) AS queue_device
FROM device_timed GROUP BY part;

CREATE OR REPLACE TEMP TABLE device_path_blocks AS
WITH blocks AS (
    SELECT it, seg, max(queue_end) AS block_end,
           arg_max(queue_device, queue_end) AS block_device
    FROM device_queues GROUP BY it, seg
),
ends AS (
    SELECT it, max(block_end) AS iteration_end, arg_max(seg, [block_end, seg::DOUBLE]) AS end_seg
    FROM blocks GROUP BY it
)
SELECT b.it, b.seg, b.block_end, b.block_device, e.iteration_end,
       b.seg = e.end_seg OR (b.seg < e.end_seg AND o.waited AND b.block_end >= o.sync_start)
           AS on_path,
       CASE WHEN b.seg < e.end_seg AND o.waited THEN greatest(o.sync_start - b.block_end, 0)
            ELSE e.iteration_end - b.block_end END AS block_slack
FROM blocks b JOIN ends e USING (it) JOIN device_blocks o USING (it, seg)
"""

PER_ITERATION_SQL = """
SELECT b.it AS iteration,
       round(i.t_end - i.t0)::BIGINT AS span_ns,
       round(any_value(b.iteration_end) - i.t0)::BIGINT AS path_ns,
       round(any_value(b.iteration_end) - i.t0
             - least(sum(b.block_device) FILTER (WHERE b.on_path),
                     any_value(b.iteration_end) - i.t0))::BIGINT AS host_ns,
       round(least(sum(b.block_device) FILTER (WHERE b.on_path),
                   any_value(b.iteration_end) - i.t0))::BIGINT AS device_ns
FROM device_path_blocks b JOIN device_iterations i USING (it)
GROUP BY b.it, i.t0, i.t_end ORDER BY b.it
"""

# Each dispatch's slack; each key's time, critical time and dispatches per iteration (grid
# with zeros where a key did not run), and its median slack over its dispatches.
PER_NODE_SQL = """
WITH chains AS (
    SELECT q.part, q.m_end + (b.block_end - q.queue_end) + b.block_slack AS slack_base
    FROM device_queues q JOIN device_path_blocks b USING (it, seg)
),
dispatches AS (
    SELECT t.it, t.key_id, t.d, c.slack_base - t.M AS slack, t.on_path_ns
    FROM device_timed t JOIN chains c USING (part)
),
sums AS (
    SELECT key_id, it, sum(d) AS kernel_ns,
           coalesce(sum(on_path_ns) FILTER (WHERE slack <= 0), 0) AS critical_ns,
           count(*) AS n, median(slack) AS slack_ns
    FROM dispatches GROUP BY GROUPING SETS ((key_id, it), (key_id))
),
grid AS (
    SELECT k.key_id, i.it, coalesce(s.kernel_ns, 0) AS kernel_ns,
           coalesce(s.critical_ns, 0) AS critical_ns, coalesce(s.n, 0) AS n
    FROM (SELECT DISTINCT key_id FROM sums) k CROSS JOIN device_iterations i
    LEFT JOIN sums s ON s.key_id = k.key_id AND s.it = i.it
)
SELECT names.name AS node_name, median(g.kernel_ns) AS kernel_ns,
       median(g.critical_ns) AS critical_ns, any_value(whole.slack_ns) AS slack_ns,
       avg(g.n) AS dispatches_per_iteration
FROM grid g JOIN key_names names USING (key_id)
JOIN (SELECT key_id, slack_ns FROM sums WHERE it IS NULL) whole USING (key_id)
GROUP BY names.name ORDER BY critical_ns DESC, kernel_ns DESC, node_name
"""


def device_critical_path(lake, session_id: str, kernels=None) -> DevicePath | None:
    """The session's device critical path, per node and per iteration; None when it has no
    device kernels. `kernels`: attribution.session_kernels' table or SQL (each kernel's runtime
    node and profiled iteration); without it kernels are keyed by name and the stored
    iterations (a trace without ONNX Runtime's profile is one iteration)."""
    path, _ = device_critical_path_and_what_ifs(lake, session_id, kernels)
    return path


def device_critical_path_and_what_ifs(
    lake, session_id: str, kernels=None, what_ifs: Callable[[DevicePath], list] | None = None
) -> tuple[DevicePath | None, list[pa.Table]]:
    """The device critical path and, over the same placing of the kernels on their chains (the
    costly part: one sort of the trace), the what-ifs `what_ifs` asks for once it has seen the
    path (speedups tables keyed by node_name, e.g. its most critical nodes at 2x): their
    PREDICTED tables, in order."""
    with lake.connect() as con, session_chains(con, session_id, kernels, "node_name") as chains:
        if chains is None:
            return None, []
        timed = chains.timed()
        con.execute(PATH_SQL)
        per_iteration = con.sql(PER_ITERATION_SQL).to_arrow_table().cast(PER_ITERATION)
        per_node = con.sql(PER_NODE_SQL).to_arrow_table().cast(PER_NODE)
        caveats = chains.caveats()
        paths = per_iteration["path_ns"].to_pylist()
        hosts = per_iteration["host_ns"].to_pylist()
        shares = [h / p for h, p in zip(hosts, paths, strict=True) if p]
        path = DevicePath(
            per_node, per_iteration, statistics.median(shares) if shares else None, caveats
        )
        scenarios = [
            checked_speedups(table, "node_name") for table in (what_ifs(path) if what_ifs else [])
        ]
        predicted = predicted_spans(con, session_id, scenarios, "node_name", timed)
    return path, predicted

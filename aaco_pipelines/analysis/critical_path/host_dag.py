"""The dependency DAG of ONNX Runtime's node executions on the host, and its re-timing.

Each profiled iteration's node executions (ONNX Runtime profile `Node` events) are the DAG's
vertices. An execution waits for (a) the latest execution, before it, of each node producing one
of its inputs (the runtime graph's data edges) and (b) the previous execution on its own thread
(ONNX Runtime runs a stream's nodes one by one; with `execution_mode: parallel` and `streams`,
independent branches run on threads of their own). Whatever time lies between the moment both
allow and the execution's observed start is its *wait* (the executor's scheduling, allocation,
the profiler): a property of the execution, kept when others are re-timed.

Re-timing is then exact arithmetic on the observed DAG: start = max(iteration start,
predecessors' finishes) + wait, finish = start + duration. With the observed durations it gives
back the observed timeline (up to the profiler's µs rounding); with some durations divided by a
speedup it predicts the iteration's new end. Latest finishes (the backward pass) give every
execution's slack; the critical path is walked back from the iteration's last execution through
each execution's binding predecessor.

Columnar over iterations: executions are ordered by their rank within the iteration (by start,
so every predecessor has a lower rank), and each pass loops over ranks, treating one rank of
every iteration at once. The loop runs as many times as an iteration has node executions (a
BERT-base: ~600), never once per event of the trace.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import onnx
import pyarrow as pa

# The executions of one session's profiled iterations, with their data predecessors: the
# latest execution of a producing node that started before each one (ASOF), and its previous
# execution on its own thread.
EXECUTIONS_SQL = """
WITH runs AS (
    SELECT iteration, min(start_ns) AS run_start, max(start_ns + duration_ns) AS run_end
    FROM kernel_events
    WHERE session_id = $sid AND category = 'Session' AND event_name = 'model_run'
      AND iteration >= 0
    GROUP BY iteration
),
executions AS (
    SELECT e.iteration, e.node_name, e.op_type, e.start_ns, e.duration_ns, e.thread_id,
           runs.run_start, runs.run_end
    FROM kernel_events e JOIN runs USING (iteration)
    WHERE e.session_id = $sid AND e.category = 'Node' AND e.iteration >= 0
)
SELECT row_number() OVER (ORDER BY iteration, start_ns, start_ns + duration_ns, node_name) - 1
           AS execution,
       row_number() OVER (PARTITION BY iteration ORDER BY start_ns, start_ns + duration_ns,
                          node_name) - 1 AS rank,
       *
FROM executions
ORDER BY execution
"""

# Each execution's data predecessors: for every producer of the node, its latest execution in
# the same iteration that started before this one.
PRODUCERS_SQL = """
SELECT c.execution, p.execution AS predecessor
FROM executions c
JOIN edges ON edges.consumer = c.node_name
ASOF JOIN executions p
  ON p.iteration = c.iteration AND p.node_name = edges.producer AND p.start_ns < c.start_ns
"""

THREAD_SQL = """
SELECT execution,
       lag(execution) OVER (PARTITION BY iteration, thread_id ORDER BY start_ns, rank)
           AS predecessor
FROM executions
"""


@dataclass(frozen=True)
class HostDag:
    """A session's node executions as a DAG, ready to re-time (one entry per execution, in
    (iteration, rank) order; `predecessors` padded with -1)."""

    iteration: np.ndarray  # index into `iterations`
    iterations: np.ndarray  # the profiled iteration numbers
    node: np.ndarray  # index into `nodes`
    nodes: np.ndarray  # runtime node names
    op_types: np.ndarray  # per node
    duration: np.ndarray  # ns, observed
    wait: np.ndarray  # ns, between "ready" and the observed start
    predecessors: np.ndarray  # (executions, k) execution indices, -1: none
    run_start: np.ndarray  # per iteration
    run_end: np.ndarray  # per iteration: model_run's end (the tail after the last node kept)
    rank_order: np.ndarray  # execution indices sorted by (rank, iteration)
    rank_bounds: np.ndarray  # rank r's executions: rank_order[bounds[r]:bounds[r + 1]]
    observed_end: np.ndarray | None = None  # per iteration: the last finish, re-timed as observed

    @property
    def executions(self) -> int:
        return len(self.duration)


def data_edges(graph: onnx.GraphProto) -> pa.Table:
    """(consumer, producer) node-name pairs of a runtime graph: who waits for whose output."""
    producer_of = {out: node.name for node in graph.node for out in node.output if out}
    pairs = {
        (node.name, producer_of[name])
        for node in graph.node
        for name in node.input
        if name in producer_of and producer_of[name] != node.name
    }
    consumers, producers = zip(*sorted(pairs), strict=True) if pairs else ((), ())
    return pa.table(
        {"consumer": pa.array(consumers, pa.string()), "producer": pa.array(producers, pa.string())}
    )


def host_dag(lake, session_id: str, graph: onnx.GraphProto) -> HostDag | None:
    """The session's DAG of node executions; None when it has no profiled node executions
    inside model_run spans (a trace without ONNX Runtime's profile)."""
    params = {"sid": session_id}
    with lake.reading():
        executions = lake.query(EXECUTIONS_SQL, params)
    if executions.num_rows == 0:
        return None
    edges = data_edges(graph)
    tables = {"executions": executions, "edges": edges}
    producers = lake.query(PRODUCERS_SQL, tables=tables)
    thread = lake.query(THREAD_SQL, tables={"executions": executions})
    return _dag(executions, producers, thread)


def _dag(executions: pa.Table, producers: pa.Table, thread: pa.Table) -> HostDag:
    n = executions.num_rows
    raw_iteration = executions["iteration"].to_numpy()
    iterations, iteration = np.unique(raw_iteration, return_inverse=True)
    nodes, node = np.unique(
        executions["node_name"].to_numpy(zero_copy_only=False).astype(str), return_inverse=True
    )
    op_type = executions["op_type"].to_numpy(zero_copy_only=False)
    op_types = np.empty(len(nodes), dtype=object)
    op_types[node] = op_type
    start = executions["start_ns"].to_numpy().astype(np.int64)
    duration = executions["duration_ns"].to_numpy().astype(np.int64)
    run_start = np.zeros(len(iterations), np.int64)
    run_end = np.zeros(len(iterations), np.int64)
    run_start[iteration] = executions["run_start"].to_numpy()
    run_end[iteration] = executions["run_end"].to_numpy()
    predecessors = _padded(n, producers, thread)
    finish = start + duration
    ready = run_start[iteration].copy()
    for column in predecessors.T:
        has = column >= 0
        ready[has] = np.maximum(ready[has], finish[column[has]])
    wait = np.maximum(start - ready, 0)
    rank = executions["rank"].to_numpy()
    order = np.lexsort((iteration, rank))
    bounds = np.searchsorted(rank[order], np.arange(rank.max() + 2))
    dag = HostDag(
        iteration, iterations, node, nodes, op_types, duration, wait, predecessors,
        run_start, run_end, order, bounds,
    )  # fmt: skip
    return dataclasses.replace(dag, observed_end=iteration_ends(dag, finishes(dag, duration)))


def _padded(n: int, producers: pa.Table, thread: pa.Table) -> np.ndarray:
    """Each execution's predecessors as a (n, k) matrix padded with -1."""
    pairs = pa.concat_tables(
        [
            producers.select(["execution", "predecessor"]).cast(
                pa.schema([("execution", pa.int64()), ("predecessor", pa.int64())])
            ),
            thread.filter(thread["predecessor"].is_valid()).cast(
                pa.schema([("execution", pa.int64()), ("predecessor", pa.int64())])
            ),
        ]
    )
    execution = pairs["execution"].to_numpy()
    predecessor = pairs["predecessor"].to_numpy()
    order = np.lexsort((predecessor, execution))
    execution, predecessor = execution[order], predecessor[order]
    keep = np.ones(len(execution), bool)
    keep[1:] = (execution[1:] != execution[:-1]) | (predecessor[1:] != predecessor[:-1])
    execution, predecessor = execution[keep], predecessor[keep]
    counts = np.bincount(execution, minlength=n)
    width = max(int(counts.max(initial=0)), 1)
    slot = np.arange(len(execution)) - np.repeat(np.cumsum(counts) - counts, counts)
    matrix = np.full((n, width), -1, np.int64)
    matrix[execution, slot] = predecessor
    return matrix


# A calibrated execution keeps at least this share of its profiled duration.
CALIBRATED_FLOOR = 0.1


def calibrated(dag: HostDag, measured_ns: float) -> HostDag:
    """The DAG with the profiler's own time taken out, so that each iteration re-times to about
    the measured (unprofiled) latency. ONNX Runtime's profiler adds time around every node
    execution (its timestamps and records, µs rounding): a profiled iteration of a tiny MLP
    takes 11x its measured time, of a BERT encoder 1.4x. The excess over the measured latency
    comes out of the waits first (between nodes the executor itself takes well under a µs),
    then equally out of every execution's duration, each keeping CALIBRATED_FLOOR of its own.
    An iteration the profile shows faster than the measured latency (the host was busier in
    the measured pass) is stretched in proportion. Changes re-timed on it are then absolute
    (ns), as they would be measured."""
    span = (dag.run_end - dag.run_start).astype(np.float64)
    stretch = np.maximum(measured_ns / np.maximum(span, 1.0), 1.0)[dag.iteration]
    dag = dataclasses.replace(
        dag,
        wait=np.round(dag.wait * stretch).astype(np.int64),
        duration=np.round(dag.duration * stretch).astype(np.int64),
    )
    excess = np.maximum(span - measured_ns, 0.0)
    waits = np.bincount(dag.iteration, dag.wait, len(dag.iterations))
    from_waits = np.minimum(excess, waits)
    keep = np.where(waits > 0, 1.0 - from_waits / np.maximum(waits, 1.0), 1.0)
    wait = np.round(dag.wait * keep[dag.iteration]).astype(np.int64)
    executions = np.bincount(dag.iteration, minlength=len(dag.iterations))
    per_execution = (excess - from_waits) / np.maximum(executions, 1)
    duration = np.maximum(
        dag.duration - per_execution[dag.iteration], dag.duration * CALIBRATED_FLOOR
    ).astype(np.int64)
    lighter = dataclasses.replace(dag, wait=wait, duration=duration)
    return dataclasses.replace(
        lighter, observed_end=iteration_ends(lighter, finishes(lighter, duration))
    )


def finishes(dag: HostDag, duration: np.ndarray) -> np.ndarray:
    """Every execution's finish with these durations (the forward pass)."""
    finish = np.zeros(dag.executions, np.int64)
    for r in range(len(dag.rank_bounds) - 1):
        index = dag.rank_order[dag.rank_bounds[r] : dag.rank_bounds[r + 1]]
        ready = dag.run_start[dag.iteration[index]]
        for column in dag.predecessors[index].T:
            has = column >= 0
            ready = np.where(has, np.maximum(ready, finish[np.where(has, column, 0)]), ready)
        finish[index] = ready + dag.wait[index] + duration[index]
    return finish


def iteration_ends(dag: HostDag, finish: np.ndarray) -> np.ndarray:
    """Each iteration's last finish."""
    ends = dag.run_start.copy()
    np.maximum.at(ends, dag.iteration, finish)
    return ends


def latencies(dag: HostDag, duration: np.ndarray) -> np.ndarray:
    """Each iteration's model_run time with these durations: its observed time moved by how
    much its last node execution moved (what runs after it, the outputs' return, is kept)."""
    return (dag.run_end - dag.run_start) + changes(dag, duration)


def changes(dag: HostDag, duration: np.ndarray) -> np.ndarray:
    """How much each iteration's end moves with these durations (ns; negative: earlier)."""
    return iteration_ends(dag, finishes(dag, duration)) - dag.observed_end


def slack(dag: HostDag, finish: np.ndarray) -> np.ndarray:
    """How much longer each execution could take without moving its iteration's end (the
    backward pass: latest finishes, from the iteration's end through every predecessor)."""
    latest = iteration_ends(dag, finish)[dag.iteration].astype(np.int64)
    for r in range(len(dag.rank_bounds) - 2, -1, -1):
        index = dag.rank_order[dag.rank_bounds[r] : dag.rank_bounds[r + 1]]
        bound = latest[index] - dag.duration[index] - dag.wait[index]
        for column in dag.predecessors[index].T:
            has = column >= 0
            np.minimum.at(latest, column[has], bound[has])
    return np.maximum(latest - finish, 0)


def critical_executions(dag: HostDag, finish: np.ndarray) -> np.ndarray:
    """Whether each execution is on its iteration's critical path: walked back from the
    iteration's last execution through each one's binding predecessor (the one whose finish
    it waited for; none when it waited only for the iteration's start)."""
    binding = _binding_predecessor(dag, finish)
    last = np.full(len(dag.iterations), -1, np.int64)
    ends = iteration_ends(dag, finish)
    at_end = np.flatnonzero(finish == ends[dag.iteration])
    last[dag.iteration[at_end]] = at_end  # any of a tie
    on_path = np.zeros(dag.executions, bool)
    current = last[last >= 0]
    while len(current):
        on_path[current] = True
        current = binding[current]
        current = current[current >= 0]
    return on_path


def _binding_predecessor(dag: HostDag, finish: np.ndarray) -> np.ndarray:
    columns = dag.predecessors
    safe = np.where(columns >= 0, columns, 0)
    candidate = np.where(columns >= 0, finish[safe], np.iinfo(np.int64).min)
    best = np.argmax(candidate, axis=1)
    rows = np.arange(dag.executions)
    chosen = columns[rows, best]
    waited = candidate[rows, best] >= dag.run_start[dag.iteration]
    return np.where((chosen >= 0) & waited, chosen, -1)

"""Derived metrics of a session: one definition each, computed from the kernel trace with numpy.

  kernel_amplification_ratio    kernels executed per iteration / ONNX graph nodes
                                (> 1: one node becomes several kernels; < 1: fusion)
  partition_fragmentation_index execution-provider partitions along the execution order /
                                ONNX graph nodes (a partition is a maximal run of consecutive
                                kernels on one provider; 1/nodes means a single partition)
  launch_tax                    (iteration wall time - union of kernel intervals) / wall time,
                                mean over profiled iterations: host overhead between kernels
  device_active_ratio           union of kernel intervals / iteration wall time (mean); the
                                union never counts overlapping kernels twice
  microkernel_share             share of kernels shorter than 10 µs
  mean_kernel_us                mean kernel duration
  busy_ns_per_iteration         union of kernel intervals per iteration (mean)
  wall_ns_per_iteration         profiled iteration wall time (ONNX Runtime's model_run, mean)
  max_busy_over_wall            the largest union / wall of any iteration, unclipped: above 1
                                the trace claims more kernel time than the iteration lasted
  launch_tax_p50                launch tax, median over profiled iterations
  microkernel_share_p50         each iteration's share of kernels under 10 µs, median over
                                iterations
  mean_kernel_us_p50            each iteration's mean kernel duration, median over iterations
  busy_ns_per_iteration_p50     union of kernel intervals per iteration (median)
  top_op_stability              share of bootstrap resamples of the profiled iterations that
                                rank the top ONNX node first (analysis/ranking_stability)
  top3_stability                share of those resamples whose first three nodes are the
                                observed three

The report shows each metric with its definition above: report.content.metric_meanings reads
this table. Entry point: `session_metrics`.

Concepts: docs/concepts/derived-metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

MICROKERNEL_NS = 10_000

UNITS = {
    "kernel_amplification_ratio": "kernels/node",
    "partition_fragmentation_index": "partitions/node",
    "launch_tax": "fraction",
    "device_active_ratio": "fraction",
    "microkernel_share": "fraction",
    "mean_kernel_us": "µs",
    "busy_ns_per_iteration": "ns",
    "wall_ns_per_iteration": "ns",
    "max_busy_over_wall": "ratio",
    "launch_tax_p50": "fraction",
    "microkernel_share_p50": "fraction",
    "mean_kernel_us_p50": "µs",
    "busy_ns_per_iteration_p50": "ns",
    "top_op_stability": "fraction",
    "top3_stability": "fraction",
}

RUNS_SQL = """
SELECT iteration, start_ns, duration_ns FROM kernel_events
WHERE session_id = $sid AND event_name = 'model_run' AND iteration >= 0 ORDER BY iteration
"""
# The kernels in execution order, streamed: what the union of intervals and the partitions need,
# the provider as a hash (equal providers, equal codes, in every batch).
STREAM_SQL = """
SELECT iteration, start_ns, start_ns + duration_ns AS end_ns, hash(provider) AS provider_code
FROM {kernels} ORDER BY iteration, start_ns
"""
BATCH_ROWS = 1 << 20


class KernelStream:
    """Derived-metric sums over kernels fed in (iteration, start) order, a batch at a time:
    only the busy segment still open at a batch's end is carried into the next, so a trace of
    10^7 kernels is never held whole (memory stays flat in trace size)."""

    def __init__(self) -> None:
        self.busy = np.zeros(0)  # union of kernel intervals, by iteration
        self.open: tuple[int, int, int] | None = None  # (iteration, start, reach)
        self.kernels = self.microkernels = self.duration_ns = 0
        self.by_iteration = np.zeros((3, 0))  # kernels, microkernels, duration ns per iteration
        self.first_iteration: int | None = None
        self.partitions, self.last_provider = 0, None

    def add(self, iteration: np.ndarray, start: np.ndarray, end: np.ndarray, providers) -> None:
        """One batch, continuing the previous one's order."""
        if len(start) == 0:
            return
        self._tally(iteration, end - start)
        self._count_partitions(iteration, np.asarray(providers))
        if iteration[0] == iteration[-1]:  # in iteration order: the batch is one iteration's
            return self._merge_one(int(iteration[0]), start, end)
        if self.open is not None:
            iteration, start, end = (np.r_[value, array] for value, array in zip(
                self.open, (iteration, start, end), strict=True))  # fmt: skip
        self._merge(np.asarray(iteration, np.int64), start, end)

    def _merge(self, iteration: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Merge sorted intervals into segments; every segment but the last is final. Each
        iteration of the batch is moved into a window of its own, one batch-width apart, so one
        running maximum merges them all and never across an iteration boundary."""
        first, width = int(start.min()), int(end.max() - start.min()) + 1
        rank = np.r_[0, np.cumsum(iteration[1:] != iteration[:-1])]
        windows = int(rank[-1]) + 1
        if windows > 1 and width * windows >= 1 << 62:  # would overflow: half the iterations
            boundary = int(np.argmax(rank > rank[-1] // 2))
            self._merge(iteration[:boundary], start[:boundary], end[:boundary])
            self._close_open()  # the next iteration's kernels cannot extend it
            return self._merge(iteration[boundary:], start[boundary:], end[boundary:])
        shift = rank * width - first
        shifted_start, reach = start + shift, np.maximum.accumulate(end + shift)
        firsts = np.flatnonzero(np.r_[True, shifted_start[1:] > reach[:-1]])
        lasts = np.r_[firsts[1:] - 1, len(start) - 1]
        lengths = (reach[lasts] - shifted_start[firsts]).astype(np.float64)
        self._add_busy(iteration[firsts[:-1]], lengths[:-1])
        self.open = (int(iteration[-1]), int(start[firsts[-1]]), int(reach[-1] - shift[-1]))

    def _merge_one(self, iteration: int, start: np.ndarray, end: np.ndarray) -> None:
        """_merge for kernels of one iteration (a device trace has one, and most batches lie
        within one): one running maximum, no windows, and the open segment is carried in
        without copying the batch. numpy's part for 10^7 kernels: 0.07-0.15 s, not 0.4-0.6 s."""
        reach = np.maximum.accumulate(end)
        if self.open is not None and self.open[0] == iteration and start[0] <= self.open[2]:
            _, first, carried_reach = self.open  # the open segment goes on into this batch
            np.maximum(reach, carried_reach, out=reach)
        else:  # an open segment of another iteration, or one a gap ends, is final
            self._close_open()
            first = int(start[0])
        gaps = np.flatnonzero(start[1:] > reach[:-1]) + 1  # each later segment's first kernel
        if len(gaps):
            closed = int(reach[gaps[0] - 1]) - first
            closed += int((reach[gaps[1:] - 1] - start[gaps[:-1]]).sum())
            self._add_busy(np.array([iteration]), np.array([float(closed)]))
            first = int(start[gaps[-1]])
        self.open = (iteration, first, int(reach[-1]))

    def _tally(self, iteration: np.ndarray, duration: np.ndarray) -> None:
        """Kernels, microkernels and kernel time: in all, and per iteration (one iteration's
        batch adds its totals; a batch across iterations, bincounts from iteration 0)."""
        short = duration < MICROKERNEL_NS
        counts = (len(duration), int(np.count_nonzero(short)), int(duration.sum()))
        self.kernels += counts[0]
        self.microkernels += counts[1]
        self.duration_ns += counts[2]
        last = int(iteration[-1])  # in iteration order: the batch's largest
        if last >= self.by_iteration.shape[1]:
            grown = np.zeros((3, last + 1))
            grown[:, : self.by_iteration.shape[1]] = self.by_iteration
            self.by_iteration = grown
        if iteration[0] == iteration[-1]:
            self.by_iteration[:, last] += counts
            return
        for row, weights in enumerate((None, short, duration)):
            counted = np.bincount(iteration, weights=weights)
            self.by_iteration[row, : len(counted)] += counted

    def _add_busy(self, iteration: np.ndarray, lengths: np.ndarray) -> None:
        counted = np.bincount(iteration, weights=lengths)
        if len(counted) > len(self.busy):
            self.busy = np.r_[self.busy, np.zeros(len(counted) - len(self.busy))]
        self.busy[: len(counted)] += counted

    def _count_partitions(self, iteration: np.ndarray, providers: np.ndarray) -> None:
        """Maximal runs of one provider among the first iteration's kernels."""
        if self.first_iteration is None:
            self.first_iteration = int(iteration[0])
        if iteration[0] == iteration[-1]:  # one iteration's kernels: all of them or none
            mine = providers if iteration[0] == self.first_iteration else providers[:0]
        else:
            mine = providers[iteration == self.first_iteration]
        if len(mine) == 0:
            return
        self.partitions += int(np.count_nonzero(mine[1:] != mine[:-1]))
        self.partitions += int(self.last_provider is None or mine[0] != self.last_provider)
        self.last_provider = mine[-1]

    def _close_open(self) -> None:
        if self.open is not None:
            iteration, start, reach = self.open
            self._add_busy(np.array([iteration]), np.array([float(reach - start)]))
            self.open = None

    def busy_per_iteration(self, n_iterations: int) -> np.ndarray:
        """The union of kernel intervals per iteration, the open segment closed."""
        self._close_open()
        return np.r_[self.busy, np.zeros(max(n_iterations - len(self.busy), 0))]


def busy_time_per_iteration(
    iteration: np.ndarray, start: np.ndarray, duration: np.ndarray, n_iterations: int
) -> np.ndarray:
    """Length of the union of kernel intervals, per iteration (overlaps counted once)."""
    if len(start) == 0:
        return np.zeros(n_iterations)
    iteration = np.asarray(iteration, np.int64)
    start = np.asarray(start, np.int64)
    order = np.lexsort((start, iteration))
    end = start + np.asarray(duration, np.int64)
    stream = KernelStream()
    stream.add(iteration[order], start[order], end[order], np.zeros(len(start)))
    return stream.busy_per_iteration(n_iterations)


def compute_metrics(
    batches: Iterable[pa.RecordBatch], runs: pa.Table, onnx_node_count: int | None
) -> dict[str, float | None]:
    """All derived metrics from the session's kernels (batches of STREAM_SQL's columns, in its
    order) and its model_run spans."""
    stream = KernelStream()
    for batch in batches:
        stream.add(*(batch.column(name).to_numpy() for name in STREAM_COLUMNS))
    n_iterations = runs.num_rows
    wall = runs["duration_ns"].to_numpy().astype(np.float64)
    busy = stream.busy_per_iteration(n_iterations)[:n_iterations]
    tax = np.clip((wall - busy) / wall, 0.0, 1.0)
    kernels_per_iteration = stream.kernels / max(n_iterations, 1)
    per_node = onnx_node_count or None  # per-node ratios need the model's graph
    return {
        "kernel_amplification_ratio": kernels_per_iteration / per_node if per_node else None,
        "partition_fragmentation_index": stream.partitions / per_node if per_node else None,
        "launch_tax": float(np.mean(tax)),
        "device_active_ratio": float(np.mean(np.clip(busy / wall, 0.0, 1.0))),
        "microkernel_share": stream.microkernels / stream.kernels if stream.kernels else 0.0,
        "mean_kernel_us": stream.duration_ns / stream.kernels / 1e3 if stream.kernels else 0.0,
        "busy_ns_per_iteration": float(busy.mean()),
        "wall_ns_per_iteration": float(wall.mean()),
        "max_busy_over_wall": float(np.max(busy / wall)) if n_iterations else 0.0,
        "launch_tax_p50": _median(tax),
        **per_iteration_kernel_medians(stream.by_iteration),
        "busy_ns_per_iteration_p50": _median(busy),
    }


def per_iteration_kernel_medians(by_iteration: np.ndarray) -> dict[str, float | None]:
    """Microkernel share and mean kernel duration of each iteration that ran kernels, median
    over those iterations (KernelStream.by_iteration: kernels, microkernels, duration ns)."""
    kernels, micro, duration = by_iteration[:, by_iteration[0] > 0]
    return {
        "microkernel_share_p50": _median(micro / kernels),
        "mean_kernel_us_p50": _median(duration / kernels / 1e3),
    }


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


STREAM_COLUMNS = ("iteration", "start_ns", "end_ns", "provider_code")


def session_metrics(
    lake, session_id: str, kernels: pa.Table | str, more: dict[str, float] | None = None
) -> pa.Table:
    """The DERIVED_METRICS rows of one session: its kernels (`attribution.session_kernels`: an
    Arrow table, or SQL over the TraceLake) against its iteration spans, the kernels streamed
    from DuckDB in execution order; plus `more`, metrics attribution derived (the ranking's
    stability)."""
    params = {"sid": session_id}
    runs = lake.query(RUNS_SQL, params)
    node_count = lake.query(
        "SELECT m.node_count FROM models m JOIN session_records s USING (model_sha256) "
        "WHERE s.session_id = $sid",
        params,
    )["node_count"].to_pylist()
    source, tables = kernel_source(kernels)
    bound = None if tables else params  # SQL over the TraceLake names the session
    with lake.batches(STREAM_SQL.format(kernels=source), bound, tables, BATCH_ROWS) as batches:
        metrics = compute_metrics(batches, runs, node_count[0] if node_count else None)
    metrics = {**metrics, **(more or {})}
    metrics = {name: value for name, value in metrics.items() if value is not None}
    return pa.table(
        {
            "session_id": [session_id] * len(metrics),
            "metric": list(metrics),
            "value": [float(v) for v in metrics.values()],
            "unit": [UNITS[m] for m in metrics],
        }
    )


def kernel_source(kernels: pa.Table | str) -> tuple[str, dict[str, pa.Table]]:
    """A FROM item for the session's kernels and the Arrow tables it needs registered: an Arrow
    table by name, SQL over the TraceLake as a subquery (`$sid` bound by the caller)."""
    if isinstance(kernels, str):
        return f"({kernels})", {}
    return "kernels", {"kernels": kernels}


def table_metrics(
    kernels: pa.Table, runs: pa.Table, onnx_node_count: int | None, batch_rows: int = BATCH_ROWS
) -> dict[str, float | None]:
    """`compute_metrics` of kernels held in Arrow (columns iteration, start_ns, duration_ns,
    provider), streamed in the same order as a session's."""
    from aaco_pipelines.tracelake import engine

    with engine.connect() as con:
        con.register("kernels", kernels)
        batches = con.sql(STREAM_SQL.format(kernels="kernels")).to_arrow_reader(batch_rows)
        return compute_metrics(batches, runs, onnx_node_count)

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

Iteration wall time is the runtime's own `model_run` span from the profile, so launch tax and
device activity are measured on the same clock as the kernels.
"""

from __future__ import annotations

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
}

RUNS_SQL = """
SELECT iteration, start_ns, duration_ns FROM kernel_events
WHERE session_id = $sid AND event_name = 'model_run' AND iteration >= 0 ORDER BY iteration
"""


def busy_time_per_iteration(
    iteration: np.ndarray, start: np.ndarray, duration: np.ndarray, n_iterations: int
) -> np.ndarray:
    """Length of the union of kernel intervals, per iteration (overlaps counted once).

    Each iteration's times are taken relative to its first kernel and the iterations laid end
    to end with a gap, so one sort and one running maximum merge every iteration at once and a
    kernel can never merge across an iteration boundary.
    """
    if len(start) == 0:
        return np.zeros(n_iterations)
    order = np.lexsort((start, iteration))
    iteration, start = iteration[order], start[order]
    end = start + duration[order]
    firsts_of_iteration = np.flatnonzero(np.r_[True, iteration[1:] != iteration[:-1]])
    origin = np.repeat(start[firsts_of_iteration], np.diff(np.r_[firsts_of_iteration, len(start)]))
    span = float(np.max(end - origin)) + 1.0
    offset = np.repeat(
        np.arange(len(firsts_of_iteration)) * span, np.diff(np.r_[firsts_of_iteration, len(start)])
    )
    start, end = start - origin + offset, end - origin + offset
    reach = np.maximum.accumulate(end)
    new_segment = np.r_[True, start[1:] > reach[:-1]]
    firsts = np.flatnonzero(new_segment)
    lasts = np.r_[firsts[1:] - 1, len(start) - 1]
    lengths = reach[lasts] - start[firsts]
    return np.bincount(iteration[firsts], weights=lengths, minlength=n_iterations)


def partition_count(providers: list[str | None]) -> int:
    """Maximal runs of consecutive kernels on one execution provider."""
    values = np.asarray([p or "" for p in providers])
    return int(len(values) > 0) + int(np.count_nonzero(values[1:] != values[:-1]))


def compute_metrics(
    kernels: pa.Table, runs: pa.Table, onnx_node_count: int | None
) -> dict[str, float | None]:
    """All derived metrics from the session's kernels and its model_run spans."""
    n_iterations = runs.num_rows
    iteration = kernels["iteration"].to_numpy().astype(np.int64)
    start = kernels["start_ns"].to_numpy().astype(np.float64)
    duration = kernels["duration_ns"].to_numpy().astype(np.float64)
    wall = runs["duration_ns"].to_numpy().astype(np.float64)
    busy = busy_time_per_iteration(iteration, start, duration, n_iterations)[:n_iterations]
    first = iteration == iteration.min() if len(iteration) else iteration.astype(bool)
    first_providers = np.asarray(kernels["provider"].to_pylist(), dtype=object)[first]
    kernels_per_iteration = len(duration) / max(n_iterations, 1)
    partitions = partition_count(list(first_providers[np.argsort(start[first], kind="stable")]))
    return {  # per-node ratios need the model's graph: None for a trace ingested without it
        "kernel_amplification_ratio": kernels_per_iteration / onnx_node_count
        if onnx_node_count
        else None,
        "partition_fragmentation_index": partitions / onnx_node_count if onnx_node_count else None,
        "launch_tax": float(np.mean(np.clip((wall - busy) / wall, 0.0, 1.0))),
        "device_active_ratio": float(np.mean(np.clip(busy / wall, 0.0, 1.0))),
        "microkernel_share": float(np.mean(duration < MICROKERNEL_NS)) if len(duration) else 0.0,
        "mean_kernel_us": float(duration.mean() / 1e3) if len(duration) else 0.0,
        "busy_ns_per_iteration": float(busy.mean()),
        "wall_ns_per_iteration": float(wall.mean()),
        "max_busy_over_wall": float(np.max(busy / wall)) if n_iterations else 0.0,
    }


def session_metrics(lake, session_id: str, kernels: pa.Table) -> pa.Table:
    """The DERIVED_METRICS rows of one session: its kernels (`attribution.session_kernels`)
    against its iteration spans from the TraceLake."""
    params = {"sid": session_id}
    runs = lake.query(RUNS_SQL, params)
    node_count = lake.query(
        "SELECT m.node_count FROM models m JOIN session_records s USING (model_sha256) "
        "WHERE s.session_id = $sid",
        params,
    )["node_count"].to_pylist()
    metrics = compute_metrics(kernels, runs, node_count[0] if node_count else None)
    metrics = {name: value for name, value in metrics.items() if value is not None}
    return pa.table(
        {
            "session_id": [session_id] * len(metrics),
            "metric": list(metrics),
            "value": [float(v) for v in metrics.values()],
            "unit": [UNITS[m] for m in metrics],
        }
    )

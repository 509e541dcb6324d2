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
import pyarrow.compute as pc

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

    Each iteration is moved into a window of its own, one trace-width apart, so one sort and
    one running maximum merge every iteration at once and a kernel can never merge across an
    iteration boundary. In integer nanoseconds: exact, and no float copies of 10^7 times.
    """
    if len(start) == 0:
        return np.zeros(n_iterations)
    iteration = np.asarray(iteration)
    start = np.asarray(start, np.int64)
    end = start + np.asarray(duration, np.int64)
    lowest = int(iteration.min())
    windows = int(iteration.max()) - lowest + 1
    if windows > 1:  # one iteration (an ingested trace) needs no windows
        first, width = int(start.min()), int(end.max() - start.min()) + 1
        if width * windows >= 1 << 62:  # the windows would overflow: half the iterations each
            low = iteration < lowest + windows // 2
            halves = [
                busy_time_per_iteration(iteration[part], start[part], end[part] - start[part], 0)
                for part in (low, ~low)
            ]
            total = np.zeros(max(n_iterations, *(len(h) for h in halves)))
            for half in halves:
                total[: len(half)] += half
            return total
        shift = (iteration.astype(np.int64) - lowest) * width - first
        start, end = start + shift, end + shift
    if not np.all(start[1:] >= start[:-1]):  # timsort: traces are nearly in start order
        order = np.argsort(start, kind="stable")
        start, end, iteration = start[order], end[order], iteration[order]
    reach = np.maximum.accumulate(end)
    firsts = np.flatnonzero(np.r_[True, start[1:] > reach[:-1]])
    lasts = np.r_[firsts[1:] - 1, len(start) - 1]
    lengths = (reach[lasts] - start[firsts]).astype(np.float64)
    return np.bincount(iteration[firsts], weights=lengths, minlength=n_iterations)


def partition_count(providers) -> int:
    """Maximal runs of consecutive kernels on one execution provider (names or codes, in
    execution order; None is a provider of its own)."""
    values = providers if isinstance(providers, np.ndarray) else np.asarray(providers, object)
    return int(len(values) > 0) + int(np.count_nonzero(values[1:] != values[:-1]))


def provider_codes(providers: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """One integer per kernel standing for its provider (null a code of its own): comparing
    codes, not 10^7 Python strings."""
    if isinstance(providers, pa.ChunkedArray):
        providers = providers.combine_chunks()
    encoded = pc.dictionary_encode(providers, null_encoding="encode")
    return encoded.indices.to_numpy(zero_copy_only=False)


def compute_metrics(
    kernels: pa.Table, runs: pa.Table, onnx_node_count: int | None
) -> dict[str, float | None]:
    """All derived metrics from the session's kernels and its model_run spans."""
    n_iterations = runs.num_rows
    iteration = kernels["iteration"].to_numpy()
    start = kernels["start_ns"].to_numpy()
    duration = kernels["duration_ns"].to_numpy()
    wall = runs["duration_ns"].to_numpy().astype(np.float64)
    busy = busy_time_per_iteration(iteration, start, duration, n_iterations)[:n_iterations]
    first = iteration == iteration.min() if len(iteration) else iteration.astype(bool)
    first_providers = provider_codes(kernels["provider"])[first]
    kernels_per_iteration = len(duration) / max(n_iterations, 1)
    partitions = partition_count(first_providers[np.argsort(start[first], kind="stable")])
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

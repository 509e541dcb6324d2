"""Raw host counters from `HostSampler` -> TELEMETRY rows (rates and levels, labelled by pass).

Counters become rates over the interval between consecutive ticks and are stamped with the
interval's end, so the first tick yields no rate rows; levels (RSS, threads, frequency) get a row
for every tick. An interval where a summed counter fell (a thread exited and took its count with
it) has no honest rate and is dropped, like every NaN.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.tracelake.schema import TELEMETRY, conform

_CPU_COLUMN = re.compile(r"^cpu(\d+)_busy_jiffies$")
_SORT = [("timestamp_ns", "ascending"), ("device", "ascending"), ("metric", "ascending")]


def _column(raw: pa.Table, name: str) -> np.ndarray:
    """A raw column as float64 with NaN for nulls (offline CPU, exited process)."""
    return pc.fill_null(raw.column(name).cast(pa.float64()), np.nan).to_numpy()


def _metric(timestamps, device: str, metric: str, values, unit: str) -> dict[str, np.ndarray]:
    keep = ~np.isnan(values)
    count = int(keep.sum())
    return {
        "timestamp_ns": timestamps[keep],
        "device": np.full(count, device, dtype=object),
        "metric": np.full(count, metric, dtype=object),
        "value": values[keep],
        "unit": np.full(count, unit, dtype=object),
    }


def _rate(counter: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Increase per second between ticks; NaN where the counter fell or time did not advance."""
    delta = np.diff(counter)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = delta / seconds
    rate[(delta < 0) | (seconds <= 0)] = np.nan
    return rate


def _cpu_metrics(raw: pa.Table, timestamps: np.ndarray) -> list[dict[str, np.ndarray]]:
    ends = timestamps[1:]
    metrics = []
    for name in raw.column_names:
        match = _CPU_COLUMN.match(name)
        if not match:
            continue
        cpu = f"cpu{match.group(1)}"
        busy = np.diff(_column(raw, f"{cpu}_busy_jiffies"))
        total = np.diff(_column(raw, f"{cpu}_total_jiffies"))
        with np.errstate(divide="ignore", invalid="ignore"):
            utilization = np.clip(100.0 * busy / total, 0.0, 100.0)
        utilization[~(total > 0)] = np.nan
        metrics.append(_metric(ends, cpu, "cpu_utilization", utilization, "percent"))
        frequency = _column(raw, f"{cpu}_freq_mhz")
        metrics.append(_metric(timestamps, cpu, "cpu_frequency", frequency, "MHz"))
    return metrics


def _process_metrics(
    raw: pa.Table, timestamps: np.ndarray, clk_tck: int
) -> list[dict[str, np.ndarray]]:
    ends = timestamps[1:]
    seconds = np.diff(timestamps) / 1e9
    rates = [
        ("cpu_utilization", "proc_cpu_jiffies", 100.0 / clk_tck, "percent"),
        ("voluntary_context_switches", "proc_voluntary_ctx", 1.0, "1/s"),
        ("involuntary_context_switches", "proc_involuntary_ctx", 1.0, "1/s"),
        ("runqueue_wait", "proc_runqueue_wait_ns", 1e-6, "ms/s"),
        ("on_cpu", "proc_run_ns", 1e-6, "ms/s"),
    ]
    metrics = [
        _metric(timestamps, "process", "rss", _column(raw, "proc_rss_bytes"), "bytes"),
        _metric(timestamps, "process", "threads", _column(raw, "proc_threads"), "count"),
    ]
    for metric, column, scale, unit in rates:
        values = _rate(_column(raw, column), seconds) * scale
        metrics.append(_metric(ends, "process", metric, values, unit))
    return metrics


def pass_labels(timestamps: np.ndarray, passes: Sequence[tuple[str, int, int]]) -> np.ndarray:
    """The pass whose [start, end] holds each timestamp; the first listed wins an overlap."""
    labels = np.full(len(timestamps), "other", dtype=object)
    assigned = np.zeros(len(timestamps), dtype=bool)
    for name, start_ns, end_ns in passes:
        inside = (timestamps >= start_ns) & (timestamps <= end_ns) & ~assigned
        labels[inside] = name
        assigned |= inside
    return labels


def host_telemetry_table(
    raw: pa.Table, session_id: str, passes: Sequence[tuple[str, int, int]]
) -> pa.Table:
    """TELEMETRY rows (source "host") for per-CPU and measuring process metrics of one session."""
    timestamps = raw.column("timestamp_ns").to_numpy().astype(np.int64)
    clk_tck = int((raw.schema.metadata or {}).get(b"clk_tck", b"100"))
    parts = _cpu_metrics(raw, timestamps) + _process_metrics(raw, timestamps, clk_tck)
    rows = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    count = len(rows["value"])
    table = pa.table(
        {
            "session_id": pa.array(np.full(count, session_id, dtype=object), pa.string()),
            "source": pa.array(np.full(count, "host", dtype=object), pa.string()),
            "pass": pa.array(pass_labels(rows["timestamp_ns"], passes), pa.string()),
            "timestamp_ns": pa.array(rows["timestamp_ns"], pa.int64()),
            "device": pa.array(rows["device"], pa.string()),
            "metric": pa.array(rows["metric"], pa.string()),
            "value": pa.array(rows["value"], pa.float64()),
            "unit": pa.array(rows["unit"], pa.string()),
        }
    )
    return conform(table, TELEMETRY).sort_by(_SORT)

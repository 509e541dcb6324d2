"""HostSampler against a real busy child, and the rates host_telemetry_table derives from it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aaco_pipelines.collectors.host_telemetry import host_telemetry_table
from aaco_pipelines.execution.environment import online_cpus
from aaco_pipelines.execution.host_sampler import PROCESS_COLUMNS, HostSampler
from aaco_pipelines.tracelake.schema import TELEMETRY

BUSY_CHILD = """
import time
block = bytearray(100 * 2**20)
block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page so it is resident
start, cpu = time.time_ns(), time.process_time()
while time.time_ns() - start < 600_000_000:
    pass
print(start, time.time_ns(), (time.process_time() - cpu) / ((time.time_ns() - start) / 1e9))
"""


@pytest.fixture(scope="module")
def busy_run():
    """Sample a busy, 100 MB child, then keep sampling ~0.2 s after it has exited."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD], stdout=subprocess.PIPE)
    sampler = HostSampler(child.pid, interval_s=0.05)
    sampler.start()
    output, _ = child.communicate(timeout=10)
    exited = time.time_ns()
    time.sleep(0.2)
    alive_after_exit = sampler._thread.is_alive()
    raw = sampler.stop()
    busy_start, busy_end, share = output.split()
    return {
        "raw": raw,
        "sampler": sampler,
        "busy_start": int(busy_start),
        "busy_end": int(busy_end),
        "cpu_share": float(share),  # the CPU the child itself saw it got while busy
        "exited": exited,
        "alive_after_exit": alive_after_exit,
    }


def _values(raw: pa.Table, name: str) -> np.ndarray:
    return pc.fill_null(raw.column(name).cast(pa.float64()), np.nan).to_numpy()


def test_sampler_keeps_pace_and_sees_the_child(busy_run):
    raw, sampler = busy_run["raw"], busy_run["sampler"]
    timestamps = raw.column("timestamp_ns").to_numpy()
    seconds = (timestamps[-1] - timestamps[0]) / 1e9
    assert (len(timestamps) - 1) / seconds >= 10
    assert np.all(np.diff(timestamps) > 0)
    assert sampler.peak_rss_bytes >= 100 * 2**20
    assert np.nanmax(_values(raw, "proc_rss_bytes")) >= 100 * 2**20
    assert sampler.errors == []


def test_sampler_has_every_cpu(busy_run):
    raw = busy_run["raw"]
    assert busy_run["sampler"].cpus == online_cpus()
    assert int(raw.schema.metadata[b"cpu_count"]) == len(online_cpus())
    assert int(raw.schema.metadata[b"clk_tck"]) == os.sysconf("SC_CLK_TCK")
    for cpu in busy_run["sampler"].cpus:
        for suffix in ("busy_jiffies", "total_jiffies"):
            column = raw.column(f"cpu{cpu}_{suffix}")
            assert column.type == pa.int64() and column.null_count == 0
        assert raw.column(f"cpu{cpu}_freq_mhz").type == pa.float64()


def test_context_switches_never_decrease_while_alive(busy_run):
    raw = busy_run["raw"]
    for name in ("proc_voluntary_ctx", "proc_involuntary_ctx", "proc_cpu_jiffies"):
        values = _values(raw, name)
        alive = values[~np.isnan(values)]
        assert len(alive) >= 5
        assert np.all(np.diff(alive) >= 0), name


def test_process_columns_go_nan_after_exit_and_sampling_continues(busy_run):
    raw = busy_run["raw"]
    assert busy_run["alive_after_exit"]
    timestamps = raw.column("timestamp_ns").to_numpy()
    after = timestamps > busy_run["exited"] + 20_000_000
    assert after.sum() >= 2  # ticks kept coming after the child was gone
    for name in PROCESS_COLUMNS:
        assert np.all(np.isnan(_values(raw, name)[after])), name


def test_stop_is_idempotent(busy_run):
    assert busy_run["sampler"].stop() is busy_run["raw"]


def test_telemetry_from_a_real_run(busy_run):
    raw, started, ended = busy_run["raw"], busy_run["busy_start"], busy_run["busy_end"]
    table = host_telemetry_table(raw, "s1", [("measured", started, ended)])
    assert table.schema == TELEMETRY
    assert table.num_rows > 0
    rows = table.to_pydict()
    values = np.array(rows["value"])
    devices, metrics = np.array(rows["device"]), np.array(rows["metric"])
    passes, stamps = np.array(rows["pass"]), np.array(rows["timestamp_ns"])
    assert not np.isnan(values).any()
    assert set(rows["source"]) == {"host"} and set(rows["session_id"]) == {"s1"}

    utilization = metrics == "cpu_utilization"
    per_cpu = utilization & (devices != "process")
    assert per_cpu.any() and np.all((values[per_cpu] >= 0) & (values[per_cpu] <= 100 + 1e-9))
    process = utilization & (devices == "process")
    ncpu = int(raw.schema.metadata[b"cpu_count"])
    assert np.all((values[process] >= 0) & (values[process] <= 100 * ncpu + 20))
    busy = process & (passes == "measured")
    # The child's own process_time says how much CPU it got; a loaded host gives it less.
    assert abs(np.median(values[busy]) - 100 * busy_run["cpu_share"]) < 30
    if busy_run["cpu_share"] > 0.8:
        assert np.median(values[busy]) > 50
    on_cpu = (metrics == "on_cpu") & (passes == "measured")
    assert abs(np.median(values[on_cpu]) / 10 - 100 * busy_run["cpu_share"]) < 25

    inside = (stamps >= started) & (stamps <= ended)
    assert np.all(passes[inside] == "measured") and np.all(passes[~inside] == "other")
    assert (~inside).any()
    assert {"rss", "threads", "on_cpu", "runqueue_wait", "voluntary_context_switches"} <= set(
        metrics[devices == "process"]
    )
    order = list(zip(stamps, devices, metrics, strict=True))
    assert order == sorted(order)


def _handmade_raw() -> pa.Table:
    """Three ticks 0.5 s apart with counters whose rates are known by construction."""
    t0 = 1_700_000_000_000_000_000
    raw = pa.table(
        {
            "timestamp_ns": pa.array([t0, t0 + 500_000_000, t0 + 1_000_000_000], pa.int64()),
            "cpu0_busy_jiffies": pa.array([1000, 1050, 1050], pa.int64()),
            "cpu0_total_jiffies": pa.array([5000, 5100, 5200], pa.int64()),
            "cpu0_freq_mhz": pa.array([2800.0, 3000.0, float("nan")]),
            "proc_rss_bytes": pa.array([1e6, 2e6, float("nan")]),
            "proc_threads": pa.array([4.0, 5.0, float("nan")]),
            "proc_voluntary_ctx": pa.array([100.0, 110.0, float("nan")]),
            "proc_involuntary_ctx": pa.array([7.0, 8.0, float("nan")]),
            "proc_run_ns": pa.array([0.0, 250e6, float("nan")]),
            "proc_runqueue_wait_ns": pa.array([0.0, 5e6, float("nan")]),
            "proc_cpu_jiffies": pa.array([10.0, 35.0, float("nan")]),
        }
    )
    return raw.replace_schema_metadata({b"clk_tck": b"100", b"cpu_count": b"1"})


def test_exact_rates_from_known_counters():
    raw = _handmade_raw()
    t0 = raw.column("timestamp_ns")[0].as_py()
    table = host_telemetry_table(raw, "s2", [("measured", t0 + 1, t0 + 600_000_000)])
    found = {
        (row["timestamp_ns"] - t0, row["device"], row["metric"]): (row["value"], row["unit"])
        for row in table.to_pylist()
    }
    half = 500_000_000
    assert found[(half, "cpu0", "cpu_utilization")] == (50.0, "percent")
    assert found[(2 * half, "cpu0", "cpu_utilization")] == (0.0, "percent")
    assert found[(0, "cpu0", "cpu_frequency")] == (2800.0, "MHz")
    assert found[(half, "process", "voluntary_context_switches")] == (20.0, "1/s")
    assert found[(half, "process", "involuntary_context_switches")] == (2.0, "1/s")
    assert found[(half, "process", "cpu_utilization")] == (50.0, "percent")  # 25 jiffies / 0.5 s
    assert found[(half, "process", "on_cpu")] == (500.0, "ms/s")
    assert found[(half, "process", "runqueue_wait")] == (10.0, "ms/s")
    assert found[(0, "process", "rss")] == (1e6, "bytes")
    assert found[(half, "process", "threads")] == (5.0, "count")
    # the first tick has no rates; NaN levels and rates after the exit are dropped
    assert (0, "process", "on_cpu") not in found and (0, "cpu0", "cpu_utilization") not in found
    assert (2 * half, "process", "rss") not in found
    assert (2 * half, "cpu0", "cpu_frequency") not in found
    assert table.num_rows == len(found) == 13
    passes = {row["timestamp_ns"] - t0: row["pass"] for row in table.to_pylist()}
    assert passes == {0: "other", half: "measured", 2 * half: "other"}


def test_a_falling_summed_counter_gives_no_rate():
    raw = _handmade_raw()
    falling = pa.array([100.0, 90.0, 95.0])  # a thread exited and took its switches along
    index = raw.schema.get_field_index("proc_voluntary_ctx")
    raw = raw.set_column(index, "proc_voluntary_ctx", falling)
    table = host_telemetry_table(raw, "s3", [])
    metrics = table.filter(pc.equal(table.column("metric"), "voluntary_context_switches"))
    assert metrics.column("value").to_pylist() == [pytest.approx(10.0)]


def test_empty_and_single_tick_tables():
    raw = _handmade_raw()
    assert host_telemetry_table(raw.slice(0, 0), "s", []).num_rows == 0
    single = host_telemetry_table(raw.slice(0, 1), "s", [])
    assert single.schema == TELEMETRY
    assert set(single.column("metric").to_pylist()) == {"cpu_frequency", "rss", "threads"}

"""The measured hardware envelope on this CPU, and the roofline built on a handcrafted one."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from aaco_pipelines.analysis import envelope_choice
from aaco_pipelines.analysis.envelope import HardwareEnvelope, ResourcePeak, measure_envelope
from aaco_pipelines.analysis.roofline import (
    ROOFLINE_COLUMNS,
    envelope_utilization,
    roofline_table,
)
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake

GFLOP, GB = 1e9, 1e9


@pytest.fixture(scope="module")
def cpu_envelope() -> HardwareEnvelope:
    """The hardware envelope measured for real on this CPU."""
    return measure_envelope(budget_s=10, repeats=3)


def test_measured_peaks_are_sane_for_a_small_cpu(cpu_envelope):
    assert cpu_envelope.providers == ["CPUExecutionProvider"]
    assert 1 * GFLOP <= cpu_envelope.gemm.peak <= 1000 * GFLOP
    assert 0.5 * GB <= cpu_envelope.bandwidth.peak <= 500 * GB
    for peak, unit in ((cpu_envelope.gemm, "FLOP/s"), (cpu_envelope.bandwidth, "B/s")):
        assert peak.unit == unit
        assert 0 < peak.spread_low <= peak.peak <= peak.spread_high
        assert len(peak.sweep) >= 2
        sizes = [entry["size"] for entry in peak.sweep]
        assert sizes == sorted(sizes)
        assert all(entry["repeats"] == 3 for entry in peak.sweep)
        assert peak.peak_entry()["median"] == peak.peak
    assert cpu_envelope.ridge_point() == cpu_envelope.gemm.peak / cpu_envelope.bandwidth.peak
    assert len(cpu_envelope.runtime_fingerprint) == 64


def test_envelope_round_trips_through_json(cpu_envelope):
    restored = HardwareEnvelope.from_dict(json.loads(json.dumps(cpu_envelope.to_dict())))
    assert restored == cpu_envelope


def test_unknown_provider_is_an_input_error():
    with pytest.raises(AacoInputError, match="NoSuchExecutionProvider"):
        measure_envelope(providers=["NoSuchExecutionProvider"])


def _peak(resource: str, value: float, unit: str) -> ResourcePeak:
    entry = {"size": 1, "median": value, "low": value, "high": value, "repeats": 1}
    return ResourcePeak(resource, value, value, value, unit, [entry])


@pytest.fixture
def envelope() -> HardwareEnvelope:
    """100 GFLOP/s and 10 GB/s: the ridge sits at 10 FLOP per byte."""
    return HardwareEnvelope(
        target="handmade",
        providers=["CPUExecutionProvider"],
        runtime_fingerprint="0" * 64,
        measured_at_ns=0,
        gemm=_peak("gemm_flops", 100 * GFLOP, "FLOP/s"),
        bandwidth=_peak("memory_bandwidth", 10 * GB, "B/s"),
    )


NODES = pa.table(
    {
        "onnx_node": ["gemm", "add", "custom", "idle", "transpose"],
        "op_type": ["MatMul", "Add", "MyOp", "Relu", "Transpose"],
        # gemm: AI 100 -> compute bound; add: AI 0.25 -> memory bound
        "flops": pa.array([2_000_000_000, 1_000_000, 5_000, 1_000, 0], pa.int64()),
        "bytes_moved": pa.array([20_000_000, 4_000_000, None, 4_000, 8_000_000], pa.int64()),
        "time_ns": pa.array([40e6, 1e6, 1e3, 0.0, 2e6], pa.float64()),
    }
)


def test_roofline_table_adds_the_columns_with_exact_values(envelope):
    assert envelope.ridge_point() == pytest.approx(10.0)
    table = roofline_table(NODES, envelope)
    assert table.schema == pa.schema([*NODES.schema, *ROOFLINE_COLUMNS])
    rows = {row["onnx_node"]: row for row in table.to_pylist()}
    assert rows["gemm"] == {
        **rows["gemm"],
        "arithmetic_intensity": pytest.approx(100.0),
        "achieved_flops_per_s": pytest.approx(50 * GFLOP),
        "achieved_bytes_per_s": pytest.approx(0.5 * GB),
        "roof_flops_per_s": pytest.approx(100 * GFLOP),
        "bound": "compute",
        "utilization": pytest.approx(0.5),
    }
    assert rows["add"] == {
        **rows["add"],
        "arithmetic_intensity": pytest.approx(0.25),
        "achieved_flops_per_s": pytest.approx(1 * GFLOP),
        "achieved_bytes_per_s": pytest.approx(4 * GB),
        "roof_flops_per_s": pytest.approx(2.5 * GFLOP),
        "bound": "memory",
        "utilization": pytest.approx(0.4),
    }


def test_roofline_table_keeps_unknowns_null(envelope):
    rows = {row["onnx_node"]: row for row in roofline_table(NODES, envelope).to_pylist()}
    custom = rows["custom"]  # bytes unknown: rates that need bytes and everything on the roof
    assert custom["achieved_flops_per_s"] == pytest.approx(5 * GFLOP)
    for column in ("arithmetic_intensity", "achieved_bytes_per_s", "roof_flops_per_s"):
        assert custom[column] is None
    assert custom["bound"] is None and custom["utilization"] is None
    idle = rows["idle"]  # zero time: no rates, but the roof is still known from the costs
    assert idle["achieved_flops_per_s"] is None and idle["achieved_bytes_per_s"] is None
    assert idle["utilization"] is None
    assert idle["arithmetic_intensity"] == pytest.approx(0.25) and idle["bound"] == "memory"


def test_zero_flop_data_movement_is_judged_on_bandwidth(envelope):
    transpose = roofline_table(NODES, envelope).to_pylist()[4]
    assert transpose["arithmetic_intensity"] == 0.0
    assert transpose["roof_flops_per_s"] == 0.0
    assert transpose["bound"] == "memory"
    assert transpose["utilization"] == pytest.approx(0.4)  # 4 GB/s of 10 GB/s


def test_envelope_utilization_of_a_compute_bound_session(envelope):
    # 8 GFLOP over 200 MB in 100 ms: AI 40 >= 10, 80 GFLOP/s of 100
    heu = envelope_utilization(8e9, 200e6, 100e6, envelope)
    assert heu.dominant_resource == "compute"
    assert heu.arithmetic_intensity == pytest.approx(40.0)
    assert heu.achieved_flops_per_s == pytest.approx(80 * GFLOP)
    assert heu.achieved_bytes_per_s == pytest.approx(2 * GB)
    assert heu.compute_utilization == pytest.approx(0.8)
    assert heu.memory_utilization == pytest.approx(0.2)
    assert heu.hardware_envelope_utilization == pytest.approx(0.8)


def test_envelope_utilization_of_a_memory_bound_session(envelope):
    # 100 MFLOP over 600 MB in 100 ms: AI 1/6 < 10, 6 GB/s of 10
    heu = envelope_utilization(100e6, 600e6, 100e6, envelope)
    assert heu.dominant_resource == "memory"
    assert heu.arithmetic_intensity == pytest.approx(1 / 6)
    assert heu.achieved_flops_per_s == pytest.approx(1 * GFLOP)
    assert heu.achieved_bytes_per_s == pytest.approx(6 * GB)
    assert heu.compute_utilization == pytest.approx(0.01)
    assert heu.memory_utilization == pytest.approx(0.6)
    assert heu.hardware_envelope_utilization == pytest.approx(0.6)


def test_bandwidth_is_measured_beyond_the_cache(cpu_envelope):
    streams = cpu_envelope.bandwidth.sweep
    assert all(isinstance(entry["cache_resident"], bool) for entry in streams)
    peak = cpu_envelope.bandwidth.peak_entry()
    assert not peak["cache_resident"] or all(entry["cache_resident"] for entry in streams)


def _fake_sweep(monkeypatch, medians: dict[int, float], cache_bytes: int | None):
    """Run the real sweep loop over sizes 1..n (100 bytes each) with made-up rates."""
    import dataclasses
    import time

    from aaco_pipelines.analysis import envelope

    def fake_measure(ort, runtime, kernel, size, repeats):
        rate = medians[size]
        entry = {"size": size, "median": rate, "low": rate, "high": rate}
        return {**entry, "seconds_per_run": 0.0, "setup_s": 0.0}, ["CPUExecutionProvider"]

    monkeypatch.setattr(envelope, "_measure_size", fake_measure)
    monkeypatch.setattr(envelope, "last_level_cache_bytes", lambda device: cache_bytes)
    kernel = dataclasses.replace(envelope.ADD, sizes=tuple(medians), feed_bytes=lambda n: 100 * n)
    runtime = envelope.Runtime(("CPUExecutionProvider",), None)
    sweep, _ = envelope._sweep(None, runtime, kernel, 1, time.perf_counter() + 60)
    return sweep, envelope._peak("memory_bandwidth", "B/s", sweep)


def test_cache_resident_sizes_neither_set_the_bandwidth_peak_nor_end_the_sweep(monkeypatch):
    # 150 B of cache: sizes 1 and 2 (100, 200 B) are under twice that, so they are the cache's.
    medians = {1: 1000.0, 2: 900.0, 3: 100.0, 4: 101.0, 5: 100.0, 6: 100.0, 7: 99.0}
    sweep, peak = _fake_sweep(monkeypatch, medians, cache_bytes=150)
    assert [e["cache_resident"] for e in sweep] == [True, True, False, False, False]
    assert peak.peak == 101.0 and peak.peak_entry()["size"] == 4  # saturated at 4, stopped at 5
    # Every size in the cache: the largest one stands in, as an upper bound.
    sweep, peak = _fake_sweep(monkeypatch, {1: 1000.0, 2: 900.0}, cache_bytes=10_000)
    assert peak.peak == 900.0 and all(e["cache_resident"] for e in sweep)
    # Cache size unknown: every size counts.
    _, peak = _fake_sweep(monkeypatch, medians, cache_bytes=None)
    assert peak.peak == 1000.0


def test_last_level_cache_is_the_highest_level_in_sysfs(tmp_path, monkeypatch):
    from aaco_pipelines.analysis import envelope

    for index, level, size in (("index0", "1", "48K"), ("index2", "2", "1280K"),
                               ("index3", "3", "49152K")):  # fmt: skip
        (tmp_path / index).mkdir()
        (tmp_path / index / "level").write_text(f"{level}\n")
        (tmp_path / index / "size").write_text(f"{size}\n")
    monkeypatch.setattr(envelope, "_CPU_CACHES", tmp_path)
    assert envelope.last_level_cache_bytes("cpu") == 48 << 20
    assert envelope.last_level_cache_bytes("cuda") == envelope.GPU_LAST_LEVEL_CACHE_BYTES
    monkeypatch.setattr(envelope, "_CPU_CACHES", tmp_path / "absent")
    assert envelope.last_level_cache_bytes("cpu") is None


def test_an_envelope_measured_beside_busy_processes_says_so(cpu_envelope):
    """Peaks measured while other processes hold every core are the leftovers of that work:
    the envelope records how much of the host's CPU time the others took, and says so. The
    test makes its own contention (a busy loop per core) and assumes nothing of the host
    before it: quiet or already busy, the loops' share is recorded."""
    assert 0.0 <= cpu_envelope.host_contention <= 1.0  # recorded for every measurement
    cores = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        busy = measure_envelope(budget_s=1, repeats=2, dtypes=())
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert busy.contended and busy.host_contention > 0.4, busy.host_contention
    assert "other processes took" in busy.describe()
    assert HardwareEnvelope.from_dict(busy.to_dict()).host_contention == busy.host_contention


def test_a_contended_envelope_is_measured_again_an_hour_later_and_a_quiet_one_wins(
    tmp_path, cpu_envelope, monkeypatch
):
    """A session uses the newest quiet envelope of its runtime; a contended one only for an
    hour, after which the next session measures again (not at every session on a busy host)."""
    measurements = []

    # This host's envelope, its contention set by the test (the host itself may be busy).
    quiet = dataclasses.replace(cpu_envelope, host_contention=0.0)

    def measure(target, providers=None, **kwargs):
        measurements.append(target)
        return dataclasses.replace(quiet, measured_at_ns=time.time_ns())

    monkeypatch.setattr(envelope_choice, "measure_envelope", measure)
    hour_ns = int(envelope_choice.RECHECK_CONTENDED_S * 1e9)
    contended = dataclasses.replace(quiet, host_contention=0.6, measured_at_ns=time.time_ns())

    recent = TraceLake(tmp_path / "recent.duckdb")
    recent_id = envelope_choice.save_envelope(recent, contended)
    assert envelope_choice.current_envelope(recent, "cpu")[0] == recent_id and not measurements

    stale = TraceLake(tmp_path / "stale.duckdb")
    stale_id = envelope_choice.save_envelope(
        stale, dataclasses.replace(contended, measured_at_ns=time.time_ns() - hour_ns - 1)
    )
    again_id, again = envelope_choice.current_envelope(stale, "cpu")
    assert measurements == ["cpu"] and again_id != stale_id and not again.contended
    assert envelope_choice.current_envelope(stale, "cpu")[0] == again_id  # kept: it is quiet

    both = TraceLake(tmp_path / "both.duckdb")
    quiet_id = envelope_choice.save_envelope(
        both, dataclasses.replace(quiet, measured_at_ns=time.time_ns() - 2 * hour_ns)
    )
    envelope_choice.save_envelope(both, contended)  # newer, but measured under load
    assert envelope_choice.current_envelope(both, "cpu")[0] == quiet_id

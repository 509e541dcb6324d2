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

from aaco_pipelines.analysis.bottleneck.roofline import (
    ROOFLINE_COLUMNS,
    envelope_utilization,
    roofline_table,
)
from aaco_pipelines.analysis.envelope import choice as envelope_choice
from aaco_pipelines.analysis.envelope.host_peak import (
    TheoreticalPeak,
    physical_cores,
    theoretical_cpu_peak,
)
from aaco_pipelines.analysis.envelope.measure import measure_envelope
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope, ResourcePeak
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

    from aaco_pipelines.analysis.envelope import sweep as envelope_sweep
    from aaco_pipelines.analysis.envelope.kernels import ADD
    from aaco_pipelines.analysis.envelope.record import sweep_peak
    from aaco_pipelines.analysis.envelope.session import Runtime

    def fake_measure(ort, runtime, kernel, size, repeats):
        rate = medians[size]
        entry = {"size": size, "median": rate, "low": rate, "high": rate}
        return {**entry, "seconds_per_run": 0.0, "setup_s": 0.0}, ["CPUExecutionProvider"]

    monkeypatch.setattr(envelope_sweep, "_measure_size", fake_measure)
    monkeypatch.setattr(envelope_sweep, "last_level_cache_bytes", lambda device: cache_bytes)
    kernel = dataclasses.replace(ADD, sizes=tuple(medians), feed_bytes=lambda n: 100 * n)
    runtime = Runtime(("CPUExecutionProvider",), None)
    sweep, _ = envelope_sweep.sweep_sizes(None, runtime, kernel, 1, time.perf_counter() + 60)
    return sweep, sweep_peak("memory_bandwidth", "B/s", sweep)


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
    from aaco_pipelines.analysis.envelope import caches

    for index, level, size in (("index0", "1", "48K"), ("index2", "2", "1280K"),
                               ("index3", "3", "49152K")):  # fmt: skip
        (tmp_path / index).mkdir()
        (tmp_path / index / "level").write_text(f"{level}\n")
        (tmp_path / index / "size").write_text(f"{size}\n")
    monkeypatch.setattr(caches, "_CPU_CACHES", tmp_path)
    assert caches.last_level_cache_bytes("cpu") == 48 << 20
    assert caches.last_level_cache_bytes("cuda") == caches.GPU_LAST_LEVEL_CACHE_BYTES
    monkeypatch.setattr(caches, "_CPU_CACHES", tmp_path / "absent")
    assert caches.last_level_cache_bytes("cpu") is None


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


# --- The host's theoretical peak and the cache ceilings ---------------------------------------


def test_the_measured_envelope_knows_the_hosts_theoretical_peak(cpu_envelope):
    cores = min(len(os.sched_getaffinity(0)), physical_cores(os.sched_getaffinity(0)))
    if theoretical_cpu_peak(cores) is None:  # a host whose cpuinfo says too little
        assert cpu_envelope.theoretical is None and cpu_envelope.theoretical_share() is None
        return
    theoretical = TheoreticalPeak.from_dict(cpu_envelope.theoretical)
    assert theoretical.cores == cores
    assert theoretical.flops_per_s == pytest.approx(
        cores * theoretical.clock_hz * theoretical.simd_fp32_lanes
        * theoretical.fma_units_per_core * (2 if theoretical.fma else 1)
    )  # fmt: skip
    share = cpu_envelope.theoretical_share()
    assert share == pytest.approx(cpu_envelope.gemm.peak / theoretical.flops_per_s) and share > 0
    assert f"fp32 GEMM at {share:.0%} of the host's theoretical" in cpu_envelope.describe()
    assert theoretical.formula() in cpu_envelope.describe()


def test_the_measured_envelope_has_a_ceiling_per_cache_level_sysfs_lists(cpu_envelope):
    """Structure only: on a busy host a cache may measure no faster than DRAM."""
    from aaco_pipelines.analysis.envelope.caches import cpu_cache_levels

    levels = cpu_cache_levels()
    threads = len(os.sched_getaffinity(0))
    assert list(cpu_envelope.cache_bandwidth) == [level.name for level in levels]
    smaller = 0
    for level in levels:
        peak = cpu_envelope.cache_bandwidth[level.name]
        capacity = level.capacity_bytes(threads)
        assert peak.unit == "B/s" and peak.resource == "cache_bandwidth" and peak.sweep
        assert 0 < peak.spread_low <= peak.peak <= peak.spread_high
        for entry in peak.sweep:
            assert entry["capacity_bytes"] == capacity
            assert smaller < entry["working_set_bytes"] <= capacity / 2
            assert entry["working_set_bytes"] == 3 * 4 * entry["size"]
            assert entry["clamped_to"] in (None, "DRAM", *cpu_envelope.cache_bandwidth)
        smaller = capacity
    ceilings = cpu_envelope.memory_ceilings()
    assert [name for name, _, _ in ceilings] == [level.name for level in levels] + ["DRAM"]
    assert ceilings[-1] == ("DRAM", None, cpu_envelope.bandwidth.peak)
    rates = [rate for _, _, rate in ceilings]
    assert rates == sorted(rates, reverse=True)  # clamped: never below a larger level's
    if levels:
        assert cpu_envelope.ceiling_for(1)[0] == levels[0].name
    assert cpu_envelope.ceiling_for(1e15)[0] == "DRAM"


def _cache_peak(value: float, capacity: int) -> ResourcePeak:
    entry = {"size": capacity // 24, "median": value, "low": value, "high": value, "repeats": 1,
             "working_set_bytes": capacity // 2, "capacity_bytes": capacity}  # fmt: skip
    return ResourcePeak("cache_bandwidth", value, value, value, "B/s", [entry])


MiB = 1 << 20


def test_memory_ceilings_go_from_the_smallest_cache_to_dram(envelope):
    cached = dataclasses.replace(
        envelope,
        cache_bandwidth={  # stored in any order: sorted by capacity
            "L3": _cache_peak(40 * GB, 32 * MiB),
            "L2": _cache_peak(90 * GB, 2 * MiB),
        },
    )
    assert cached.memory_ceilings() == [
        ("L2", 2 * MiB, 90 * GB),
        ("L3", 32 * MiB, 40 * GB),
        ("DRAM", None, 10 * GB),
    ]
    assert cached.ceiling_for(0) == ("L2", 90 * GB)
    assert cached.ceiling_for(2 * MiB) == ("L2", 90 * GB)  # fits exactly
    assert cached.ceiling_for(2 * MiB + 1) == ("L3", 40 * GB)  # the smallest that holds it
    assert cached.ceiling_for(32 * MiB) == ("L3", 40 * GB)
    assert cached.ceiling_for(32 * MiB + 1) == ("DRAM", 10 * GB)
    assert cached.ceiling_for(None) == ("DRAM", 10 * GB)  # bytes unknown
    assert cached.ceiling_for(float("nan")) == ("DRAM", 10 * GB)
    # No caches measured (a GPU, a datasheet, an old envelope): DRAM alone.
    assert envelope.memory_ceilings() == [("DRAM", None, 10 * GB)]
    assert envelope.ceiling_for(1) == ("DRAM", 10 * GB)


def test_a_cache_ceiling_below_dram_or_a_larger_cache_is_raised_to_it(envelope):
    noisy = dataclasses.replace(
        envelope,
        cache_bandwidth={"L2": _cache_peak(30 * GB, 2 * MiB), "L3": _cache_peak(4 * GB, 32 * MiB)},
    )
    assert noisy.memory_ceilings() == [
        ("L2", 2 * MiB, 30 * GB),
        ("L3", 32 * MiB, 10 * GB),  # measured 4 GB/s, below DRAM's 10
        ("DRAM", None, 10 * GB),
    ]
    assert noisy.ceiling_for(8 * MiB) == ("L3", 10 * GB)
    slower_l2 = dataclasses.replace(
        envelope,
        cache_bandwidth={"L2": _cache_peak(20 * GB, 2 * MiB), "L3": _cache_peak(50 * GB, 32 * MiB)},
    )
    assert slower_l2.ceiling_for(1 * MiB) == ("L2", 50 * GB)  # data in L2 is in L3's reach too


def test_measurement_records_which_ceiling_a_slow_cache_fell_below():
    from aaco_pipelines.analysis.envelope.sweep import cache_peaks

    def sweep(*medians):
        return [{"size": i, "median": m, "low": m, "high": m} for i, m in enumerate(medians)]

    dram = _peak("memory_bandwidth", 10.0, "B/s")
    peaks = cache_peaks({"L2": sweep(15.0, 60.0), "L3": sweep(8.0, 20.0)}, dram)
    assert list(peaks) == ["L2", "L3"] and peaks["L3"].peak == 20.0
    assert [e["clamped_to"] for e in peaks["L3"].sweep] == ["DRAM", None]
    assert [e["clamped_to"] for e in peaks["L2"].sweep] == ["L3", None]  # 15 < L3's 20
    peaks = cache_peaks({"L2": sweep(15.0), "L3": sweep(5.0)}, dram)
    assert peaks["L3"].sweep[0]["clamped_to"] == "DRAM"
    assert peaks["L2"].sweep[0]["clamped_to"] is None  # above DRAM, and L3 was below it


def _fake_caches(root, caches):
    for index, (level, kind, size, shared) in enumerate(caches):
        folder = root / f"index{index}"
        folder.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size),
                            ("shared_cpu_list", shared)):  # fmt: skip
            (folder / name).write_text(f"{value}\n")


def test_cache_levels_and_their_working_sets_from_sysfs(tmp_path, monkeypatch):
    from aaco_pipelines.analysis.envelope import caches
    from aaco_pipelines.analysis.envelope.sweep import _cache_sizes

    _fake_caches(
        tmp_path,
        [
            (1, "Data", "48K", "0,8"),
            (1, "Instruction", "32K", "0,8"),
            (2, "Unified", "1280K", "0,8"),  # per core, two SMT threads
            (3, "Unified", "30M", "0-15"),  # shared by all
            (4, "Unified", "bogus", "0-15"),  # unreadable: skipped
        ],
    )
    monkeypatch.setattr(caches, "_CPU_CACHES", tmp_path)
    levels = caches.cpu_cache_levels()
    assert levels == [
        caches.CacheLevel("L2", 1280 << 10, 2),
        caches.CacheLevel("L3", 30 << 20, 16),
    ]
    l2, l3 = levels
    assert l2.capacity_bytes(1) == 1280 << 10 and l2.capacity_bytes(8) == 4 * (1280 << 10)
    assert l3.capacity_bytes(8) == 30 << 20 and l3.capacity_bytes(32) == 2 * (30 << 20)
    sizes = _cache_sizes(l2.capacity_bytes(8), 0)
    assert [12 * n for n in sizes] == [2621376, 1310592]  # half and a quarter, whole lines
    assert all(n % 16 == 0 for n in sizes)
    # A quarter of the L3 would fit the L2s: only the half is measured.
    assert len(_cache_sizes(16 * MiB, 5 * MiB)) == 1
    # Neither fits above the smaller level: midway between.
    assert 12 * _cache_sizes(8 * MiB, 5 * MiB)[0] == pytest.approx(6.5 * MiB, abs=192)
    monkeypatch.setattr(caches, "_CPU_CACHES", tmp_path / "absent")
    assert caches.cpu_cache_levels() == []


def test_cache_sweeps_measure_each_level_once_past_their_deadline(tmp_path, monkeypatch):
    from aaco_pipelines.analysis.envelope import caches
    from aaco_pipelines.analysis.envelope import sweep as envelope_sweep
    from aaco_pipelines.analysis.envelope.session import Runtime

    _fake_caches(tmp_path, [(2, "Unified", "1M", "0"), (3, "Unified", "32M", "0-1")])
    monkeypatch.setattr(caches, "_CPU_CACHES", tmp_path)
    measured = []

    def fake_measure(ort, runtime, kernel, size, repeats):
        measured.append(size)
        entry = {"size": size, "median": 1.0, "low": 1.0, "high": 1.0}
        return {**entry, "seconds_per_run": 1e-5, "setup_s": 0.01}, ["CPUExecutionProvider"]

    monkeypatch.setattr(envelope_sweep, "_measure_size", fake_measure)
    runtime = Runtime(("CPUExecutionProvider",), 2)
    sweeps = envelope_sweep.sweep_caches(None, runtime, 2, 3, time.perf_counter() + 60)
    assert {k: [e["working_set_bytes"] for e in v] for k, v in sweeps.items()} == {
        "L2": [12 * (MiB // 12 // 16 * 16), 12 * (MiB // 24 // 16 * 16)],  # of 2 x 1 MiB
        "L3": [12 * (16 * MiB // 12 // 16 * 16), 12 * (8 * MiB // 12 // 16 * 16)],
    }
    assert [e["capacity_bytes"] for e in sweeps["L2"]] == [2 * MiB] * 2
    assert [e["capacity_bytes"] for e in sweeps["L3"]] == [32 * MiB] * 2
    measured.clear()
    sweeps = envelope_sweep.sweep_caches(None, runtime, 2, 3, time.perf_counter() - 1)
    assert [len(v) for v in sweeps.values()] == [1, 1] and len(measured) == 2


def test_new_fields_survive_json_for_dtype_and_old_envelopes_load(cpu_envelope):
    stored = json.loads(json.dumps(cpu_envelope.to_dict()))
    restored = HardwareEnvelope.from_dict(stored)
    assert restored.cache_bandwidth == cpu_envelope.cache_bandwidth
    assert restored.theoretical == cpu_envelope.theoretical
    assert restored.memory_ceilings() == cpu_envelope.memory_ceilings()
    # An envelope stored before these fields were recorded.
    old = {k: v for k, v in stored.items() if k not in ("theoretical", "cache_bandwidth")}
    loaded = HardwareEnvelope.from_dict(old)
    assert loaded.theoretical is None and loaded.cache_bandwidth == {}
    assert loaded.theoretical_share() is None and "theoretical" not in loaded.describe()
    assert loaded.memory_ceilings() == [("DRAM", None, cpu_envelope.bandwidth.peak)]
    assert loaded.ceiling_for(1) == ("DRAM", cpu_envelope.bandwidth.peak)
    # for_dtype changes the GEMM roof only; the fp32 share is not the other type's.
    int8 = _peak("gemm_flops", 3 * cpu_envelope.gemm.peak, "FLOP/s")
    with_int8 = dataclasses.replace(restored, dtype_gemm={"int8": int8})
    as_int8 = with_int8.for_dtype("int8")
    assert as_int8.gemm == int8
    assert as_int8.cache_bandwidth == restored.cache_bandwidth
    assert as_int8.theoretical == restored.theoretical
    assert as_int8.memory_ceilings() == restored.memory_ceilings()
    assert as_int8.theoretical_share() is None
    assert with_int8.for_dtype("fp32").theoretical_share() == restored.theoretical_share()


def test_a_theoretical_share_in_words(envelope):
    theoretical = TheoreticalPeak(2, 2.9e9, 8, 2, 2 * 2.9e9 * 8 * 2 * 2, "test")
    described = dataclasses.replace(envelope, theoretical=theoretical.to_dict()).describe()
    assert described == (
        "measured on CPUExecutionProvider, fp32 GEMM at 54% of the host's theoretical 1.9e11 "
        "FLOP/s (2 cores x 2.9 GHz x 8 lanes x 2 FMA x 2)"
    )


def test_the_asset_page_shows_the_theoretical_share_and_the_ceilings(envelope):
    from aaco_pipelines.assets.envelope import envelope_metadata

    noisy_l3 = _cache_peak(4 * GB, 32 * MiB)
    noisy_l3.sweep[0]["clamped_to"] = "DRAM"
    theoretical = TheoreticalPeak(2, 2.5e9, 8, 2, 2 * 2.5e9 * 8 * 2 * 2, "how it was read")
    cached = dataclasses.replace(
        envelope,
        theoretical=theoretical.to_dict(),
        cache_bandwidth={"L2": _cache_peak(90 * GB, 2 * MiB), "L3": noisy_l3},
    )
    metadata = envelope_metadata("e1", cached)
    assert metadata["theoretical_peak_gflops"] == 160.0
    assert metadata["theoretical_share"] == 0.625  # 100 of 160 GFLOP/s
    assert metadata["theoretical_how"] == "how it was read"
    table = metadata["memory_ceilings"].value.splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| L2", "| L3", "| DRAM"]
    assert table[2] == "| L2 | 2 | 1 | 90 | 90.0 – 90.0 | 90 | — |"
    assert table[3] == "| L3 | 32 | 16 | 4 | 4.0 – 4.0 | 10 | DRAM |"  # raised to DRAM's
    assert metadata["cache_sweeps"].value == {"L2": cached.cache_bandwidth["L2"].sweep,
                                              "L3": noisy_l3.sweep}  # fmt: skip
    bare = envelope_metadata("e0", envelope)  # a GPU's, a datasheet's or an old one
    assert bare["theoretical_peak_gflops"] is None and bare["theoretical_share"] is None
    assert bare["memory_ceilings"].value.splitlines()[2:] == [
        "| DRAM | — | 1.144e-05 | 10 | 10.0 – 10.0 | 10 | — |"  # 12 B: size 1
    ]

"""GPU kernel attribution, validated on rocprofv3 traces simulated from real ONNX Runtime profiles."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from aaco_pipelines.analysis.attribution.clock_alignment import estimate_clock_offset
from aaco_pipelines.analysis.attribution.gpu_kernels import (
    attribute_gpu_kernels,
    clock_alignment_of,
)
from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.tracelake.schema import API_CALLS, KERNEL_EVENTS, conform, sql_projection
from benchmarks import trace_simulator
from benchmarks.trace_simulator import (
    SimulatedTruth,
    SimulationSettings,
    attribution_accuracy,
    simulate_at_scale,
    simulate_rocprof_traces,
)
from tests import models
from tests.helpers import DATA, SHARED, ort_profile

SAMPLE_KERNEL_TRACE = SHARED / "samples/profilers/sllm_r9700_decode_attn_564735_kernel_trace.csv"

_KERNEL_COLUMNS = {
    "source": "'rocprofv3'",
    "category": "'Kernel'",
    "kernel_name": "Kernel_Name",
    "correlation_id": "Correlation_Id",
    "dispatch_id": "Dispatch_Id",
    "start_ns": "Start_Timestamp",
    "duration_ns": "End_Timestamp - Start_Timestamp",
    "thread_id": "Thread_Id",
    "queue_id": "Queue_Id",
    "stream_id": "Stream_Id",
}
_API_COLUMNS = {
    "source": "'rocprofv3'",
    "domain": "Domain",
    "api_name": "Function",
    "start_ns": "Start_Timestamp",
    "duration_ns": "End_Timestamp - Start_Timestamp",
    "process_id": "Process_Id",
    "thread_id": "Thread_Id",
    "correlation_id": "Correlation_Id",
}


def read_traces(truth) -> tuple[pa.Table, pa.Table]:
    """The simulated CSVs as KERNEL_EVENTS / API_CALLS rows (a minimal rocprofv3 CSV reader)."""
    with duckdb.connect() as con:

        def read(path: Path, schema, columns) -> pa.Table:
            query = f"SELECT {sql_projection(schema, columns)} FROM read_csv(?)"
            return con.sql(query, params=[str(path)]).to_arrow_table()

        return (
            read(truth.kernel_trace, KERNEL_EVENTS, _KERNEL_COLUMNS),
            read(truth.hip_api_trace, API_CALLS, _API_COLUMNS),
        )


def profile_nodes(tmp: Path, model, feeds, iterations: int = 100) -> pa.Table:
    """A real ONNX Runtime CPU profile of `iterations` runs, as KERNEL_EVENTS rows. 100: with 20
    runs of the conv block (about 80 launches) the clock offset failed the 3 us bound in most
    runs on a quiet host, whether strays were added or not; real traces have thousands."""
    path = models.save(model, tmp / "model.onnx")
    profile, start_ns = ort_profile(tmp, path, feeds, iterations)
    return read_ort_profile(profile, "s1", start_ns)


@pytest.fixture(scope="module", params=["conv_block", "tiny_mlp"])
def ort_profile_events(request, tmp_path_factory) -> pa.Table:
    """The KERNEL_EVENTS rows of a real ONNX Runtime CPU profile of each model."""
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "conv_block":
        return profile_nodes(tmp, models.conv_block_model(), {"x": np.ones((1, 3, 32, 32), "f4")})
    return profile_nodes(tmp, models.tiny_mlp(), {"x": np.ones((4, 16), "f4")})


def nodes_of(events: pa.Table) -> pa.Table:
    return events.filter(pc.equal(events["category"], "Node"))


def simulated(events: pa.Table, out: Path) -> SimulatedTruth:
    """rocprofv3 traces of a fresh profile, the simulated clock noise under a quarter of its
    median node window. A launch happens inside its node's window; ONNX Runtime's profile has
    microsecond resolution, and on a fast host every tiny_mlp node lasts 2 us: the default +-2 us
    of noise moved launches into the neighbouring node's window (accuracy 0.93-0.95, 6 of 25
    runs under 0.95), a limit of the simulation, not of the attribution. Larger noise is judged
    on the committed conv_block profile (test_clock_offset_survives_jitter_and_stray_launches)."""
    window = float(np.median(nodes_of(events)["duration_ns"].to_numpy()))
    jitter = min(SimulationSettings().jitter_ns, int(window // 4))
    return simulate_rocprof_traces(events, out, SimulationSettings(jitter_ns=jitter))


def test_simulated_kernels_are_attributed_to_their_nodes(ort_profile_events, tmp_path):
    truth = simulated(ort_profile_events, tmp_path)
    kernels, api_calls = read_traces(truth)
    # Fused pairs launch one kernel for two windows: at least one kernel per two windows.
    assert kernels.num_rows == truth.kernels >= nodes_of(ort_profile_events).num_rows // 2
    assigned = attribute_gpu_kernels(kernels, api_calls, ort_profile_events)

    assert assigned.num_rows == kernels.num_rows
    assert attribution_accuracy(assigned, truth) >= 0.95
    assert attribution_accuracy(assigned, truth, by_iteration=True) >= 0.95
    assert set(assigned["method"].to_pylist()) == {"correlation_launch"}
    alignment = clock_alignment_of(assigned)
    # A fresh profile's windows place the offset within 10 us (a busy host's tiny_mlp landed
    # 6.9 us off in CI while every kernel still went to its node); the 3 us bound is judged on
    # the committed real profile, below.
    assert abs(alignment.offset_ns - SimulationSettings().clock_offset_ns) <= 10_000
    # No share of matched launches is asked of a fresh profile: its windows last 2-3 us here,
    # so an offset a few us off (within the bound above) matches anything from 15 % to 97 % of
    # them (0.6 failed on every run of tiny_mlp on this host, before this change too). The share
    # is judged where the windows are known: over 0.99 in the two tests of the search below.


@pytest.mark.parametrize("seed", range(5))
def test_clock_offset_survives_jitter_and_stray_launches(seed, tmp_path):
    """Launches from outside the profiled runs (here 10% more, anywhere) do not move it. Judged
    on the committed real profile (tests/data/README.md), not a fresh one: on a host busy with
    other work a fresh profile's windows let the search land up to 10 us off with or without
    strays (6 of 25 fresh profiles next to one busy process), which would test the host."""
    profile = pq.read_table(DATA / "conv_block_profile_events.parquet")
    settings = SimulationSettings(clock_offset_ns=-123_456_789_012, jitter_ns=3_000, seed=seed)
    truth = simulate_rocprof_traces(profile, tmp_path, settings)
    _, api_calls = read_traces(truth)
    launches = api_calls.filter(pc.match_substring(api_calls["api_name"], "Launch"))
    launches = launches["start_ns"].to_numpy()
    rng = np.random.default_rng(1)
    stray = rng.integers(launches.min() - 10**8, launches.max() + 10**8, len(launches) // 10)
    nodes = nodes_of(profile)
    start = nodes["start_ns"].to_numpy()
    alignment = estimate_clock_offset(
        np.r_[launches, stray], start, start + nodes["duration_ns"].to_numpy()
    )
    assert abs(alignment.offset_ns - settings.clock_offset_ns) <= 3_000
    assert alignment.method == "containment_search"


@pytest.mark.parametrize("seed", range(3))
def test_the_clock_offset_search_keeps_every_offset_it_cannot_yet_rule_out(seed):
    """While the grid step is coarser than the gaps between windows, the widened windows cover
    the profile almost whole, so every offset that keeps the launches inside it scores within 1%
    of the best: a range wider than a level's budget of candidates holds at half the step. The
    search used to cut that range to the budget from its low end, and the true offset with it
    when that lay higher (simulated 10M-kernel traces of resnet_cnn aligned 0.4 s off, 2 runs
    in 16). Here rocprofv3 traced only the last third of a profile of 8,000 irregular windows,
    which puts the true offset at the top of a range two thirds of the profile wide."""
    rng = np.random.default_rng(seed)
    n = 8_000
    length = rng.integers(30_000, 70_000, n)
    start = 10**15 + np.r_[0, np.cumsum(length + rng.integers(3_000, 12_000, n))[:-1]]
    window = np.repeat(np.arange(2 * n // 3, n), 2)  # two launches in each of the last third
    on_profile_clock = start[window] + rng.integers(2_000, length[window] - 2_000)
    offset = 3_217_000_000_123
    launches = on_profile_clock - offset + rng.integers(-1_000, 1_001, len(window))
    alignment = estimate_clock_offset(launches, start, start + length)
    assert abs(alignment.offset_ns - offset) <= 1_000, alignment
    assert alignment.matched_fraction > 0.99


def test_the_clock_offset_of_a_long_trace_is_not_cut_away_with_the_range_around_it():
    """The same on a trace the launches cover whole, as the 10M-kernel benchmark's: a million
    8-12 µs windows 0.5-6 µs apart (13 s), one launch each. About 1% of the trace either side of
    the true offset outlasts the coarse levels; the old search cut the truth away (17 ms off)."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    length = rng.integers(8_000, 12_000, n)
    start = 10**15 + np.r_[0, np.cumsum(length + rng.integers(500, 6_000, n))[:-1]]
    offset = -12_345
    launches = start + rng.integers(0, length) - offset
    alignment = estimate_clock_offset(launches, start, start + length)
    assert abs(alignment.offset_ns - offset) <= 1_000, alignment
    assert alignment.matched_fraction > 0.99


def test_a_known_approximate_offset_keeps_an_unprofiled_pass_from_misleading_it(tmp_path):
    """A trace collected elsewhere may hold a measured pass without profiling, with 5x the
    launches of the profiled one and the same kernels. Without a hint the offset search can lock
    onto that pass (a known limitation; the runner avoids it by tracing only the profiled pass
    in its own process); a hint of the approximate offset resolves it."""
    feeds = {"x": np.ones((1, 3, 32, 32), "f4")}
    measured = profile_nodes(tmp_path / "measured", models.conv_block_model(), feeds, 100)
    profiled = profile_nodes(tmp_path / "profiled", models.conv_block_model(), feeds, 20)
    settings = SimulationSettings(seed=3)
    launches = []
    for name, events in (("a", measured), ("b", profiled)):
        _, api_calls = read_traces(simulate_rocprof_traces(events, tmp_path / name, settings))
        launches.append(api_calls.filter(pc.match_substring(api_calls["api_name"], "Launch")))
    nodes = nodes_of(profiled)
    start = nodes["start_ns"].to_numpy()
    end = start + nodes["duration_ns"].to_numpy()
    all_launches = np.r_[launches[0]["start_ns"].to_numpy(), launches[1]["start_ns"].to_numpy()]
    near = (settings.clock_offset_ns - 10**6, settings.clock_offset_ns + 10**6)
    alignment = estimate_clock_offset(all_launches, start, end, search=near)
    assert abs(alignment.offset_ns - settings.clock_offset_ns) <= 3_000


def test_the_trace_collector_reads_simulated_traces(ort_profile_events, tmp_path):
    traces = pytest.importorskip("aaco_pipelines.collectors.traces")
    truth = simulated(ort_profile_events, tmp_path / "sim")
    counts = traces.collect_trace(tmp_path / "sim", "s1", tmp_path / "tables")
    assert counts["kernel_events"] == truth.kernels
    kernels = pq.read_table(tmp_path / "tables/kernel_events.parquet")
    api_calls = pq.read_table(tmp_path / "tables/api_calls.parquet")
    assigned = attribute_gpu_kernels(kernels, api_calls, ort_profile_events)
    assert attribution_accuracy(assigned, truth) >= 0.95


def test_ort_parent_wins_and_unlaunched_kernels_are_kept(ort_profile_events, tmp_path):
    truth = simulated(ort_profile_events, tmp_path)
    kernels, api_calls = read_traces(truth)
    # The first kernel carries its parent node (as ONNX Runtime's own GPU events do), the second
    # names a correlation id no API call has.
    node_name = pa.array(["from ORT"] + [None] * (kernels.num_rows - 1), pa.string())
    corr = kernels["correlation_id"].to_numpy().copy()
    corr[1] = 10**12
    kernels = kernels.set_column(
        kernels.schema.get_field_index("node_name"), "node_name", node_name
    ).set_column(kernels.schema.get_field_index("correlation_id"), "correlation_id", pa.array(corr))
    kernels = conform(kernels, KERNEL_EVENTS)
    assigned = attribute_gpu_kernels(kernels, api_calls, ort_profile_events).to_pylist()

    assert len(assigned) == kernels.num_rows
    assert assigned[0]["method"] == "ort_parent"
    assert (assigned[0]["runtime_node"], assigned[0]["confidence"]) == ("from ORT", 1.0)
    assert assigned[1]["method"] == "unmatched"
    assert (assigned[1]["runtime_node"], assigned[1]["confidence"]) == (None, 0.0)
    assert assigned[1]["iteration"] is None
    assert assigned[2]["method"] == "correlation_launch"


def test_no_api_trace_leaves_everything_unmatched(ort_profile_events, tmp_path):
    truth = simulated(ort_profile_events, tmp_path)
    kernels, api_calls = read_traces(truth)
    assigned = attribute_gpu_kernels(kernels, api_calls.slice(0, 0), ort_profile_events)
    assert assigned.num_rows == kernels.num_rows
    assert set(assigned["method"].to_pylist()) == {"unmatched"}
    assert clock_alignment_of(assigned).method == "none"


def test_csv_headers_are_rocprofv3s(ort_profile_events, tmp_path):
    truth = simulated(ort_profile_events, tmp_path)
    real_header = SAMPLE_KERNEL_TRACE.read_text().splitlines()[0]
    assert truth.kernel_trace.read_text().splitlines()[0] == real_header
    assert truth.kernel_trace.name == "4242_kernel_trace.csv"
    assert truth.hip_api_trace.read_text().splitlines()[0] == (
        '"Domain","Function","Process_Id","Thread_Id","Correlation_Id",'
        '"Start_Timestamp","End_Timestamp"'
    )
    first_row = truth.kernel_trace.read_text().splitlines()[1]
    assert first_row.startswith('"KERNEL_DISPATCH","Agent 2",')


def test_simulation_at_scale_streams_chunks_and_queues_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(trace_simulator, "CHUNK_KERNELS", 5_000)
    truth = simulate_at_scale(30_001, tmp_path)
    kernels, api_calls = read_traces(truth)
    assert kernels.num_rows == truth.kernels == 30_001
    assert pc.count_distinct(kernels["correlation_id"]).as_py() == 30_001
    # In-order queues: on each stream a kernel starts after the previous one ended.
    ordered = kernels.sort_by([("stream_id", "ascending"), ("dispatch_id", "ascending")])
    stream = ordered["stream_id"].to_numpy()
    start = ordered["start_ns"].to_numpy()
    end = start + ordered["duration_ns"].to_numpy()
    same = stream[1:] == stream[:-1]
    assert np.all(start[1:][same] >= end[:-1][same])
    # Kernels start after their launch call.
    launches = api_calls.filter(pc.is_valid(api_calls["correlation_id"]))
    launch_of = dict(
        zip(launches["correlation_id"].to_pylist(), launches["start_ns"].to_pylist(), strict=True)
    )
    first = kernels.slice(0, 500).to_pylist()
    assert all(k["start_ns"] > launch_of[k["correlation_id"]] for k in first)

    assigned = attribute_gpu_kernels(kernels, api_calls, pq.read_table(truth.node_events))
    assert attribution_accuracy(assigned, truth, by_iteration=True) >= 0.95
    fused = pc.sum(pc.is_valid(truth.table()["fused_node"])).as_py()
    assert fused > 0


def test_migraphx_partition_kernels_spread_over_member_nodes():
    """One compiled partition per iteration: its kernels go to the partition node, then to its
    ONNX nodes by kernel family and FLOP share."""
    partition = "MIGraphXExecutionProvider_MIGraphX_0_0"
    iterations = 3
    node_start = 1_000_000 + np.arange(iterations) * 1_000_000
    nodes = conform(
        pa.table(
            {
                "category": ["Node"] * iterations,
                "iteration": list(range(iterations)),
                "node_name": [partition] * iterations,
                "op_type": ["MGXKernel_graph_main_graph_123"] * iterations,
                "start_ns": node_start,
                "duration_ns": [100_000] * iterations,
                "thread_id": [7] * iterations,
            }
        ),
        KERNEL_EVENTS,
    )
    names = ["Cijk_Ailk_Bljk_SB_MT64x64x16", "Cijk_Ailk_Bljk_SB_MT64x64x16", "add_relu_kernel"]
    durations = [30_000, 10_000, 5_000]
    offset = 5_000_000
    launch = np.repeat(node_start, 3) + np.tile([10_000, 20_000, 30_000], iterations) - offset
    corr = np.arange(1, 3 * iterations + 1)
    kernels = conform(
        pa.table(
            {
                "category": ["Kernel"] * len(corr),
                "kernel_name": names * iterations,
                "correlation_id": corr,
                "start_ns": launch + 50_000,
                "duration_ns": durations * iterations,
            }
        ),
        KERNEL_EVENTS,
    )
    api_calls = conform(
        pa.table(
            {
                "api_name": ["hipExtModuleLaunchKernel"] * len(corr),
                "start_ns": launch,
                "duration_ns": [2_000] * len(corr),
                "thread_id": [7] * len(corr),
                "correlation_id": corr,
            }
        ),
        API_CALLS,
    )
    members = {
        partition: [
            ("fc1/matmul", "MatMul", 300),
            ("fc2/matmul", "MatMul", 100),
            ("fc1/bias", "Add", None),
            ("fc1/relu", "Relu", None),
        ]
    }
    assigned = attribute_gpu_kernels(kernels, api_calls, nodes, members).to_pylist()

    assert {a["method"] for a in assigned} == {"migraphx_partition"}
    assert {a["runtime_node"] for a in assigned} == {partition}
    assert [a["iteration"] for a in assigned] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # GEMM time 30 + 10 µs against FLOP shares 3:1 -> the first kernel to fc1, the second to fc2;
    # the elementwise kernel to the first elementwise member.
    assert [a["onnx_node"] for a in assigned[:3]] == ["fc1/matmul", "fc2/matmul", "fc1/bias"]
    assert [a["onnx_node"] for a in assigned[3:]] == [a["onnx_node"] for a in assigned[:3]] * 2


def test_the_clock_offset_is_found_on_short_regular_windows_for_every_seed(tmp_path):
    """A real profile whose 4-6 µs node windows once let an offset one node off win (see
    tests/data/README.md): every simulator seed must now align to within a few µs."""
    events = pq.read_table(DATA / "conv_block_profile_events.parquet")
    for seed in range(10):
        settings = SimulationSettings(seed=seed)
        truth = simulate_rocprof_traces(events, tmp_path / str(seed), settings)
        kernels, api_calls = read_traces(truth)
        assigned = attribute_gpu_kernels(kernels, api_calls, events)
        error = clock_alignment_of(assigned).offset_ns - settings.clock_offset_ns
        assert abs(error) < 5_000, (seed, error)
        assert attribution_accuracy(assigned, truth) >= 0.95, seed

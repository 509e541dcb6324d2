"""Attribution of real ONNX Runtime kernels to the original graph nodes, and derived metrics."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pytest

from aaco_pipelines.analysis.attribution.mapping import can_fuse, map_runtime_nodes, original_nodes
from aaco_pipelines.analysis.metrics.derived import (
    KernelStream,
    busy_time_per_iteration,
    table_metrics,
)
from aaco_pipelines.graph.extract import extract_graph
from aaco_pipelines.registry.sidecar import InputSpec
from tests import models
from tests.helpers import KERNELS_SCHEMA, engine_query, exact_mapping, no_graph_nodes


def _mapping(tmp_path, model: onnx.ModelProto, input_shape: tuple[int, ...]):
    """Extract the original graph and let ONNX Runtime optimize it, as a session would."""
    path = models.save(model, tmp_path / "model.onnx")
    graph = extract_graph(
        path, {model.graph.input[0].name: InputSpec(shape=input_shape, dtype="float32")}
    )
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(str(tmp_path / "optimized.onnx"))
    mapping = map_runtime_nodes(original_nodes(graph.nodes), optimized.graph).to_pylist()
    return mapping, optimized


def _groups(mapping) -> dict[str, set[str]]:
    groups = collections.defaultdict(set)
    for row in mapping:
        if row["runtime_node"] and row["onnx_node"]:
            groups[row["runtime_node"]].add(row["onnx_node"])
    return groups


def _shares_per_runtime_node(mapping) -> dict[str, float]:
    totals = collections.defaultdict(float)
    for row in mapping:
        if row["runtime_node"]:
            totals[row["runtime_node"]] += row["share"]
    return totals


def test_fused_gemm_covers_matmul_bias_and_relu_split_by_flops(tmp_path):
    mapping, optimized = _mapping(tmp_path, models.tiny_mlp(), (4, 16))
    assert any(n.op_type == "FusedGemm" for n in optimized.graph.node)
    groups = _groups(mapping)
    fused = next(name for name, members in groups.items() if "fc1/matmul" in members)
    assert groups[fused] == {"fc1/matmul", "fc1/bias", "fc1/relu"}
    rows = {r["onnx_node"]: r for r in mapping if r["runtime_node"] == fused}
    assert rows["fc1/matmul"]["split_rule"] == "flop_share"
    # FLOPs: matmul 2*4*16*32 = 4096, bias add 128, relu 128.
    assert rows["fc1/matmul"]["share"] == pytest.approx(4096 / (4096 + 128 + 128))
    assert all(v == pytest.approx(1.0) for v in _shares_per_runtime_node(mapping).values())
    assert {r["method"] for r in mapping} <= {"exact_name", "fused_anchor", "fused_absorbed"}


def test_conv_bn_relu_and_residual_fusions_map_back_and_layout_nodes_are_reported(tmp_path):
    mapping, optimized = _mapping(tmp_path, models.conv_block_model(), (1, 3, 32, 32))
    groups = _groups(mapping)
    owner = {member: runtime for runtime, members in groups.items() for member in members}
    assert owner["conv1"] == owner["bn1"] == owner["relu1"]
    assert owner["conv2"] == owner["bn2"]
    assert owner["residual_add"] == owner["relu2"] == owner["conv2"]  # folded into the Conv
    assert owner["pool"] != owner["conv2"] and owner["global_pool"] != owner["relu2"]
    # Every original node is accounted for. Layout nodes the runtime inserted are reported under
    # their own names, as helpers of the NCHWc node they convert for: with its originals and
    # shares, at confidence 0.5.
    assert {r["onnx_node"] for r in mapping if r["onnx_node"]} == {
        n.name for n in models.conv_block_model().graph.node
    }
    helpers = [r for r in mapping if r["method"] == "inserted_helper"]
    runtime_only = {n.name for n in optimized.graph.node if n.op_type.startswith("Reorder")}
    assert runtime_only and {r["runtime_node"] for r in helpers} == runtime_only
    assert all(r["confidence"] == 0.5 for r in helpers)
    for helper in runtime_only:
        node = next(n for n in optimized.graph.node if n.name == helper)
        neighbours = {
            n.name
            for n in optimized.graph.node
            if set(n.output) & set(node.input) or set(n.input) & set(node.output)
        }
        served = {
            runtime
            for runtime in neighbours
            if groups[runtime] and runtime.endswith("_nchwc") and groups[runtime] == groups[helper]
        }
        assert len(served) == 1, (helper, neighbours)
        (served_node,) = served
        helper_shares = {r["onnx_node"]: r["share"] for r in helpers if r["runtime_node"] == helper}
        served_shares = {
            r["onnx_node"]: r["share"] for r in mapping if r["runtime_node"] == served_node
        }
        assert helper_shares == pytest.approx(served_shares)
    assert not [r for r in mapping if r["method"] == "runtime_inserted"]


def test_erf_gelu_folds_into_one_gelu_and_bias_into_the_gemm(tmp_path):
    mapping, optimized = _mapping(tmp_path, models.gelu_model(), (8, 64))
    groups = _groups(mapping)
    gelu = next(n.name for n in optimized.graph.node if n.op_type in ("Gelu", "BiasGelu"))
    gemm = next(
        n.name for n in optimized.graph.node if n.op_type in ("Gemm", "FusedGemm", "MatMul")
    )
    gelu_nodes = {"gelu/div", "gelu/erf", "gelu/add", "gelu/mul", "gelu/half"}
    assert groups[gelu] | groups[gemm] == {"up/matmul", "up/bias", *gelu_nodes}
    assert gelu_nodes <= groups[gelu] and "up/matmul" in groups[gemm]


def test_fusion_table_refuses_impossible_owners():
    assert can_fuse("Conv", "Relu") and can_fuse("Conv", "BatchNormalization")
    assert not can_fuse("GlobalAveragePool", "Relu") and not can_fuse("MaxPool", "Conv")
    assert can_fuse("MGXKernel_graph_0", "Softmax")  # an opaque compiled partition


def test_union_of_intervals_counts_overlap_once_per_iteration():
    iteration = np.array([0, 0, 0, 1, 1])
    start = np.array([0, 5, 20, 100, 100], dtype=float)
    duration = np.array([10, 10, 5, 30, 10], dtype=float)  # [0,15] ∪ [20,25]; [100,130]
    assert busy_time_per_iteration(iteration, start, duration, 2).tolist() == [20.0, 30.0]


def _partitions(providers: list) -> int:
    """Maximal runs of one provider, counted one by one (the reference for the metrics)."""
    return len(providers) and 1 + sum(
        a != b for a, b in zip(providers[:-1], providers[1:], strict=True)
    )


def test_partitions_are_runs_of_one_provider_in_execution_order():
    """Listed out of order, the kernels run CPU, CPU, ROCM, ROCM, CPU: three partitions over five
    graph nodes; no kernels, none."""
    kernels = pa.table(
        {
            "iteration": [0] * 5,
            "start_ns": [40, 20, 0, 30, 10],
            "duration_ns": [5] * 5,
            "provider": ["CPU", "ROCM", "CPU", "ROCM", "CPU"],  # 5 runs in this order
        }
    )
    runs = pa.table({"iteration": [0], "start_ns": [0], "duration_ns": [100]})
    assert table_metrics(kernels, runs, 5)["partition_fragmentation_index"] == pytest.approx(3 / 5)
    assert _partitions(["CPU", "CPU", "ROCM", "ROCM", "CPU"]) == 3
    none = table_metrics(kernels.slice(0, 0), runs, 5)
    assert none["partition_fragmentation_index"] == 0 and none["busy_ns_per_iteration"] == 0


def test_derived_metrics_definitions():
    kernels = pa.table(
        {
            "iteration": [0, 0, 1, 1],
            "start_ns": [100, 150, 1100, 1150],
            "duration_ns": [40, 15_000, 40, 20],
            "provider": ["CPUExecutionProvider"] * 4,
        }
    )
    runs = pa.table({"iteration": [0, 1], "start_ns": [100, 1100], "duration_ns": [20_000, 100]})
    m = table_metrics(kernels, runs, onnx_node_count=4)
    # iteration 0: [100,140] ∪ [150,15150]; iteration 1: [1100,1140] ∪ [1150,1170], even though
    # iteration 0's long kernel reaches past iteration 1's start: no merging across iterations.
    busy = np.array([40 + 15_000, 40 + 20])
    assert m["busy_ns_per_iteration"] == pytest.approx(busy.mean())
    assert m["launch_tax"] == pytest.approx(np.mean(1 - busy / np.array([20_000, 100])))
    assert m["device_active_ratio"] == pytest.approx(1 - m["launch_tax"])
    assert m["kernel_amplification_ratio"] == pytest.approx(2 / 4)
    assert m["partition_fragmentation_index"] == pytest.approx(1 / 4)
    assert m["microkernel_share"] == pytest.approx(3 / 4)
    assert m["max_busy_over_wall"] == pytest.approx(15_040 / 20_000)


def test_union_of_intervals_is_exact_for_unsorted_kernels_and_huge_spans():
    """Against a brute-force union: kernels out of start order, iterations interleaved in time,
    and iterations so far apart that one window per iteration would overflow int64."""
    rng = np.random.default_rng(1)
    for spread in (300, 1 << 61):
        for _ in range(100):
            n = int(rng.integers(1, 40))
            iteration = rng.integers(0, 4, n)
            start = rng.integers(0, 1000, n) + iteration * spread
            duration = rng.integers(0, 100, n)
            expected = np.zeros(4)
            for k in range(4):
                covered = set()
                for i in np.flatnonzero(iteration == k):
                    covered |= set(range(int(start[i]), int(start[i] + duration[i])))
                expected[k] = len(covered)
            got = busy_time_per_iteration(iteration, start, duration, 4)
            assert got[:4].tolist() == expected.tolist()


def _brute_union(iteration, start, duration, n_iterations: int) -> list[int]:
    covered = [set() for _ in range(n_iterations)]
    for k, s, d in zip(iteration, start, duration, strict=True):
        covered[k] |= set(range(int(s), int(s + d)))
    return [len(c) for c in covered]


def test_union_streamed_a_few_kernels_at_a_time_is_exact():
    """Batches within one iteration (a device trace's, and most batches of a profile) take the
    short path: a segment left open by one batch must go on into the next, be closed by a gap
    at the next batch's first kernel, or end where the iteration changes."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        iteration = np.sort(rng.integers(0, 3, n))
        start = rng.integers(0, 1000, n)
        duration = rng.integers(0, int(rng.choice([5, 60, 400])), n)
        order = np.lexsort((start, iteration))
        iteration, start, end = iteration[order], start[order], (start + duration)[order]
        stream, cut = KernelStream(), 0
        while cut < n:
            step = int(rng.integers(1, 8))
            part = slice(cut, cut + step)
            stream.add(iteration[part], start[part], end[part], np.zeros(len(start[part])))
            cut += step
        expected = _brute_union(iteration, start, end - start, 3)
        assert stream.busy_per_iteration(3).tolist() == expected


def test_metrics_streamed_in_batches_of_any_size_equal_the_whole():
    """A session's kernels reach the metrics a batch at a time: a busy segment open at a batch's
    end, an iteration split across batches and the first iteration's partitions carry over."""
    rng = np.random.default_rng(7)
    n = 500
    iteration = np.sort(rng.integers(0, 5, n))
    kernels = pa.table(
        {
            "iteration": iteration.astype(np.int32),
            "start_ns": iteration * 10_000 + rng.integers(0, 9_000, n),
            "duration_ns": rng.integers(0, 400, n),
            "provider": rng.choice(["CPUExecutionProvider", "ROCMExecutionProvider", None], n),
        }
    )
    runs = pa.table({"iteration": range(5), "start_ns": [0] * 5, "duration_ns": [10_000] * 5})
    whole = table_metrics(kernels, runs, onnx_node_count=7)
    busy = busy_time_per_iteration(
        iteration, kernels["start_ns"].to_numpy(), kernels["duration_ns"].to_numpy(), 5
    )
    assert whole["busy_ns_per_iteration"] == pytest.approx(busy.mean())
    first = kernels.filter(pa.compute.equal(kernels["iteration"], 0)).sort_by("start_ns")
    assert whole["partition_fragmentation_index"] == pytest.approx(
        _partitions(first["provider"].to_pylist()) / 7
    )
    for rows in (1, 2, 3, 64):
        assert table_metrics(kernels, runs, 7, batch_rows=rows) == pytest.approx(whole)


def test_one_preempted_iteration_reorders_no_share_or_ranking():
    """Three nodes over 10 profiled iterations; the smallest is preempted once (80x its time, a
    busy host). Shares and ranking come from per-iteration medians, so it stays last; the
    mean-based share, kept beside, shows what the mean would have said (it comes first). The
    bootstrap over the iterations rarely draws the preempted one into a median: the top node
    stays first in nearly every resample."""
    from aaco_pipelines.analysis.attribution.session import time_breakdown

    times = {"a": 100, "b": 80, "c": 60}
    rows = [
        {"iteration": i, "node_name": n, "kernel_name": n, "kernel_family": None,
         "duration_ns": t * (80 if (n, i) == ("c", 3) else 1)}
        for i in range(10) for n, t in times.items()
    ]  # fmt: skip
    kernels = pa.Table.from_pylist(rows, schema=KERNELS_SCHEMA)
    query = engine_query(graph_nodes=no_graph_nodes())
    breakdown, _, stability = time_breakdown(query, "s", "m", kernels, exact_mapping(times))
    nodes = [r for r in breakdown.to_pylist() if r["level"] == "node"]
    assert [r["name"] for r in nodes] == ["a", "b", "c"]  # by median, as measured
    assert [r["share"] for r in nodes] == pytest.approx([100 / 240, 80 / 240, 60 / 240])
    mean_first = max(nodes, key=lambda r: r["mean_share"])
    assert mean_first["name"] == "c"  # what a mean-based table would have put on top
    assert nodes[0]["p_top"] == stability.top_op_stability > 0.99
    assert stability.top3_stability == 1.0  # three nodes: always the same three

"""`aaco ingest`: traces collected elsewhere become sessions that flow through the analysis."""

from __future__ import annotations

import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.runner import device_tracer, measuring_plan
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.stages.pipeline import analyze_session
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED, simulated_gpu_trace

SAMPLES = SHARED / "samples" / "profilers"


@pytest.mark.parametrize(
    ("sample", "kernels", "source"),
    [
        ("sllm_r9700_decode_attn_564735_kernel_trace.csv", 319, "rocprofv3_csv"),
        ("hpctraining_mi250_laplacian_rocprofv1_results.csv", 1004, "rocprof_v1"),
        ("tracelens_mi350x_pytorch_train_908_results.json.gz", 43915, "rocprofv3_json"),
        ("rocmProfileData_vllm_fp8_mytrace.rpd.gz", 8948, "rpd"),
    ],
)
def test_sample_traces_ingest_and_flow_through_analysis(aaco_paths, sample, kernels, source):
    bundle = ingest_trace(SAMPLES / sample, aaco_paths, name="external")
    lake = TraceLake(aaco_paths.tracelake)
    counts = load_session(lake, bundle)
    assert counts["kernel_events"] == kernels + 1  # + the span standing for the one iteration
    assert (bundle.path / "raw" / sample).is_file()  # the raw evidence is kept as it came
    families = lake.query(
        "SELECT count(*) FILTER (WHERE kernel_family IS NULL) AS missing, "
        "count(DISTINCT kernel_family) AS n FROM kernel_events_with_family "
        "WHERE session_id = ? AND category = 'Kernel'",
        [bundle.session_id],
    ).to_pylist()[0]
    assert families["missing"] == 0 and families["n"] >= 1
    summary = analyze_session(bundle, aaco_paths)
    # From what the trace holds: never cpu-bound (it has no host evidence), never advice about
    # the host that measured it (none here did), nor ONNX Runtime options for a PyTorch trace.
    assert summary["bottleneck"] in ("launch-bound", "memory-bound", "compute-bound", "balanced")
    assert summary["decided"] or "holds no host evidence" in summary["undecided_reason"]
    [advice] = lake.query(
        "SELECT recommendations_json FROM bottleneck_reports WHERE session_id = ?",
        [bundle.session_id],
    )["recommendations_json"].to_pylist()
    for word in ("laboratory", "competing host work", "intra-op threads", "ORT_ENABLE_ALL"):
        assert word not in advice, (word, advice)
    breakdown = lake.query(
        "SELECT sum(share) AS total FROM op_breakdown WHERE session_id = ? AND level = 'op_type'",
        [bundle.session_id],
    )["total"][0].as_py()
    assert breakdown == pytest.approx(1.0)  # every kernel's time is accounted for
    sessions = lake.query("SELECT trace_source, measured_iterations FROM sessions").to_pylist()
    assert sessions == [{"trace_source": source, "measured_iterations": 1}]


def test_bad_traces_are_refused_and_leave_nothing(aaco_paths, tmp_path):
    broken = tmp_path / "1234_kernel_trace.csv"
    broken.write_text("not,a,kernel,trace\n1,2,3,4\n")
    for path in (tmp_path / "missing", broken):
        with pytest.raises(AacoInputError) as err:
            ingest_trace(path, aaco_paths)
        assert str(path) in str(err.value)
    staging = aaco_paths.sessions / ".staging"
    assert not staging.exists() or not any(staging.iterdir())
    assert not list(aaco_paths.sessions.glob("2*/*"))


def test_the_profiled_pass_runs_under_rocprofv3_only_when_it_can(tmp_path):
    plain = measuring_plan(tmp_path / "request.json", None, tmp_path / "rocprof")
    assert [c.passes for c in plain] == ["all"]
    traced = measuring_plan(
        tmp_path / "request.json", "/opt/rocm/bin/rocprofv3", tmp_path / "rocprof"
    )
    assert [c.passes for c in traced] == ["measured", "profiled"]
    command = traced[1].command
    assert command[0] == "/opt/rocm/bin/rocprofv3"
    for flag in ("--kernel-trace", "--hip-runtime-trace", "--memory-copy-trace"):
        assert flag in command
    assert command[command.index("--output-format") + 1] == "csv"
    assert command[command.index("--") + 1 :][-2:] == [str(tmp_path / "request.json"), "profiled"]
    assert "rocprofv3" not in traced[0].command[0]
    tool, reason = device_tracer()  # this host: no rocprofv3, no GPU
    assert tool is None and "ONNX Runtime's profiler" in reason


def test_a_device_trace_with_its_onnx_runtime_profile_is_attributed_to_onnx_nodes(
    aaco_paths, tmp_path
):
    """A rocprofv3 trace simulated from a real ONNX Runtime profile, ingested with the profile
    and the model as a user would bring them from a GPU node: the kernels go through the launch
    chain to runtime nodes, and through the fusion mapping to the model's ONNX nodes."""
    model, trace_dir = simulated_gpu_trace(tmp_path, runs=20)

    bundle = ingest_trace(trace_dir, aaco_paths, model=model)
    lake = TraceLake(aaco_paths.tracelake)
    load_session(lake, bundle)
    analyze_session(bundle, aaco_paths)
    rows = lake.query(
        "SELECT name, share, p50_ns FROM op_breakdown WHERE session_id = ? AND level = 'node'",
        [bundle.session_id],
    ).to_pylist()
    nodes = {r["name"]: r["share"] for r in rows}
    helpers = set(
        lake.query(
            "SELECT runtime_node FROM node_attribution WHERE session_id = ? "
            "AND method = 'inserted_helper'",
            [bundle.session_id],
        )["runtime_node"].to_pylist()
    )
    # Runtime-only nodes (ReorderOutput) are reported as helpers of the NCHWc node they convert
    # for, and their kernels go with its time; kernels the launch chain failed to place are the
    # error, and stay under 5% of the time.
    lost = {name: share for name, share in nodes.items() if name.startswith("(unmatched)")}
    assert sum(lost.values()) < 0.05, lost
    assert any(name.startswith("Reorder") for name in helpers), helpers
    # The convolutions' runtime nodes hold the share of the time after attribution that they
    # held in the profile the trace came from (recorded on this host now: on a busy one a 2 µs
    # pool takes 5 µs, so no fixed share is the truth). Judged on per-iteration medians: one
    # preempted iteration can give a 5 µs node most of the sum.
    p50 = {r["name"]: r["p50_ns"] for r in rows}
    mapping = lake.query(
        "SELECT DISTINCT runtime_node, onnx_node FROM node_attribution WHERE session_id = ?",
        [bundle.session_id],
    ).to_pylist()
    conv_runtime = {m["runtime_node"] for m in mapping if m["onnx_node"] in ("conv1", "conv2")}
    fused = {m["onnx_node"] for m in mapping if m["runtime_node"] in conv_runtime}
    source = _runtime_node_medians(trace_dir / "onnxruntime_profile_run.json")
    expected = sum(source[n] for n in conv_runtime) / sum(source.values())
    attributed = sum(p50.get(n, 0.0) for n in fused) / sum(p50.values())
    # Within 0.2: the shares are sums of per-node medians on each side, and on a busy host the
    # sum of the fused nodes' medians and the median of their kernel's time part by up to 0.16
    # (CI, 2026-12-08); a convolution time attributed elsewhere moves it by half or more.
    assert abs(attributed - expected) < 0.2, (attributed, expected, p50, source)
    assert {"conv1", "bn1", "relu1", "conv2", "residual_add"} <= set(nodes)


def _runtime_node_medians(profile) -> dict[str, float]:
    """Each runtime node's median time per run in an ONNX Runtime profile."""
    import numpy as np
    import pyarrow.compute as pc

    from aaco_pipelines.collectors.ort_profile import read_ort_profile

    events = read_ort_profile(profile, "source", 0)
    nodes = events.filter(pc.equal(events["category"], "Node"))
    durations: dict[str, list[int]] = {}
    for row in nodes.select(["node_name", "duration_ns"]).to_pylist():
        durations.setdefault(row["node_name"], []).append(row["duration_ns"])
    return {name: float(np.median(values)) for name, values in durations.items()}

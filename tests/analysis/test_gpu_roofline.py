"""An ingested GPU trace is judged against its GPU (measured, else datasheet, else none), never
against the host that ingests it; every node sits under the roof of its own data type."""

from __future__ import annotations

import csv
import json
import shutil

import duckdb
import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco_pipelines.analysis.bottleneck.roofline import dtype_roofline
from aaco_pipelines.analysis.envelope import choice as envelope_choice
from aaco_pipelines.analysis.envelope import measure as envelope_module
from aaco_pipelines.analysis.envelope.datasheets import (
    DATASHEETS,
    GpuAgent,
    agent_arch,
    gfx_name,
    kernel_dtype,
    local_gpu,
    match_datasheet,
    node_dtype,
)
from aaco_pipelines.analysis.envelope.record import (
    HardwareEnvelope,
    ResourcePeak,
    datasheet_envelope,
)
from aaco_pipelines.cli import main
from aaco_pipelines.report.content import render_json
from aaco_pipelines.report.html import render_html
from aaco_pipelines.report.markdown_report import render_markdown
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.stages.pipeline import analyze_session
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SHARED, as_one_kernel_events_table, stamp_schema_version

SAMPLES = SHARED / "samples" / "profilers"
SLLM = "sllm_r9700_decode_attn_564735"  # rocprofv3 CSV; its kernels ran on Agent 2, a gfx1201
MI350X_JSON = SAMPLES / "tracelens_mi350x_pytorch_train_908_results.json.gz"  # gfx950 agents
ROCPROF_V1 = SAMPLES / "hpctraining_mi250_laplacian_rocprofv1_results.csv"  # no agent info
TERA = 1e12


@pytest.fixture
def no_host_envelope(monkeypatch):
    """Measuring this host's envelope is a failure: an ingested trace must never need it."""

    def refuse(*args, **kwargs):
        raise AssertionError("an ingested GPU trace measured this host's envelope")

    monkeypatch.setattr(envelope_choice, "measure_envelope", refuse)
    monkeypatch.setattr(envelope_module, "measure_envelope", refuse)


def sllm_trace(tmp_path, arch: str | None = None):
    """The real rocprofv3 CSV run (kernel trace, counters, agent info) as one trace folder;
    `arch` renames its gfx1201 agent (the GPU its kernels ran on)."""
    folder = tmp_path / "sllm"
    folder.mkdir()
    for kind in ("kernel_trace", "counter_collection", "agent_info"):
        shutil.copy(SAMPLES / f"{SLLM}_{kind}.csv", folder / f"{SLLM}_{kind}.csv")
    if arch is not None:
        agents = folder / f"{SLLM}_agent_info.csv"
        with open(agents, newline="", encoding="utf-8") as handle:
            header, *rows = list(csv.reader(handle))
        name = header.index("Name")
        for row in rows:
            row[name] = arch if row[name] == "gfx1201" else row[name]
        with open(agents, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle, quoting=csv.QUOTE_NONNUMERIC).writerows([header, *rows])
    return folder


def ingest_and_analyze(trace, paths, **kwargs):
    bundle = ingest_trace(trace, paths, complete=False, **kwargs)
    summary = analyze_session(bundle, paths)
    return bundle.session_id, summary, TraceLake(paths.tracelake)


def one(lake: TraceLake, sql: str, sid: str) -> dict:
    return lake.query(sql, {"sid": sid}).to_pylist()[0]


# --- datasheets -------------------------------------------------------------------------------


def test_datasheet_peaks_reproduce_the_published_figures():
    sheets = {sheet.product: sheet for sheet in DATASHEETS}
    mi300x = sheets["AMD Instinct MI300X"]
    # FIELD_NOTES: MI300X matrix FP16/BF16 1307.4 TFLOP/s dense, vector FP32 163.4, HBM3 5.3 TB/s
    assert mi300x.peak("fp16") / TERA == pytest.approx(1307.4, abs=0.05)
    assert mi300x.peak("bf16") / TERA == pytest.approx(1307.4, abs=0.05)
    assert mi300x.peak("fp32_vector") / TERA == pytest.approx(163.4, abs=0.05)
    assert mi300x.peak("fp8") / TERA == pytest.approx(2614.9, abs=0.05)
    assert mi300x.memory_bandwidth_bytes_per_s == 5.3 * TERA
    assert sheets["AMD Instinct MI250X"].peak("fp16") / TERA == pytest.approx(383.0, abs=0.05)
    assert sheets["AMD Instinct MI250X"].peak("fp64") / TERA == pytest.approx(95.7, abs=0.05)
    assert sheets["AMD Instinct MI355X"].peak("fp8") / TERA == pytest.approx(5033.2, abs=0.05)
    assert sheets["AMD Instinct MI350X"].peak("fp16") / TERA == pytest.approx(2306.9, abs=0.05)
    assert sheets["AMD Instinct MI250X"].peak("fp8") is None  # CDNA 2 has no fp8
    for sheet in DATASHEETS:
        assert sheet.url.startswith("https://www.amd.com/") and sheet.peak("fp32")


def test_agents_are_matched_by_arch_name_and_cus_with_partitions_scaled():
    assert [gfx_name(v) for v in (90402, 90010, 100300, 120001, 90500)] == [
        "gfx942", "gfx90a", "gfx1030", "gfx1201", "gfx950",
    ]  # fmt: skip
    assert agent_arch("gfx90a:sramecc+:xnack-") == "gfx90a"
    assert agent_arch(None, '{"gfx_target_version": 90402}') == "gfx942"
    gcd = match_datasheet(GpuAgent("gfx90a", "AMD Instinct MI250X/MI250", 110, 1700.0))
    assert gcd.sheet.product == "AMD Instinct MI250X" and gcd.compute_scale == 0.5
    cpx = datasheet_envelope(GpuAgent("gfx942", "AMD Instinct MI300X", 38, 2100.0))
    assert cpx.gemm_peaks()["fp16"] / TERA == pytest.approx(1307.4 / 8, abs=0.05)
    assert cpx.bandwidth.peak == pytest.approx(5.3 * TERA / 8)
    assert match_datasheet(GpuAgent("gfx1151", "AMD Radeon 8060S", 40)) is None


def test_kernel_names_from_the_sample_traces_tell_their_data_type():
    names = {  # real kernel names of the MI350X, vLLM-fp8 and R9700 sample traces
        "Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1": "bf16",
        "Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x32x256_MI16x16x1_SN": "fp8",
        "_ZN4vllm25scaled_act_and_mul_kernelIN3c104HalfETnPFT_RKS3_EXadL_ZNS_11silu": "fp16",
        "void wvSpltK_hf_sml_<64, 4, 16, 8, 1, 4>(int, int, __half const*": "fp16",
        "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16": "bf16",
        "ullm_paged_decode_attn_f32_kernel": "fp32",
        "__amd_rocclr_copyBuffer": None,  # no type in the name: the fp32 roof
        "laplacian_kernel": None,
    }
    assert {name: kernel_dtype(name) for name in names} == names
    assert node_dtype("MatMul", ["float16"]) == "fp16"
    assert node_dtype("MatMulInteger", ["int32"]) == "int8"
    assert node_dtype("Conv", ["float32"], ["QLinearConv"]) == "int8"  # a QDQ Conv run as int8
    assert node_dtype("Shape", ["int64"]) is None


def test_each_node_sits_under_the_roof_of_its_data_type():
    mi300x = datasheet_envelope(GpuAgent("gfx942", "AMD Instinct MI300X", 304, 2100.0))
    nodes = pa.table(
        {
            "onnx_node": ["gemm_fp16", "gemm_fp32", "gemm_fp8_on_cdna2", "copy"],
            "op_type": ["MatMul", "MatMul", "MatMul", "Copy"],
            "flops": pa.array([2 * 8192**3, 2 * 8192**3, 2 * 8192**3, None], pa.int64()),
            "bytes_moved": pa.array([3 * 2 * 8192**2] * 3 + [1 << 20], pa.int64()),
            "time_ns": [1e6, 8e6, 1e6, 1e3],
            "dtype": ["fp16", "fp32", "fp8", None],
        }
    )
    rows = dtype_roofline(nodes, mi300x).to_pylist()
    assert [r["roof_dtype"] for r in rows] == ["fp16", "fp32", "fp8", "fp32"]
    assert rows[0]["roof_flops_per_s"] == pytest.approx(1307.4 * TERA, abs=0.05 * TERA)  # not 163.4
    assert rows[0]["utilization"] == pytest.approx(2 * 8192**3 / 1e-3 / (1307.4 * TERA), 1e-3)
    assert rows[1]["roof_flops_per_s"] == pytest.approx(163.4 * TERA, abs=0.05 * TERA)
    mi250x = datasheet_envelope(GpuAgent("gfx90a", "AMD Instinct MI250X", 220, 1700.0))
    fp8 = dtype_roofline(nodes, mi250x).to_pylist()[2]
    assert fp8["roof_dtype"] == "fp32"  # no fp8 peak on CDNA 2: the fp32 roof, and it says so
    unjudged = dtype_roofline(nodes, None).to_pylist()
    assert all(r["roof_flops_per_s"] is None and r["bound"] is None for r in unjudged)
    assert unjudged[0]["arithmetic_intensity"] == pytest.approx(8192 / 3)


# --- ingested traces ----------------------------------------------------------------------------


def test_an_ingested_trace_gets_its_gpus_datasheet_and_never_this_hosts_envelope(
    aaco_paths, tmp_path, no_host_envelope
):
    sid, summary, lake = ingest_and_analyze(sllm_trace(tmp_path), aaco_paths)
    assert summary["envelope_source"] == "datasheet"
    report = one(lake, "SELECT * FROM bottleneck_reports WHERE session_id = $sid", sid)
    assert report["envelope_source"] == "datasheet"
    assert "AMD Radeon AI PRO R9700" in report["envelope_note"]
    envelopes = lake.query("SELECT * FROM hardware_envelopes").to_pylist()
    assert len(envelopes) == 1  # no envelope of this host was measured or stored
    stored = envelopes[0]
    assert stored["envelope_id"] == report["envelope_id"]
    assert (stored["source"], stored["device_arch"], stored["compute_units"]) == (
        "datasheet", "gfx1201", 64,
    )  # fmt: skip
    reference = json.loads(stored["reference"])
    assert reference["product"] == "AMD Radeon AI PRO R9700"
    assert reference["url"].endswith("amd-radeon-ai-pro-r9700.html")
    peaks = json.loads(stored["gemm_peaks_json"])
    assert peaks["fp16"] == pytest.approx(191.4 * TERA, rel=1e-3)
    assert stored["bandwidth_bytes_per_s"] == 640e9
    points = lake.query(
        "SELECT onnx_node, dtype, roof_dtype, envelope_id FROM roofline_points "
        "WHERE session_id = $sid",
        {"sid": sid},
    ).to_pylist()
    assert {p["envelope_id"] for p in points} == {stored["envelope_id"]}
    kernel = next(p for p in points if "ullm_paged_decode_attn_f32_kernel" in p["onnx_node"])
    assert (kernel["dtype"], kernel["roof_dtype"]) == ("fp32", "fp32")  # from the kernel name
    # every report names the envelope a datasheet, with its source
    markdown = render_markdown(lake, sid)
    assert "DATASHEET envelope" in markdown and reference["url"] in markdown
    content = render_json(lake, sid)
    assert content["roofline"]["envelope_source"] == "datasheet"
    assert content["roofline"]["envelope"]["reference"]["product"] == "AMD Radeon AI PRO R9700"
    gpus = content["environment"]["gpu_agents"]
    assert {g["name"] for g in gpus} == {"gfx1030", "gfx1201"}


def test_aaco_ingest_of_an_mi350x_trace_uses_the_mi350x_datasheet(
    aaco_paths, no_host_envelope, capsys
):
    assert main(["ingest", str(MI350X_JSON)]) == 0
    printed = capsys.readouterr()
    assert "bottleneck:" in printed.out
    # the stages of a long ingest, in order, on stderr
    stages = [line.split("s  ", 1)[1] for line in printed.err.splitlines() if "s  " in line]
    assert [s.split()[0] for s in stages] == [
        "copying", "loading", *["analysing:"] * 4, "publishing:", "done"
    ]  # fmt: skip
    assert [s.split(":")[1].split()[0] for s in stages[2:6]] == [
        "attribution", "critical", "bottleneck", "drift"
    ]  # fmt: skip
    assert "rocprofv3_json trace" in stages[0] and " MB)" in stages[0]
    lake = TraceLake(aaco_paths.tracelake)
    rows = lake.query(
        "SELECT e.source, e.device_arch, e.device_name, e.reference, b.envelope_source "
        "FROM bottleneck_reports b JOIN hardware_envelopes e USING (envelope_id)"
    ).to_pylist()
    assert len(rows) == 1 and rows[0]["source"] == rows[0]["envelope_source"] == "datasheet"
    assert (rows[0]["device_arch"], rows[0]["device_name"]) == ("gfx950", "AMD Instinct MI350X")
    reference = json.loads(rows[0]["reference"])
    assert reference["product"] == "AMD Instinct MI350X" and reference["matched_by"].startswith(
        "product name"
    )
    assert lake.query("SELECT count(*) AS n FROM hardware_envelopes")["n"][0].as_py() == 1


def measured_gpu(arch: str, cus: int, name: str, fp32_tflops: float) -> HardwareEnvelope:
    def peak(resource, value, unit):
        return ResourcePeak(resource, value, value * 0.98, value * 1.01, unit, [])

    return HardwareEnvelope(
        target="gpu0",
        providers=["MIGraphXExecutionProvider"],
        runtime_fingerprint="f" * 64,
        measured_at_ns=1_700_000_000_000_000_000,
        gemm=peak("gemm_flops", fp32_tflops * TERA, "FLOP/s"),
        bandwidth=peak("memory_bandwidth", 500e9, "B/s"),
        device={"arch": arch, "product_name": name, "compute_units": cus, "max_clock_mhz": 2350},
        dtype_gemm={"fp16": peak("gemm_flops", 4 * fp32_tflops * TERA, "FLOP/s")},
    )


def test_an_envelope_measured_on_that_gpu_model_wins_over_the_datasheet(
    aaco_paths, tmp_path, no_host_envelope
):
    lake = TraceLake(aaco_paths.tracelake)
    mine = envelope_choice.save_envelope(
        lake, measured_gpu("gfx1201", 64, "AMD Radeon Graphics", 40.0)
    )
    envelope_choice.save_envelope(lake, measured_gpu("gfx942", 304, "AMD Instinct MI300X", 150.0))
    envelope_choice.save_envelope(lake, measured_gpu("gfx1201", 32, "AMD Radeon Graphics", 20.0))
    sid, summary, lake = ingest_and_analyze(sllm_trace(tmp_path), aaco_paths)
    assert summary["envelope_source"] == "measured"
    report = one(lake, "SELECT * FROM bottleneck_reports WHERE session_id = $sid", sid)
    assert report["envelope_id"] == mine and report["envelope_source"] == "measured"
    assert "measured on this GPU model" in report["envelope_note"]
    assert lake.query("SELECT count(*) AS n FROM hardware_envelopes")["n"][0].as_py() == 3
    assert "Measured envelope" in render_markdown(lake, sid)


def test_an_unknown_gpu_gets_no_envelope_and_a_plain_note(aaco_paths, tmp_path, no_host_envelope):
    sid, summary, lake = ingest_and_analyze(sllm_trace(tmp_path, arch="gfx1151"), aaco_paths)
    assert summary["envelope_source"] == "none"
    assert summary["hardware_envelope_utilization"] is None
    report = one(lake, "SELECT * FROM bottleneck_reports WHERE session_id = $sid", sid)
    assert report["envelope_id"] is None and report["envelope_source"] == "none"
    note = report["envelope_note"]
    assert note.startswith("No hardware envelope: gfx1151") and "not judged" in note
    evidence = {item["signal"]: item["value"] for item in json.loads(report["evidence_json"])}
    assert evidence["compute_utilization"] is None and evidence["memory_utilization"] is None
    points = lake.query(
        "SELECT roof_flops_per_s, bound, utilization FROM roofline_points WHERE session_id = $sid",
        {"sid": sid},
    ).to_pylist()
    assert points and all(set(p.values()) == {None} for p in points)  # no roofline verdicts
    assert lake.query("SELECT count(*) AS n FROM hardware_envelopes")["n"][0].as_py() == 0
    markdown = render_markdown(lake, sid)
    assert note in markdown and "Ops by time (not judged)" in markdown


def test_a_trace_without_agent_info_says_it_names_no_gpu(aaco_paths, no_host_envelope):
    sid, summary, lake = ingest_and_analyze(ROCPROF_V1, aaco_paths)
    assert summary["envelope_source"] == "none"
    assert "names no GPU" in summary["envelope_note"]
    assert "this host, which only ingested the trace, is not the GPU" in summary["envelope_note"]


def fp16_gemm_model(n: int = 256):
    weights = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((n, n)).astype(np.float16), "w"
    )
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="gemm_fp16"),
            helper.make_node("Relu", ["h"], ["y"], name="relu_fp16"),
        ],
        "fp16_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [n, n])],
        [weights],
    )
    return helper.make_model(graph, opset_imports=models.OPSET, ir_version=9)


def test_an_fp16_gemm_node_is_judged_against_the_fp16_peak(aaco_paths, tmp_path, no_host_envelope):
    """A rocprofv3 trace simulated from a real ONNX Runtime profile of an fp16 MatMul, with the
    real agent info of the R9700 run, ingested with the model: the MatMul node is an fp16 node
    under the gfx1201's fp16 roof. Under the fp32 roof its intensity (n/3 = 85 FLOP/B) would be
    past the ridge (75) and call it compute-bound; under the fp16 one (ridge 299) it is not."""
    from aaco_pipelines.collectors.ort_profile import read_ort_profile
    from benchmarks.trace_simulator import simulate_rocprof_traces

    model = models.save(fp16_gemm_model(), tmp_path / "fp16_gemm.onnx")
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "prof")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    start_ns = session.get_profiling_start_time_ns()
    for _ in range(10):
        session.run(None, {"x": np.ones((256, 256), np.float16)})
    profile = tmp_path / session.end_profiling()
    trace = tmp_path / "from_gpu_node"
    simulate_rocprof_traces(read_ort_profile(profile, "sim", start_ns), trace)  # Agent 2
    shutil.copy(profile, trace / "onnxruntime_profile_run.json")
    shutil.copy(SAMPLES / f"{SLLM}_agent_info.csv", trace / "4242_agent_info.csv")

    sid, summary, lake = ingest_and_analyze(trace, aaco_paths, model=model)
    assert summary["envelope_source"] == "datasheet"
    points = {
        p["onnx_node"]: p
        for p in lake.query(
            "SELECT * FROM roofline_points WHERE session_id = $sid", {"sid": sid}
        ).to_pylist()
    }
    gemm = points["gemm_fp16"]
    assert (gemm["dtype"], gemm["roof_dtype"]) == ("fp16", "fp16")
    peaks = json.loads(
        one(lake, "SELECT gemm_peaks_json FROM hardware_envelopes WHERE envelope_id = "
            "(SELECT envelope_id FROM bottleneck_reports WHERE session_id = $sid)", sid)
        ["gemm_peaks_json"]
    )  # fmt: skip
    bandwidth = 640e9
    intensity = gemm["arithmetic_intensity"]
    assert intensity == pytest.approx(256 / 3)
    assert intensity > peaks["fp32"] / bandwidth  # past the fp32 ridge ...
    assert gemm["roof_flops_per_s"] == pytest.approx(min(peaks["fp16"], intensity * bandwidth))
    assert gemm["bound"] == "memory"  # ... but under the fp16 roof's ridge
    assert gemm["utilization"] == pytest.approx(gemm["achieved_bytes_per_s"] / bandwidth)
    html = render_html(lake, sid)
    assert "roofline of the datasheet envelope (not measured: published peaks)" in html


def test_a_gpu_host_names_its_gpu_from_the_kfd_topology(tmp_path):
    """A measured GPU envelope is keyed by the GPU it ran on: KFD's node properties, here
    those rocprofv3 recorded for the R9700 run's agents (CPU node 0, GPU nodes 1-3)."""
    with open(SAMPLES / f"{SLLM}_agent_info.csv", newline="", encoding="utf-8") as handle:
        agents = list(csv.DictReader(handle))
    for agent in agents:
        node = tmp_path / "nodes" / agent["Node_Id"]
        node.mkdir(parents=True)
        keys = ("Simd_Count", "Simd_Per_Cu", "Gfx_Target_Version", "Max_Engine_Clk_Fcompute")
        node.joinpath("properties").write_text(
            "".join(f"{key.lower()} {agent[key]}\n" for key in keys)
        )
    gpus = [local_gpu(index, tmp_path / "nodes") for index in range(3)]
    assert [(g.arch, g.compute_units, g.max_clock_mhz) for g in gpus] == [
        ("gfx1030", 72, 2570.0), ("gfx1201", 64, 2350.0), ("gfx1030", 72, 2570.0),
    ]  # fmt: skip
    assert local_gpu(3, tmp_path / "nodes") is None
    assert local_gpu(0, tmp_path / "no-kfd") is None  # this host: no GPU


# --- sessions measured here, and the schema -----------------------------------------------------


def test_a_cpu_session_keeps_this_hosts_measured_envelope(aaco_paths, fast_options, monkeypatch):
    from aaco_pipelines.registry.scan import registered_model
    from aaco_pipelines.stages.pipeline import measure_model

    monkeypatch.setattr(
        envelope_choice,
        "measure_envelope",
        lambda target, providers, **kw: envelope_module.measure_envelope(
            target, providers, budget_s=2.0, repeats=2
        ),
    )
    path = models.save(models.tiny_mlp(), aaco_paths.registry / "tiny.onnx")
    bundle = measure_model(registered_model(path), aaco_paths, fast_options, analyze=True)
    lake = TraceLake(aaco_paths.tracelake)
    report = one(
        lake, "SELECT * FROM bottleneck_reports WHERE session_id = $sid", bundle.session_id
    )
    assert report["envelope_source"] == "measured" and report["hardware_envelope_utilization"]
    stored = one(
        lake, "SELECT * FROM hardware_envelopes WHERE envelope_id = $sid", report["envelope_id"]
    )
    assert stored["source"] == "measured" and stored["device_arch"] is None  # this CPU
    envelope = HardwareEnvelope.from_dict(json.loads(stored["envelope_json"]))
    assert "fp32" in envelope.gemm_peaks() and envelope.providers == ["CPUExecutionProvider"]
    # ONNX Runtime's CPU provider runs an fp16 MatMul in fp32 between Casts: not measured as
    # fp16, and said why; its fp16 nodes fall back to the fp32 roof
    assert "fp16" not in envelope.dtype_gemm and "Cast" in envelope.dtype_notes["fp16"]
    roofs = set(
        lake.query(
            "SELECT roof_dtype FROM roofline_points WHERE session_id = $sid",
            {"sid": bundle.session_id},
        )["roof_dtype"].to_pylist()
    )
    assert roofs == {"fp32"}


def test_a_v7_lake_migrates_its_envelopes_as_measured(tmp_path):
    lake = TraceLake(tmp_path / "v7.duckdb")
    envelope_id = envelope_choice.save_envelope(lake, measured_gpu("gfx942", 304, "MI300X", 150.0))
    with duckdb.connect(str(lake.path)) as con:  # back to v7's shape
        as_one_kernel_events_table(con)
        for table, column in (
            ("hardware_envelopes", "source"),
            ("hardware_envelopes", "device_arch"),
            ("hardware_envelopes", "device_name"),
            ("hardware_envelopes", "compute_units"),
            ("hardware_envelopes", "gemm_peaks_json"),
            ("hardware_envelopes", "reference"),
            ("roofline_points", "dtype"),
            ("roofline_points", "roof_dtype"),
            ("bottleneck_reports", "envelope_source"),
            ("bottleneck_reports", "envelope_note"),
        ):
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        stamp_schema_version(con, 7)
    with lake.connect(write=True):
        pass  # the next write migrates
    assert lake.schema_version() == SCHEMA_VERSION
    row = lake.query("SELECT envelope_id, source FROM hardware_envelopes").to_pylist()
    assert row == [{"envelope_id": envelope_id, "source": "measured"}]
    assert envelope_choice.latest_envelope(lake, "gpu0") is not None  # still found as measured


def test_a_model_onnx_runtime_cannot_load_is_one_error_naming_the_users_file(tmp_path):
    """`aaco ingest --model`: ONNX Runtime derives the optimized graph in a child process (it
    loads the weights, which the aaco process never does); its failure names the user's model,
    not the snapshot, and leaves no session."""
    import onnx

    from aaco_pipelines.config import AacoPaths
    from aaco_pipelines.errors import AacoInputError

    paths = AacoPaths(home=tmp_path / "aaco", registry=tmp_path / "reg", tracelake=tmp_path / "l")
    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"], name="custom", domain="example.custom")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = tmp_path / "custom_op.onnx"
    onnx.save_model(
        helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)],
            ir_version=9,
        ),
        model,
    )
    with pytest.raises(AacoInputError, match="could not load the model") as error:
        ingest_trace(sllm_trace(tmp_path), paths, model=model)
    assert str(model) in str(error.value) and "models/" not in str(error.value)
    assert not list((paths.home / "sessions").glob("2*/*"))

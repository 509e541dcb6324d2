"""Each GPU kernel judged: occupancy and counted work against its roofs, a class with evidence,
the counted roofline per node beside the cost model's, and the findings as recommendations."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from aaco_pipelines.analysis.attribution.session import kernel_places
from aaco_pipelines.analysis.envelope.datasheets import GpuAgent
from aaco_pipelines.analysis.envelope.record import datasheet_envelope
from aaco_pipelines.analysis.kernels.diagnosis import diagnose_kernels
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.gpu_counters import formulas_for
from aaco_pipelines.report.content import render_json
from aaco_pipelines.report.markdown_report import render_markdown
from aaco_pipelines.stages.pipeline import ingest_and_analyze
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED

SLLM = SHARED / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_"
MI300X = GpuAgent(arch="gfx942", product_name="AMD Instinct MI300X", compute_units=304)
BIG_GRID = 1_048_576  # 16,384 waves of 64: more than MI300X's 304 x 4 x 8 = 9,728 slots


def test_a_real_gfx1201_trace_names_its_grid_starved_kernel_first(tmp_path):
    """The sLLM decode-attention run (gfx1201, 64 CUs): its main kernel runs 10,240 work-items
    in workgroups of 256 = 40 workgroups x 8 waves = 320 waves, and the GPU holds 64 CUs x 2
    SIMDs x 16 waves = 2048: 320 / 2048 = 15.6 % of the slots, so it is under-occupied for want
    of work, not for its registers; its counters (all zero on this RDNA run) judge nothing."""
    folder = tmp_path / "564735"
    folder.mkdir()
    for kind in ("kernel_trace", "counter_collection", "agent_info"):
        shutil.copy(f"{SLLM}{kind}.csv", folder / f"564735_{kind}.csv")
    paths = AacoPaths.from_env({"AACO_HOME": str(tmp_path / "aaco")})
    paths.registry.mkdir(parents=True)
    session = ingest_and_analyze(folder, paths, name="sllm")[0].session_id
    lake = TraceLake(paths.tracelake)
    rows = lake.query(
        "SELECT * FROM kernel_diagnoses WHERE session_id = $sid ORDER BY total_ns DESC",
        {"sid": session},
    ).to_pylist()
    total = lake.query(
        "SELECT sum(duration_ns) AS ns FROM kernel_events WHERE session_id = $sid "
        "AND kernel_name = 'ullm_paged_decode_attn_f32_kernel'",
        {"sid": session},
    ).to_pylist()[0]["ns"]
    first = rows[0]
    assert first["kernel_name"] == "ullm_paged_decode_attn_f32_kernel"
    (place,) = lake.query(  # stored by the attribution, read back by the diagnosis
        "SELECT * FROM kernel_places WHERE session_id = $sid AND kernel_name = $k",
        {"sid": session, "k": first["kernel_name"]},
    ).to_pylist()
    assert (place["dispatches"], place["ns"], place["node_name"]) == (106, total, None)
    assert first["total_ns"] == total and first["dispatches"] == 106
    assert (first["limiter"], first["kernel_class"]) == ("grid", "under_occupied")
    assert first["grid_fill"] == pytest.approx(320 / 2048)
    assert "16% of its 2048 wave slots" in first["finding"]
    partial = next(r for r in rows if r["kernel_name"].endswith("split_partial_f32_kernel"))
    assert partial["kernel_class"] == "not_judged" and partial["flops_per_s"] is None
    assert "not judged without counters" in partial["finding"]
    (report,) = lake.query(
        "SELECT recommendations_json FROM bottleneck_reports WHERE session_id = $sid",
        {"sid": session},
    ).to_pylist()
    last = json.loads(report["recommendations_json"])[-1]
    assert last["action"].startswith("give each dispatch more work")
    assert last["why"] == first["finding"]
    # the report, as JSON and Markdown, says the same
    content = render_json(lake, session)["kernels"]
    assert content["diagnoses"][0]["kernel_class"] == "under_occupied"
    assert content["counter_roofline"] == []  # no FLOPs or bytes counted on this RDNA run
    markdown = render_markdown(lake, session)
    assert "## Kernels: occupancy, counters, class" in markdown
    assert first["finding"] in markdown


# --- counted kernels on an MI300X (gfx942), built here ---------------------------------------

KERNELS = {  # name: (node, ns per dispatch, VGPRs, grid work-items, counters per dispatch)
    "gemm_f16": ("/mlp/MatMul", 1_000_000, 128, BIG_GRID,
                 {"SQ_INSTS_VALU_MFMA_MOPS_F16": 2e9, "TCC_EA0_RDREQ": 1e6, "TCC_BUBBLE": 1e6}),
    "copy": ("/Add", 100_000, 32, BIG_GRID,
             {"TCC_EA0_RDREQ": 2e6, "TCC_BUBBLE": 2e6,
              "TCC_EA0_WRREQ": 1e6, "TCC_EA0_WRREQ_64B": 1e6,
              "TCP_TCC_READ_REQ": 4e6, "TCP_TCC_WRITE_REQ": 1e6}),
    "small": ("/Softmax", 50_000, 32, BIG_GRID,
              {"TCC_EA0_RDREQ": 1e4, "TCC_BUBBLE": 1e4, "TCP_TCC_READ_REQ": 1e5,
               "SQ_LDS_IDX_ACTIVE": 3e7, "SQ_LDS_BANK_CONFLICT": 1e6}),
    "branchy": ("/Where", 40_000, 32, BIG_GRID,
                {"SQ_THREAD_CYCLES_VALU": 1.6e6, "SQ_ACTIVE_INST_VALU": 1e5,
                 "TCP_TCC_READ_REQ": 1.5e7}),
    "tiny_grid": ("/Gather", 20_000, 32, 256, None),
    "vgpr_hog": ("/Conv", 30_000, 512, BIG_GRID, None),
    "plain": ("/Relu", 10_000, 64, BIG_GRID, None),
}  # fmt: skip


@pytest.fixture
def counted_lake(tmp_path) -> TraceLake:
    """Two profiled iterations, one dispatch of each kernel per iteration, every gfx942 counter
    the formulas name collected for the counted ones (zero where not given)."""
    lake = TraceLake(tmp_path / "lake.duckdb")
    every = {c for f in formulas_for("gfx942").formulas for c in f.counters}
    dispatch = 0
    with lake.connect(write=True) as con:
        con.execute(
            "INSERT INTO agents (session_id, agent_id, agent_type, name, compute_units) "
            "VALUES ('s1', 'Agent 1', 'GPU', 'gfx942', 304)"
        )
        con.execute("INSERT INTO session_records (session_id, model_sha256) VALUES ('s1', 'm')")
        for name, (node, ns, vgprs, grid, counters) in KERNELS.items():
            for iteration in (0, 1):
                dispatch += 1
                con.execute(
                    "INSERT INTO kernel_events_profile (session_id, category, iteration, "
                    "event_name, node_name, kernel_name, start_ns, duration_ns, device_id, "
                    "dispatch_id, grid_size, workgroup_size, lds_bytes, scratch_bytes, "
                    "vgpr_count, accum_vgpr_count, sgpr_count) VALUES "
                    "('s1', 'Kernel', ?, ?, ?, ?, ?, ?, 1, ?, ?, 256, 0, 0, ?, 0, 32)",
                    [iteration, name, node, name, dispatch * 10**7, ns, dispatch, grid, vgprs],
                )
                for counter in sorted(every) if counters is not None else ():
                    con.execute(
                        "INSERT INTO counters (session_id, dispatch_id, kernel_name, agent, "
                        "counter, value) VALUES ('s1', ?, ?, 'Agent 1', ?, ?)",
                        [dispatch, name, counter, counters.get(counter, 0.0)],
                    )
        # the cost model: the MatMul said to do a quarter of the FLOPs the hardware counted
        con.execute(
            "INSERT INTO graph_nodes (model_sha256, node_name, op_type, flops, bytes_moved) "
            "VALUES ('m', '/mlp/MatMul', 'MatMul', 256000000000, 1000000), "
            "('m', '/Add', 'Add', 0, 320000000)"
        )
        con.execute(
            "INSERT INTO node_attribution (session_id, runtime_node, onnx_node, share) VALUES "
            "('s1', '/mlp/MatMul', '/mlp/MatMul', 1.0), ('s1', '/Add', '/Add', 1.0)"
        )
    lake.append_rows("kernel_places", kernel_places(lake, "s1"))  # as the attribution stores it
    return lake


def test_each_kernel_is_judged_against_its_roofs_and_occupancy(counted_lake):
    envelope = datasheet_envelope(MI300X)
    fp16, bandwidth = envelope.gemm_peaks()["fp16"], envelope.bandwidth.peak
    assert (fp16, bandwidth) == (pytest.approx(1307.4e12, rel=1e-4), pytest.approx(5.3e12))
    kernels = {
        row["kernel_name"]: row
        for row in diagnose_kernels(counted_lake, "s1", envelope).kernels.to_pylist()
    }
    gemm = kernels["gemm_f16"]
    # 512 x 2e9 MOPS = 1.024e12 FLOPs in 1 ms = 1.024e15 FLOP/s: 78 % of 1307.4 TFLOP/s
    assert gemm["dtype"] == "fp16" and gemm["flops_per_s"] == pytest.approx(1.024e15)
    assert gemm["compute_utilization"] == pytest.approx(1.024e15 / fp16)
    assert gemm["kernel_class"] == "compute_throughput_limited"
    assert "78% of the fp16 peak counted" in gemm["finding"]
    copy = kernels["copy"]
    # reads 64 x (2e6 + 2e6) = 2.56e8 B, writes 32 x (1e6 + 1e6) = 6.4e7 B, in 0.1 ms:
    # 3.2e12 B/s, 60 % of 5.3 TB/s
    assert copy["bytes_per_s"] == pytest.approx(3.2e12)
    assert copy["kernel_class"] == "memory_bandwidth_bound"
    small = kernels["small"]
    # 128 x 1e4 B in 50 us = 2.56e10 B/s: 0.5 % of the bandwidth, 8 of 8 waves: it waits
    assert small["bandwidth_utilization"] == pytest.approx(2.56e10 / 5.3e12)
    assert (small["occupancy"], small["kernel_class"]) == (1.0, "latency_bound")
    # 1.6e6 thread-cycles over 1e5 VALU cycles x 64 lanes: a quarter of the lanes busy
    branchy = kernels["branchy"]
    assert branchy["valu_thread_utilization"] == pytest.approx(0.25)
    assert branchy["kernel_class"] == "divergence_limited"
    assert "kept 25% of a wave's lanes busy" in branchy["finding"]
    # one workgroup of 4 waves on 9,728 slots; 512 VGPRs leave 1 of 8 waves
    assert (kernels["tiny_grid"]["limiter"], kernels["tiny_grid"]["kernel_class"]) == (
        "grid",
        "under_occupied",
    )
    hog = kernels["vgpr_hog"]
    assert (hog["limiter"], hog["occupancy"], hog["kernel_class"]) == (
        "vgpr",
        1 / 8,
        "under_occupied",
    )
    assert "limited by VGPRs to 1 of 8 waves" in hog["finding"]
    assert kernels["plain"]["kernel_class"] == "not_judged"  # nothing limits it we can see
    assert all(row["node_name"] == KERNELS[name][0] for name, row in kernels.items())


def test_the_counted_roofline_per_node_says_where_the_cost_model_disagrees(counted_lake):
    nodes = {
        row["node_name"]: row
        for row in diagnose_kernels(
            counted_lake, "s1", datasheet_envelope(MI300X)
        ).nodes.to_pylist()
    }
    assert set(nodes) == {"/mlp/MatMul", "/Add", "/Softmax", "/Where"}  # the counted ones
    matmul = nodes["/mlp/MatMul"]
    # per iteration: 1.024e12 FLOPs and 128 x 1e6 = 1.28e8 B in 1 ms; intensity 8000 FLOP/B is
    # far right of the ridge (2048 x 304 x 2.1 GHz = 1307.4e12 / 5.3e12 = 247): compute-bound at 78 % of its roof
    assert matmul["counted_flops"] == pytest.approx(1.024e12)
    assert matmul["arithmetic_intensity"] == pytest.approx(8000)
    assert (matmul["bound"], matmul["utilization"]) == ("compute", pytest.approx(0.7832, abs=1e-4))
    assert matmul["flops_ratio"] == pytest.approx(4.0)  # 1.024e12 counted / 2.56e11 modelled
    assert "4.0x the cost model's FLOPs" in matmul["disagreement"]
    add = nodes["/Add"]
    assert add["bound"] == "memory" and add["flops_ratio"] is None  # the model says 0 FLOPs
    assert add["disagreement"] is None


def test_mi300x_datasheet_ceilings_for_l2_and_lds_and_none_where_unpublished():
    levels = datasheet_envelope(MI300X).cache_bandwidth
    # L2: 128 B/clock x 128 channels (16 per XCD x 8) x 2.1 GHz = 34.41 TB/s
    assert levels["L2"].peak == pytest.approx(128 * 128 * 2.1e9)
    # LDS: 128 B/clock/CU x 304 CUs x 2.1 GHz = 81.72 TB/s
    assert levels["LDS"].peak == pytest.approx(128 * 304 * 2.1e9)
    # one XCD of it (CPX partition, 38 CUs): an eighth of each
    xcd = datasheet_envelope(GpuAgent(arch="gfx942", product_name="MI300X", compute_units=38))
    assert xcd.cache_bandwidth["L2"].peak == pytest.approx(128 * 16 * 2.1e9)
    assert xcd.cache_bandwidth["LDS"].peak == pytest.approx(128 * 38 * 2.1e9)
    # published peaks have no capacity: the cost-model roofline's ceilings stay DRAM only
    assert [level for level, _, _ in datasheet_envelope(MI300X).memory_ceilings()] == ["DRAM"]
    # RDNA: no published L2 or LDS bandwidth, so no ceiling (never a guess)
    r9700 = GpuAgent(arch="gfx1201", product_name="AMD Radeon AI PRO R9700", compute_units=64)
    assert datasheet_envelope(r9700).cache_bandwidth == {}


def test_the_counted_roofline_is_hierarchical_and_names_the_binding_level(counted_lake):
    envelope = datasheet_envelope(MI300X)
    l2_roof, lds_roof = 128 * 128 * 2.1e9, 128 * 304 * 2.1e9  # 3.44064e13, 8.17152e13 B/s
    nodes = {
        row["node_name"]: row
        for row in diagnose_kernels(counted_lake, "s1", envelope).nodes.to_pylist()
    }
    add = nodes["/Add"]  # one 100 us dispatch per iteration
    # HBM: 3.2e8 B / 1e-4 s = 3.2e12 B/s, 60.4 % of 5.3 TB/s
    assert add["hbm_share"] == pytest.approx(3.2e12 / 5.3e12)
    # L2: 64 x (4e6 read + 1e6 write requests) = 3.2e8 B -> 3.2e12 B/s, 9.3 % of 34.4 TB/s
    assert add["counted_l2_bytes"] == pytest.approx(3.2e8)
    assert add["achieved_l2_bytes_per_s"] == pytest.approx(3.2e12)
    assert add["roof_l2_bytes_per_s"] == pytest.approx(l2_roof)
    assert add["l2_share"] == pytest.approx(3.2e12 / l2_roof)
    assert add["counted_lds_bytes"] == 0 and add["lds_share"] == 0
    assert add["binding_level"] == "HBM"
    softmax = nodes["/Softmax"]  # one 50 us dispatch per iteration
    # LDS: (3e7 active - 1e6 conflict cycles) x 4 B x 32 banks = 3.712e9 B -> 7.424e13 B/s,
    # 90.9 % of 81.7 TB/s; HBM 128 x 1e4 = 1.28e6 B -> 2.56e10 B/s (0.5 %); L2 64 x 1e5 =
    # 6.4e6 B -> 1.28e11 B/s (0.4 %): the LDS binds
    assert softmax["counted_lds_bytes"] == pytest.approx(3.712e9)
    assert softmax["achieved_lds_bytes_per_s"] == pytest.approx(7.424e13)
    assert softmax["lds_share"] == pytest.approx(7.424e13 / lds_roof)
    assert softmax["hbm_share"] == pytest.approx(2.56e10 / 5.3e12)
    assert softmax["l2_share"] == pytest.approx(1.28e11 / l2_roof)
    assert softmax["binding_level"] == "LDS"
    where = nodes["/Where"]  # one 40 us dispatch: L2 64 x 1.5e7 = 9.6e8 B -> 2.4e13 B/s (69.8 %)
    assert where["l2_share"] == pytest.approx(2.4e13 / l2_roof)
    assert where["binding_level"] == "L2"
    matmul = nodes["/mlp/MatMul"]  # 1.024e12 FLOPs per iteration over 0 L2 and LDS bytes
    assert matmul["l2_intensity"] is None and matmul["lds_intensity"] is None
    assert matmul["binding_level"] == "HBM"
    # Without published L2 and LDS peaks their shares are null, never guessed: HBM binds alone
    bare = dataclasses.replace(envelope, cache_bandwidth={})
    where = {
        row["node_name"]: row
        for row in diagnose_kernels(counted_lake, "s1", bare).nodes.to_pylist()
    }["/Where"]
    assert where["counted_l2_bytes"] == pytest.approx(9.6e8)
    assert where["roof_l2_bytes_per_s"] is None and where["l2_share"] is None
    assert where["binding_level"] == "HBM"


def test_a_session_without_device_kernels_has_no_kernel_rows(tmp_path):
    lake = TraceLake(tmp_path / "lake.duckdb")
    with lake.connect(write=True) as con:
        con.execute(
            "INSERT INTO kernel_events_profile (session_id, category, iteration, node_name, "
            "start_ns, duration_ns) VALUES ('s1', 'Node', 0, '/MatMul', 0, 1000)"
        )
    result = diagnose_kernels(lake, "s1", None)
    assert result.kernels.num_rows == 0 and result.nodes.num_rows == 0

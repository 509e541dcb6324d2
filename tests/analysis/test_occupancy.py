"""Occupancy of every kernel from the resources its trace row carries: AMD's and LLVM's published
rules row by row, one real kernel per architecture worked by hand, and what stays unknown."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from aaco_pipelines.analysis.kernels.occupancy import RULES, describe, kernel_occupancy
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION, schema_ddl
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED, stamp_schema_version

SAMPLES = SHARED / "samples" / "profilers"
SLLM = "sllm_r9700_decode_attn_564735"  # rocprofv3 CSV: its kernels ran on Agent 2, a gfx1201
MI350X_JSON = SAMPLES / "tracelens_mi350x_pytorch_train_908_results.json.gz"  # gfx950 agents
ROCPROF_V1 = SAMPLES / "hpctraining_mi250_laplacian_rocprofv1_results.csv"  # MI250, no agents

KERNEL_COLUMNS = (
    "kernel_name", "device_id", "workgroup_size", "grid_size", "lds_bytes", "scratch_bytes",
    "vgpr_count", "accum_vgpr_count", "sgpr_count", "duration_ns",
)  # fmt: skip


def synthetic(gfx: str, kernels: list[dict], compute_units: int = 100) -> dict[str, dict]:
    """kernel_occupancy of kernels on one GPU (Agent 1) of an in-memory lake, by kernel name.
    A kernel row gives what it sets; the rest is a one-wave workgroup, no LDS, few SGPRs."""
    con = duckdb.connect()
    for statement in schema_ddl():
        con.execute(statement)
    con.execute(
        "INSERT INTO agents (session_id, agent_id, agent_type, name, compute_units) "
        "VALUES ('s', 'Agent 1', 'GPU', ?, ?)",
        [gfx, compute_units],
    )
    wave = RULES[gfx].wave_size if gfx in RULES else 64
    defaults = dict(
        device_id=1, workgroup_size=wave, grid_size=wave * 10**6, lds_bytes=0, scratch_bytes=0,
        vgpr_count=8, accum_vgpr_count=0, sgpr_count=16, duration_ns=1000,
    )  # fmt: skip
    for kernel in kernels:
        row = {**defaults, **kernel}
        con.execute(
            f"INSERT INTO kernel_events_trace (session_id, {', '.join(KERNEL_COLUMNS)}) "
            f"VALUES ('s', {', '.join('?' * len(KERNEL_COLUMNS))})",
            [row[c] for c in KERNEL_COLUMNS],
        )
    return {row["kernel_name"]: row for row in kernel_occupancy(con, "s").to_pylist()}


def waves_by_vgprs(gfx: str, table: list[tuple[int, int]]) -> dict[int, int]:
    """Achievable waves per SIMD of a kernel limited by nothing but its VGPR count."""
    rows = synthetic(gfx, [{"kernel_name": f"v{n}", "vgpr_count": n} for n, _ in table])
    return {n: rows[f"v{n}"]["achievable_waves"] for n, _ in table}


# --- (a) the published rules, row by row ------------------------------------------------------

# AMD lab notes, "Register pressure in AMD CDNA2 GPUs", Table 1 "Occupancy related to VGPRs usage
# in MI200" (amd/amd-lab-notes@d0cc1529 register-pressure/img/occupancy_vgpr.JPG): <= 64 VGPRs
# 8 waves per EU, <= 72 7, <= 80 6, <= 96 5, <= 128 4, <= 168 3, <= 256 2, > 256 1; each
# breakpoint and the count just past it.
CDNA2_TABLE = [
    (64, 8), (65, 7), (72, 7), (73, 6), (80, 6), (81, 5), (96, 5), (97, 4), (128, 4), (129, 3),
    (168, 3), (169, 2), (256, 2), (257, 1), (512, 1),
]  # fmt: skip
# LLVM's own expectations, llvm/test/CodeGen/AMDGPU/occupancy-levels.ll (a kernel clobbering
# v0..v(N-1) uses N VGPRs; "; Occupancy:" is what llc prints): the GFX1100W32 lines (gfx1100,
# gfx1101, gfx1151 and gfx1200 run with that prefix: RDNA3/4 with 1536 wave32 VGPRs) ...
RDNA3_WAVE32_TABLE = [
    (24, 16), (28, 16), (32, 16), (36, 16), (40, 16), (44, 16), (48, 16), (56, 16), (64, 16),
    (72, 16), (80, 16), (84, 16), (88, 16), (96, 16), (100, 12), (112, 12), (128, 10),
    (144, 10), (168, 9), (200, 7), (256, 5),
]  # fmt: skip
# ... the GFX1030W32 lines (gfx1030, gfx1102, gfx1150: 1024 wave32 VGPRs) ...
RDNA2_WAVE32_TABLE = [
    (32, 16), (36, 16), (64, 16), (72, 12), (80, 12), (84, 10), (88, 10), (96, 10), (100, 9),
    (112, 9), (128, 8), (144, 7), (168, 5), (200, 4), (256, 4),
]  # fmt: skip
# ... and the GFX9 lines (gfx900: 256 VGPRs, 10 waves, as gfx908's architectural file).
GFX9_TABLE = [
    (24, 10), (28, 9), (32, 8), (36, 7), (40, 6), (44, 5), (48, 5), (56, 4), (64, 4), (72, 3),
    (80, 3), (84, 3), (88, 2), (96, 2), (128, 2), (144, 1), (256, 1),
]  # fmt: skip


@pytest.mark.parametrize(
    ("gfx", "table"),
    [
        ("gfx90a", CDNA2_TABLE),
        ("gfx942", CDNA2_TABLE),  # CDNA3: the same unified 512-VGPR file and 8 waves
        ("gfx1100", RDNA3_WAVE32_TABLE),
        ("gfx1200", RDNA3_WAVE32_TABLE),
        ("gfx1201", RDNA3_WAVE32_TABLE),
        ("gfx1030", RDNA2_WAVE32_TABLE),
        ("gfx1102", RDNA2_WAVE32_TABLE),
        ("gfx908", GFX9_TABLE),
    ],
)
def test_vgpr_occupancy_follows_the_published_tables(gfx, table):
    assert waves_by_vgprs(gfx, table) == dict(table)


def test_gfx9_sgpr_occupancy_follows_llvm_and_rdna_sgprs_never_limit():
    # occupancy-levels.ll, used_N_sgprs, GFX9: 80 -> 10, 88 -> 9, 100 -> 8, 101 -> 7;
    # GFX1030 / GFX1100: 16 whatever the SGPRs.
    table = [(80, 10), (88, 9), (100, 8), (101, 7)]
    rows = synthetic("gfx908", [{"kernel_name": f"s{n}", "sgpr_count": n} for n, _ in table])
    assert {n: rows[f"s{n}"]["sgpr_waves"] for n, _ in table} == dict(table)
    assert rows["s101"]["limiter"] == "sgpr"
    rdna = synthetic("gfx1201", [{"kernel_name": "k", "sgpr_count": 128}])["k"]
    assert (rdna["sgpr_waves"], rdna["limiter"]) == (16, "none")


def test_agprs_share_the_file_on_cdna2_and_have_their_own_on_gfx908():
    kernels = [
        {"kernel_name": "mfma", "vgpr_count": 68, "accum_vgpr_count": 124},
        {"kernel_name": "valu", "vgpr_count": 128, "accum_vgpr_count": 64},
    ]
    unified = synthetic("gfx90a", kernels)
    # gfx90a: align(68, 4) + 124 = 192 (a multiple of 8, as rocprofiler-sdk's split of the
    # allocation always is); 512 // 192 = 2 waves
    assert (unified["mfma"]["vgprs_counted"], unified["mfma"]["vgpr_waves"]) == (192, 2)
    assert unified["mfma"]["agpr_waves"] is None
    separate = synthetic("gfx908", kernels)
    # gfx908: AGPRs in their own 256 file: 124 -> 256 // 124 = 2 waves; VGPRs 256 // 68 = 3
    assert (separate["mfma"]["vgpr_waves"], separate["mfma"]["agpr_waves"]) == (3, 2)
    assert separate["mfma"]["limiter"] == "agpr"
    # 128 VGPRs: 256 // 128 = 2; 64 AGPRs: 4 -> VGPRs limit
    assert (separate["valu"]["achievable_waves"], separate["valu"]["limiter"]) == (2, "vgpr")
    assert describe(separate["mfma"]) == (
        "occupancy limited by AGPRs to 2 of 10 waves per SIMD (124 AGPRs)"
    )


def test_lds_and_workgroup_slots_limit_by_the_block_a_workgroup_shares():
    rows = synthetic(
        "gfx942",
        [
            # 20000 B -> 20480 (512 B blocks); 65536 // 20480 = 3 workgroups x 4 waves / 4 SIMDs
            {"kernel_name": "lds", "workgroup_size": 256, "lds_bytes": 20000},
            # 1024 work-items = 16 waves; min(8 x 4 // 16, 16) = 2 workgroups = 32 / 4 = 8
            {"kernel_name": "big", "workgroup_size": 1024},
            # 128 work-items = 2 waves: min(32 // 2, 16) = 16 workgroups = 32 waves = 8 per SIMD
            {"kernel_name": "pairs", "workgroup_size": 128},
        ],
    )
    assert (rows["lds"]["lds_waves"], rows["lds"]["achievable_waves"]) == (3, 3)
    assert rows["lds"]["limiter"] == "lds"
    assert describe(rows["lds"]) == (
        "occupancy limited by LDS to 3 of 8 waves per SIMD (20000 bytes per workgroup)"
    )
    assert (rows["big"]["workgroups_waves"], rows["big"]["limiter"]) == (8, "none")
    assert rows["pairs"]["workgroups_waves"] == 8
    # gfx1201 (WGP mode): 64 work-items = 2 waves: min(16 x 4 // 2, 32) = 32 workgroups = 64 / 4
    # = 16; 40000 B of LDS -> 40960 (1 KiB blocks): 131072 // 40960 = 3 x 2 waves / 4 -> 2
    wgp = synthetic("gfx1201", [{"kernel_name": "k", "workgroup_size": 64, "lds_bytes": 40000}])
    assert (wgp["k"]["workgroups_waves"], wgp["k"]["lds_waves"]) == (16, 2)


# --- (b) one real kernel per architecture, by hand --------------------------------------------


def ingested(trace, paths, name: str) -> tuple[TraceLake, str]:
    bundle = ingest_trace(trace, paths, name=name)
    return TraceLake(paths.tracelake), bundle.session_id


def occupancy_rows(lake: TraceLake, sid: str) -> list[dict]:
    with lake.connect() as con:
        return kernel_occupancy(con, sid).to_pylist()


def test_a_gfx1201_decode_attention_kernel_by_hand(aaco_paths, tmp_path):
    folder = tmp_path / "sllm"
    folder.mkdir()
    for kind in ("kernel_trace", "agent_info"):
        shutil.copy(SAMPLES / f"{SLLM}_{kind}.csv", folder / f"{SLLM}_{kind}.csv")
    lake, sid = ingested(folder, aaco_paths, "sllm")
    rows = {r["kernel_name"]: r for r in occupancy_rows(lake, sid)}
    assert len(rows) == 4 and {r["gfx"] for r in rows.values()} == {"gfx1201"}
    attention = rows["ullm_paged_decode_attn_f32_kernel"]
    # Its rows: VGPR_Count 32, SGPR_Count 128, LDS_Block_Size 1024, workgroup 256, grid 10240,
    # 106 dispatches. gfx1201: wave32, 1536 VGPRs in granules of 24, 16 waves, WGP of 4 SIMDs.
    #   waves per workgroup  256 / 32 = 8
    #   vgpr                 32 -> 48; 1536 // 48 = 32 -> 16 (the maximum)
    #   lds                  1024 B; 131072 // 1024 = 128 workgroups x 8 / 4 = 256 -> 16
    #   workgroups           min(16 x 4 // 8, 32) = 8 x 8 / 4 = 16
    #   grid                 10240 / 256 = 40 workgroups x 8 = 320 waves; the GPU's slots
    #                        64 CUs x 2 SIMDs x 16 = 2048: 320 / 2048 = 15.625 %
    assert {k: attention[k] for k in (
        "dispatches", "waves_per_workgroup", "vgpr_waves", "sgpr_waves", "lds_waves",
        "workgroups_waves", "achievable_waves", "max_waves", "occupancy", "wave_slots",
        "grid_waves", "grid_fill", "limiter", "reason",
    )} == {
        "dispatches": 106, "waves_per_workgroup": 8, "vgpr_waves": 16, "sgpr_waves": 16,
        "lds_waves": 16, "workgroups_waves": 16, "achievable_waves": 16, "max_waves": 16,
        "occupancy": 1.0, "wave_slots": 2048, "grid_waves": 320, "grid_fill": 0.15625,
        "limiter": "grid", "reason": None,
    }  # fmt: skip
    assert describe(attention) == (
        "grid too small to fill the GPU: 16% of its 2048 wave slots "
        "(16 of 16 waves per SIMD possible)"
    )
    # The split kernel's grid, 92160 / 256 = 360 workgroups x 8 = 2880 waves, fills them.
    split = rows["ullm_paged_decode_attn_split_partial_f32_kernel"]
    assert (split["grid_waves"], split["grid_fill"], split["limiter"]) == (2880, 1.0, "none")


def test_a_gfx950_gemm_by_hand_with_its_halved_vgpr_counts(aaco_paths):
    lake, sid = ingested(MI350X_JSON, aaco_paths, "mi350x")
    rows = occupancy_rows(lake, sid)
    assert {r["gfx"] for r in rows} == {"gfx950"} and not any(r["reason"] for r in rows)
    # Every symbol of this trace says accum_vgpr_count 0 and some an arch_vgpr_count of 12 or
    # 92: with no AGPRs, not the multiple of 8 a unified allocation is, so rocprofiler-sdk
    # decoded gfx950 descriptors as gfx9 ones, (granules + 1) x 4, half the allocation.
    assert all(r["caveat"] and "doubled" in r["caveat"] for r in rows)
    gemm = [
        r for r in rows
        if r["kernel_name"].startswith("Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256")
    ]  # fmt: skip
    assert gemm and sum(r["dispatches"] for r in gemm) == 1250
    # Its symbol: arch_vgpr_count 128, accum 0, sgpr_count 96; dispatches: workgroup 256, LDS
    # (group segment) 52224 B, grid 49152 work-items. gfx950: 512 unified VGPRs, 8 waves,
    # 160 KiB LDS in 1280 B blocks, 256 CUs of 4 SIMDs (its agent info).
    #   vgprs counted        2 x 128 = 256; 512 // 256 = 2 waves
    #   sgpr                 96 <= 100 -> 8
    #   lds                  52224 -> 41 x 1280 = 52480; 163840 // 52480 = 3 workgroups
    #                        x 4 waves / 4 SIMDs = 3
    #   workgroups           min(8 x 4 // 4, 16) = 8 x 4 / 4 = 8
    #   achievable           2 (VGPRs): occupancy 2 / 8 = 0.25
    #   grid                 49152 / 256 = 192 workgroups x 4 = 768 waves of 256 x 4 x 2 = 2048
    #                        slots: 37.5 %, so the grid, not the VGPRs, holds it
    for row in gemm:
        assert {k: row[k] for k in (
            "vgpr_count", "vgprs_counted", "vgpr_waves", "sgpr_waves", "lds_waves",
            "workgroups_waves", "achievable_waves", "occupancy", "wave_slots", "grid_waves",
            "grid_fill", "limiter",
        )} == {
            "vgpr_count": 128, "vgprs_counted": 256, "vgpr_waves": 2, "sgpr_waves": 8,
            "lds_waves": 3, "workgroups_waves": 8, "achievable_waves": 2, "occupancy": 0.25,
            "wave_slots": 2048, "grid_waves": 768, "grid_fill": 0.375, "limiter": "grid",
        }  # fmt: skip


def test_a_gfx90a_rocprof_v1_kernel_by_hand_with_the_gpu_named_by_the_test(aaco_paths):
    lake, sid = ingested(ROCPROF_V1, aaco_paths, "mi250")
    # rocprof v1 writes no agent info: without it nothing is guessed ...
    unnamed = occupancy_rows(lake, sid)
    assert {r["reason"] for r in unnamed} == {"the trace names no GPU for device 8 (no agent info)"}
    assert all(r["achievable_waves"] is None and r["limiter"] is None for r in unnamed)
    # ... and with it (one MI250 GCD: gfx90a, 104 CUs per its rocminfo) the kernels are judged.
    with lake.connect(write=True) as con:
        con.execute(
            "INSERT INTO agents (session_id, source, agent_id, agent_type, name, compute_units) "
            "VALUES (?, 'test', 'Agent 8', 'GPU', 'gfx90a:sramecc+:xnack-', 104)",
            [sid],
        )
    rows = {r["kernel_name"]: r for r in occupancy_rows(lake, sid)}
    laplacian, check = rows["laplacian_kernel"], rows["check_kernel"]
    # laplacian_kernel: arch_vgpr 24, accum_vgpr 0, sgpr 32, lds 0, wgr 256, grd 134217728,
    # 1001 dispatches. gfx90a: 512 unified VGPRs in granules of 8, 8 waves.
    #   vgpr 24 -> 512 // 24 = 21 -> 8; sgpr 32 <= 80 -> 10 -> 8; no LDS -> 8
    #   workgroups 256 / 64 = 4 waves: min(8 x 4 // 4, 16) = 8 x 4 / 4 = 8
    #   grid 134217728 / 256 x 4 = 2097152 waves >= 104 x 4 x 8 = 3328 slots
    assert {k: laplacian[k] for k in (
        "dispatches", "vgprs_counted", "achievable_waves", "occupancy", "wave_slots",
        "grid_waves", "limiter",
    )} == {
        "dispatches": 1001, "vgprs_counted": 24, "achievable_waves": 8, "occupancy": 1.0,
        "wave_slots": 3328, "grid_waves": 2097152, "limiter": "none",
    }  # fmt: skip
    # check_kernel has AGPRs: arch 12, accum 4 -> align(12, 4) + 4 = 16 in the shared file.
    assert (check["accum_vgpr_count"], check["vgprs_counted"]) == (4, 16)
    assert check["caveat"] is None  # 12 + 4, 24 + 0, 16 + 0: multiples of 8, read as written


# --- (c) what stays unknown, (d) a grid too small -----------------------------------------------


def test_an_unknown_gpu_or_missing_counts_give_null_figures_and_a_reason():
    unknown = synthetic("gfx9999", [{"kernel_name": "k"}])["k"]
    assert unknown["reason"] == "no occupancy rules for gfx9999"
    assert unknown["gfx"] == "gfx9999"
    figures = ("vgpr_waves", "lds_waves", "achievable_waves", "occupancy", "wave_slots",
               "grid_waves", "grid_fill", "limiter")  # fmt: skip
    assert all(unknown[f] is None for f in figures)
    assert describe(unknown) == "occupancy unknown: no occupancy rules for gfx9999"
    rows = synthetic(
        "gfx90a",
        [
            {"kernel_name": "no_vgprs", "vgpr_count": None},  # RPD, ROCm 6.2 CSV
            {"kernel_name": "no_sgprs", "sgpr_count": None},  # SGPRs limit waves on GFX9
            {"kernel_name": "no_workgroup", "workgroup_size": None},
            {"kernel_name": "elsewhere", "device_id": 7},
        ],
    )
    assert rows["no_vgprs"]["reason"] == "the trace carries no VGPR count for this kernel"
    assert rows["no_sgprs"]["reason"] == "the trace carries no SGPR count for this kernel"
    assert rows["no_workgroup"]["reason"] == "the trace carries no workgroup size"
    assert rows["elsewhere"]["reason"] == "the trace names no GPU for device 7 (no agent info)"
    assert all(r["achievable_waves"] is None for r in rows.values())


def test_a_grid_too_small_to_fill_the_gpu_is_the_limiter():
    rows = synthetic(
        "gfx942",
        [
            # 128 VGPRs: 4 waves; 10 workgroups of 4 waves = 40 waves of 304 x 4 x 4 = 4864
            {"kernel_name": "tiny", "vgpr_count": 128, "workgroup_size": 256, "grid_size": 2560},
            # the same kernel with 2000 workgroups: 8000 waves fill them
            {"kernel_name": "wide", "vgpr_count": 128, "workgroup_size": 256, "grid_size": 512000},
        ],
        compute_units=304,
    )
    tiny, wide = rows["tiny"], rows["wide"]
    assert (tiny["wave_slots"], tiny["grid_waves"]) == (4864, 40)
    assert tiny["grid_fill"] == pytest.approx(40 / 4864)
    assert (tiny["limiter"], wide["limiter"]) == ("grid", "vgpr")
    assert describe(wide) == "occupancy limited by VGPRs to 4 of 8 waves per SIMD (128 VGPRs)"


def test_the_grid_limits_when_most_of_the_kernels_time_is_in_small_dispatches():
    con = duckdb.connect()
    for statement in schema_ddl():
        con.execute(statement)
    con.execute(
        "INSERT INTO agents (session_id, agent_id, agent_type, name, compute_units) "
        "VALUES ('s', 'Agent 1', 'GPU', 'gfx942', 304)"
    )
    # One configuration, two grids: 10 workgroups (40 waves) for 900 ns, 5000 (all slots) for
    # 100 ns: 90 % of the time cannot fill the GPU.
    con.execute(
        "INSERT INTO kernel_events_trace (session_id, kernel_name, device_id, workgroup_size, "
        "grid_size, lds_bytes, vgpr_count, accum_vgpr_count, sgpr_count, duration_ns) VALUES "
        "('s', 'k', 1, 256, 2560, 0, 128, 0, 16, 900), "
        "('s', 'k', 1, 256, 1280000, 0, 128, 0, 16, 100)"
    )
    (row,) = kernel_occupancy(con, "s").to_pylist()
    assert (row["dispatches"], row["total_ns"], row["limiter"]) == (2, 1000, "grid")
    assert row["grid_fill"] == pytest.approx(0.9 * 40 / 4864 + 0.1)


def test_scratch_use_is_flagged():
    rows = synthetic("gfx90a", [{"kernel_name": "spill", "scratch_bytes": 520}])
    assert rows["spill"]["uses_scratch"] is True
    assert describe(rows["spill"]).endswith("; uses scratch (spills or stack)")


def test_counts_off_the_unified_granule_are_doubled_device_by_device():
    con = duckdb.connect()
    for statement in schema_ddl():
        con.execute(statement)
    con.execute(
        "INSERT INTO agents (session_id, agent_id, agent_type, name, compute_units) VALUES "
        "('s', 'Agent 1', 'GPU', 'gfx950', 256), ('s', 'Agent 2', 'GPU', 'gfx950', 256)"
    )
    # Device 1 has a kernel of 12 arch VGPRs and no AGPRs: no unified allocation (a multiple of
    # 8) splits so, so device 1's 64 counts as 128 (4 waves); device 2 is read as written (8).
    con.execute(
        "INSERT INTO kernel_events_trace (session_id, kernel_name, device_id, workgroup_size, "
        "grid_size, lds_bytes, vgpr_count, accum_vgpr_count, sgpr_count, duration_ns) VALUES "
        "('s', 'small', 1, 64, 64000000, 0, 12, 0, 16, 1), "
        "('s', 'k', 1, 64, 64000000, 0, 64, 0, 16, 1), "
        "('s', 'k', 2, 64, 64000000, 0, 64, 0, 16, 1)"
    )
    rows = {(r["device_id"], r["kernel_name"]): r for r in kernel_occupancy(con, "s").to_pylist()}
    assert (rows[1, "k"]["vgprs_counted"], rows[1, "k"]["vgpr_waves"]) == (128, 4)
    assert (rows[2, "k"]["vgprs_counted"], rows[2, "k"]["vgpr_waves"]) == (64, 8)
    assert rows[2, "k"]["caveat"] is None


def test_a_v14_lake_gains_accumulation_vgprs_and_keeps_its_kernels(aaco_paths, tmp_path):
    folder = tmp_path / "sllm"
    folder.mkdir()
    shutil.copy(SAMPLES / f"{SLLM}_kernel_trace.csv", folder / f"{SLLM}_kernel_trace.csv")
    lake, old = ingested(folder, aaco_paths, "v14")
    with duckdb.connect(str(aaco_paths.tracelake)) as con:  # back to v14's shape
        for table in ("kernel_events_profile", "kernel_events_trace"):
            con.execute(f"ALTER TABLE {table} DROP COLUMN accum_vgpr_count")
        stamp_schema_version(con, 14)
    _, new = ingested(folder, aaco_paths, "v15")  # migrates first
    assert lake.schema_version() == SCHEMA_VERSION >= 15
    counts = lake.query(
        "SELECT session_id, count(*) AS kernels, count(accum_vgpr_count) AS with_agprs "
        "FROM kernel_events WHERE category = 'Kernel' GROUP BY session_id "
        "ORDER BY session_id = $new",
        {"new": new},
    ).to_pylist()
    assert counts == [
        {"session_id": old, "kernels": 319, "with_agprs": 0},  # unknown before v15
        {"session_id": new, "kernels": 319, "with_agprs": 319},
    ]

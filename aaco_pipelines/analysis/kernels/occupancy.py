"""Occupancy of every kernel of a session, from what each kernel row of the trace carries.

A kernel row of rocprofv3 (CSV, JSON, rocpd) or rocprof v1 says the kernel's registers, LDS,
scratch and workgroup size, and the architecture fixes how many of each a SIMD holds: so the
waves a SIMD can hold for each kernel, and the resource that stops it holding more, need no
counters and work on every real trace read today. The rules are LLVM's AMDGPU occupancy model,
one OccupancyRules per gfx target (ARCHITECTURES, its sources cited beside each number).

Entry points: `kernel_occupancy` (one row per device, kernel and resource configuration, most
time first, computed in DuckDB) and `describe` (such a row in one sentence for a report).

Concepts: docs/concepts/kernel-diagnosis.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import duckdb
import pyarrow as pa

from aaco_pipelines.analysis.envelope.datasheets import session_gpu_targets

# Sources, cited at each number of ARCHITECTURES below:
#   [BaseInfo]  ROCm/llvm-project@08b7dcac0b204b5cc11cacd53ac28e0620ec568e
#               llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp: getMaxWavesPerEU,
#               getTotalNumVGPRs, getVGPRAllocGranule, getNumWavesPerEUWithNumVGPRs,
#               getOccupancyWithNumSGPRs, getEUsPerCU, getLocalMemorySize, getMaxWorkGroupsPerCU
#   [Subtarget] llvm/lib/Target/AMDGPU/AMDGPUSubtarget.cpp getOccupancyWithWorkGroupSizes (LDS
#               workgroups x waves per workgroup over the SIMDs, rounded up);
#               reviews.llvm.org/D139468
#   [td]        iree-org/llvm-project@309da83928f42d7fecfb2a00e20579618734aba8
#               llvm/lib/Target/AMDGPU/AMDGPU.td: FeatureISAVersion9_0_Common (64 KiB LDS),
#               9_0_A / 9_4_Common (GFX90AInsts: unified VGPRs), 9_5_Common (160 KiB LDS),
#               11_0_0 / 11_0_1 / 11_5_1 / 12 (Feature1_5xVGPRs)
#   [hsakmt]    ROCm/ROCR-Runtime@16bf9650d104a77e672b8c3789b8fc62bf4e73e2 libhsakmt/src/queues.c
#               hsakmt_get_vgpr_size_per_cu: 512 KiB per CU for gfx908/90a/94x/950 (4 SIMDs x
#               512 x 64 lanes x 4 B), 384 KiB for gfx1100/1101/1151/1200/1201 (2 SIMDs x 1536 x
#               32 x 4 B)
#   [Usage]     LLVM AMDGPUUsage, COMPUTE_PGM_RSRC2.LDS_SIZE: 128-dword (512 B) blocks on
#               GFX7-GFX11, 320 dwords (1280 B) on GFX950
#               (github.com/llvm/llvm-project/commit/5f38ae4a77d4)
#   [mesa]      mesa src/amd/common/ac_gpu_info.c (mirror/mesa@97b024e7f113): lds_alloc_granularity
#               1024 B from GFX10.3 on ("what the hardware will align the LDS size to"), 512 B
#               before
#   [labnotes]  AMD lab notes, "Register pressure in AMD CDNA2 GPUs", Table 1
#               (amd/amd-lab-notes@d0cc1529f61c7d42eb4186f62908bdfb8a91256d
#               register-pressure/img/occupancy_vgpr.JPG): 8 waves per SIMD at most, 512 VGPRs
#   [sdk]       ROCm/rocm-systems@fa9b00296149f33b64c3eb94d1024f46884e4853
#               projects/rocprofiler-sdk/source/lib/rocprofiler-sdk/code_object/code_object.cpp:
#               how the trace's counts are decoded (see _VGPRS_COUNTED)


@dataclass(frozen=True)
class OccupancyRules:
    """What occupancy depends on for one gfx target (numbers per SIMD unless said)."""

    gfx: str
    family: str
    wave_size: int  # lanes of the waves its kernels run (wave64 CDNA, wave32 RDNA)
    simds_per_cu: int
    max_waves_per_simd: int
    vgprs_per_simd: int  # VGPRs per lane of one SIMD's file, at that wave size
    vgpr_granule: int  # allocation granule of VGPRs (per lane)
    agprs: str  # unified (share the VGPR file) | separate (own 256-entry file) | none
    sgprs_limit_waves: bool  # GFX9: 800 SGPRs per SIMD; GFX10+: never a limit
    simds_per_block: int  # SIMDs a workgroup's waves share LDS and barriers with
    lds_bytes_per_block: int
    lds_granule: int  # bytes LDS is allocated in
    max_workgroups_per_block: int  # barrier slots


def _cdna(gfx: str, family: str, **overrides) -> OccupancyRules:
    """GFX9 data-centre rules: 4 SIMDs per CU, wave64, the CU is the block [BaseInfo
    getEUsPerCU], 64 KiB LDS [td FeatureISAVersion9_0_Common] in 512 B blocks [Usage], 16
    barriers per CU [BaseInfo getMaxWorkGroupsPerCU], SGPRs limit waves [BaseInfo
    getOccupancyWithNumSGPRs]; CDNA2+ has GFX90AInsts: 8 waves [BaseInfo getMaxWavesPerEU,
    labnotes], 512 VGPRs shared with the AGPRs [BaseInfo getTotalNumVGPRs, hsakmt, labnotes] in
    granules of 8 [BaseInfo getVGPRAllocGranule]."""
    rules = dict(
        gfx=gfx, family=family, wave_size=64, simds_per_cu=4, max_waves_per_simd=8,
        vgprs_per_simd=512, vgpr_granule=8, agprs="unified", sgprs_limit_waves=True,
        simds_per_block=4, lds_bytes_per_block=64 << 10, lds_granule=512,
        max_workgroups_per_block=16,
    )  # fmt: skip
    return OccupancyRules(**{**rules, **overrides})


def _rdna(gfx: str, family: str, **overrides) -> OccupancyRules:
    """GFX10.3+ rules, wave32, WGP mode: 2 SIMDs per CU, a WGP of 4 SIMDs is the block
    [BaseInfo getEUsPerCU], 16 waves [BaseInfo getMaxWavesPerEU: hasGFX10_3Insts], 1024 VGPRs
    in granules of 16 [BaseInfo getTotalNumVGPRs, getVGPRAllocGranule], no AGPRs, SGPRs never
    limit [BaseInfo getOccupancyWithNumSGPRs: GFX10+], 128 KiB LDS per WGP [BaseInfo
    getLocalMemorySize: 64 KiB doubled in WGP mode] in 1 KiB blocks [mesa], 32 barriers per WGP
    [BaseInfo getMaxWorkGroupsPerCU]."""
    rules = dict(
        gfx=gfx, family=family, wave_size=32, simds_per_cu=2, max_waves_per_simd=16,
        vgprs_per_simd=1024, vgpr_granule=16, agprs="none", sgprs_limit_waves=False,
        simds_per_block=4, lds_bytes_per_block=128 << 10, lds_granule=1024,
        max_workgroups_per_block=32,
    )  # fmt: skip
    return OccupancyRules(**{**rules, **overrides})


# Feature1_5xVGPRs: 1536 VGPRs per SIMD in wave32, allocated in granules of 24 [BaseInfo
# getTotalNumVGPRs, getVGPRAllocGranule; td FeatureISAVersion11_0_0/11_0_1/11_5_1/12; hsakmt
# 384 KiB per CU].
_ONE_AND_A_HALF = {"vgprs_per_simd": 1536, "vgpr_granule": 24}

ARCHITECTURES: tuple[OccupancyRules, ...] = (
    # gfx908 (MI100): no GFX90AInsts: 10 waves, 256 VGPRs in granules of 4 and the AGPRs in a
    # 256-entry file of their own [BaseInfo getMaxWavesPerEU, getTotalNumVGPRs,
    # getArchVGPRAllocGranule; hsakmt 512 KiB per CU = 4 x (256 + 256) x 64 x 4 B].
    _cdna(
        "gfx908",
        "CDNA",
        max_waves_per_simd=10,
        vgprs_per_simd=256,
        vgpr_granule=4,
        agprs="separate",
    ),  # fmt: skip
    _cdna("gfx90a", "CDNA2"),
    _cdna("gfx940", "CDNA3"),
    _cdna("gfx941", "CDNA3"),
    _cdna("gfx942", "CDNA3"),
    # gfx950: 160 KiB LDS [td FeatureISAVersion9_5_Common] in 1280 B blocks [Usage].
    _cdna("gfx950", "CDNA4", lds_bytes_per_block=160 << 10, lds_granule=1280),
    _rdna("gfx1030", "RDNA2"),
    _rdna("gfx1100", "RDNA3", **_ONE_AND_A_HALF),
    _rdna("gfx1101", "RDNA3", **_ONE_AND_A_HALF),
    _rdna("gfx1102", "RDNA3"),
    _rdna("gfx1150", "RDNA3.5"),
    _rdna("gfx1151", "RDNA3.5", **_ONE_AND_A_HALF),
    _rdna("gfx1200", "RDNA4", **_ONE_AND_A_HALF),
    _rdna("gfx1201", "RDNA4", **_ONE_AND_A_HALF),
)
RULES = {rules.gfx: rules for rules in ARCHITECTURES}

# A unified VGPR file is allocated in granules of 8 [BaseInfo getVGPRAllocGranule].
UNIFIED_GRANULE = 8
# The resources in the order a tie is named (the first whose bound is the achievable).
LIMITERS = ("vgpr", "agpr", "sgpr", "lds", "workgroups")
_UNITS = {"vgpr": "VGPRs", "agpr": "AGPRs", "sgpr": "SGPRs"}


def kernel_occupancy(con: duckdb.DuckDBPyConnection, session_id: str) -> pa.Table:
    """One row per (device, kernel name, resource configuration) of the session's device
    kernels, most time first: the resources, the waves per SIMD each allows, the achievable and
    the maximum, occupancy, the limiter and the grid's fill of the GPU
    (docs/concepts/kernel-diagnosis.md)."""
    con.register("_occupancy_rules", rules_table())
    con.register("_occupancy_gpus", session_gpu_targets(con, session_id))
    try:
        return con.sql(OCCUPANCY_SQL, params={"sid": session_id}).to_arrow_table()
    finally:
        con.unregister("_occupancy_rules")
        con.unregister("_occupancy_gpus")


def rules_table() -> pa.Table:
    """ARCHITECTURES as a small Arrow table, the rules the SQL joins on."""
    return pa.Table.from_pylist([asdict(rules) for rules in ARCHITECTURES])


def describe(row: dict) -> str:
    """One sentence for a report: what holds the kernel's occupancy, and at what."""
    if row.get("reason"):
        return f"occupancy unknown: {row['reason']}"
    waves = f"{row['achievable_waves']} of {row['max_waves']} waves per SIMD"
    limiter = row["limiter"]
    if limiter == "grid":
        text = (
            f"grid too small to fill the GPU: {row['grid_fill']:.0%} of its "
            f"{row['wave_slots']} wave slots ({waves} possible)"
        )
    elif limiter == "none":
        text = f"full occupancy: {waves}"
    else:
        name, detail = _what_limits(row)
        text = f"occupancy limited by {name} to {waves} ({detail})"
    scratch = "; uses scratch (spills or stack)" if row.get("uses_scratch") else ""
    return text + scratch + (f"; {row['caveat']}" if row.get("caveat") else "")


def _what_limits(row: dict) -> tuple[str, str]:
    """The limiting resource in words, and the kernel's use of it."""
    limiter = row["limiter"]
    if limiter in _UNITS:
        counts = {"vgpr": "vgprs_counted", "agpr": "accum_vgpr_count", "sgpr": "sgpr_count"}
        return _UNITS[limiter], f"{row[counts[limiter]]} {_UNITS[limiter]}"
    if limiter == "lds":
        return "LDS", f"{row['lds_bytes']} bytes per workgroup"
    return "workgroup slots", f"workgroups of {row['waves_per_workgroup']} waves"


def _align(value: str, granule: str) -> str:
    """`value` rounded up to a multiple of `granule` (integers)."""
    return f"(({value}) + ({granule}) - 1) // ({granule}) * ({granule})"


def _ceil_div(value: str, divisor: str) -> str:
    return f"(({value}) + ({divisor}) - 1) // ({divisor})"


def _waves_with_registers(registers: str, total: str, granule: str) -> str:
    """getNumWavesPerEUWithNumVGPRs: fewer than a granule -> the maximum, else the file over
    the rounded count, at least 1 [BaseInfo]."""
    return (
        f"CASE WHEN {registers} < {granule} THEN max_waves_per_simd ELSE "
        f"least(greatest({total} // ({_align(registers, granule)}), 1), max_waves_per_simd) END"
    )


def _spread(workgroups: str) -> str:
    """Waves per SIMD of `workgroups` resident workgroups of a block, spread over its SIMDs
    and rounded up, between 1 and the maximum [Subtarget]."""
    waves = _ceil_div(f"({workgroups}) * waves_per_workgroup", "simds_per_block")
    return f"least(greatest({waves}, 1), max_waves_per_simd)"


_REASON = """
    CASE
        WHEN device_id IS NULL THEN 'the trace gives no device for this kernel'
        WHEN gpu_gfx IS NULL THEN 'the trace names no GPU for device ' || device_id
            || ' (no agent info)'
        WHEN gfx IS NULL THEN 'no occupancy rules for ' || gpu_gfx
        WHEN vgpr_count IS NULL THEN 'the trace carries no VGPR count for this kernel'
        WHEN sgprs_limit_waves AND sgpr_count IS NULL
            THEN 'the trace carries no SGPR count for this kernel'
        WHEN coalesce(workgroup_size, 0) <= 0 THEN 'the trace carries no workgroup size'
        WHEN lds_bytes IS NULL THEN 'the trace carries no LDS size for this kernel'
    END"""

_WORKGROUP_SLOTS = (
    "CASE WHEN waves_per_workgroup = 1 THEN max_waves_per_simd * simds_per_block "
    "ELSE least(max_waves_per_simd * simds_per_block // waves_per_workgroup, "
    "max_workgroups_per_block) END"
)
_LDS_ALLOCATED = _align("lds_bytes", "lds_granule")
_WAVES = {
    "vgpr": _waves_with_registers("vgprs_counted", "vgprs_per_simd", "vgpr_granule"),
    "agpr": f"CASE WHEN agprs = 'separate' THEN "
    f"{_waves_with_registers('coalesce(accum_vgpr_count, 0)', '256', '4')} END",
    "sgpr": "CASE WHEN NOT sgprs_limit_waves THEN max_waves_per_simd ELSE least("
    "CASE WHEN sgpr_count <= 80 THEN 10 WHEN sgpr_count <= 88 THEN 9 "
    "WHEN sgpr_count <= 100 THEN 8 ELSE 7 END, max_waves_per_simd) END",
    "lds": f"CASE WHEN {_LDS_ALLOCATED} = 0 THEN max_waves_per_simd "
    f"ELSE {_spread(f'lds_bytes_per_block // ({_LDS_ALLOCATED})')} END",
    "workgroups": _spread(_WORKGROUP_SLOTS),
}
_LIMITER = (
    "CASE WHEN achievable_waves >= max_waves_per_simd THEN 'none' "
    + " ".join(f"WHEN achievable_waves = {name}_waves THEN '{name}'" for name in LIMITERS)
    + " END"
)
# A device decoded as half its unified allocations: counted twice. Before its gfx95x support
# (ROCm/rocprofiler-sdk code_object.cpp of 2024-25 matched only "gfx94") rocprofiler-sdk [sdk]
# gave a gfx950 kernel's arch_vgpr_count as (granules + 1) x 4 of a descriptor counting 8-register
# granules, half the allocation, and its accum_vgpr_count as 0. A unified allocation is a multiple
# of UNIFIED_GRANULE split as arch + accum, so an odd multiple of 4 arch VGPRs with no AGPRs
# (the `decoding` step of OCCUPANCY_SQL) marks every kernel of its device as decoded so.
_VGPRS_COUNTED = f"""
    CASE
        WHEN agprs <> 'unified' THEN vgpr_count
        WHEN halved THEN 2 * vgpr_count
        WHEN coalesce(accum_vgpr_count, 0) = 0 THEN vgpr_count
        ELSE {_align("vgpr_count", "4")} + accum_vgpr_count
    END"""
_CAVEAT = """
    CASE
        WHEN halved THEN 'VGPR counts doubled: the profiler decoded this GPU''s kernels as '
            || 'half their allocation (a rocprofiler-sdk without ' || gfx || ' support)'
        WHEN agprs = 'unified' AND accum_vgpr_count IS NULL
            THEN 'the trace carries no AGPR count: occupancy is an upper bound'
    END"""

OCCUPANCY_SQL = f"""
WITH shapes AS (
    SELECT device_id, kernel_name, workgroup_size, lds_bytes, scratch_bytes, vgpr_count,
           accum_vgpr_count, sgpr_count, grid_size,
           count(*) AS dispatches, sum(duration_ns) AS total_ns
    FROM kernel_events
    WHERE session_id = $sid AND category = 'Kernel'
    GROUP BY ALL
),
decoding AS (
    SELECT device_id,
           bool_or(coalesce(accum_vgpr_count, 0) = 0
                   AND vgpr_count % {UNIFIED_GRANULE} = {UNIFIED_GRANULE // 2}) AS off_granule
    FROM shapes GROUP BY device_id
),
placed AS (
    SELECT s.*, g.gfx AS gpu_gfx, g.compute_units, r.*,
           coalesce(r.agprs = 'unified' AND d.off_granule, false) AS halved
    FROM shapes s
    LEFT JOIN _occupancy_gpus g ON g.device = s.device_id
    LEFT JOIN _occupancy_rules r ON r.gfx = g.gfx
    LEFT JOIN decoding d ON d.device_id = s.device_id
),
judged AS (
    SELECT *, {_REASON} AS reason FROM placed
),
sized AS (
    SELECT *,
        CASE WHEN reason IS NULL THEN {_ceil_div("workgroup_size", "wave_size")} END
            AS waves_per_workgroup,
        CASE WHEN reason IS NULL THEN {_VGPRS_COUNTED} END AS vgprs_counted
    FROM judged
),
bounded AS (
    SELECT *, {
    ", ".join(
        f"CASE WHEN reason IS NULL THEN {sql} END AS {name}_waves" for name, sql in _WAVES.items()
    )
}
    FROM sized
),
achieved AS (
    SELECT *, CASE WHEN reason IS NULL THEN least({
    ", ".join(f"coalesce({n}_waves, max_waves_per_simd)" for n in LIMITERS)
}) END AS achievable_waves
    FROM bounded
),
filled AS (
    SELECT *,
        nullif(compute_units, 0) * simds_per_cu * achievable_waves AS wave_slots,
        CASE WHEN reason IS NULL
             THEN {_ceil_div("grid_size", "workgroup_size")} * waves_per_workgroup END
            AS grid_waves,
        coalesce(total_ns, 0) AS weight_ns
    FROM achieved
),
shares AS (
    SELECT *,
        CASE WHEN grid_waves >= wave_slots THEN 1.0 ELSE grid_waves / wave_slots END AS fill,
        grid_waves < wave_slots AS short_grid
    FROM filled
)
SELECT
    device_id, coalesce(gfx, gpu_gfx) AS gfx, kernel_name,
    CAST(sum(dispatches) AS BIGINT) AS dispatches, CAST(sum(total_ns) AS BIGINT) AS total_ns,
    workgroup_size, any_value(waves_per_workgroup) AS waves_per_workgroup,
    vgpr_count, accum_vgpr_count, any_value(vgprs_counted) AS vgprs_counted, sgpr_count,
    lds_bytes, scratch_bytes, scratch_bytes > 0 AS uses_scratch,
    {", ".join(f"any_value({n}_waves) AS {n}_waves" for n in LIMITERS)},
    any_value(achievable_waves) AS achievable_waves,
    any_value(max_waves_per_simd) AS max_waves,
    any_value(achievable_waves) / any_value(max_waves_per_simd) AS occupancy,
    any_value(wave_slots) AS wave_slots,
    arg_max(grid_waves, weight_ns) AS grid_waves,
    CASE WHEN sum(weight_ns) > 0 THEN sum(fill * weight_ns) / sum(weight_ns)
         ELSE avg(fill) END AS grid_fill,
    CASE WHEN any_value(reason) IS NOT NULL THEN NULL
         WHEN sum(weight_ns) > 0 AND sum(weight_ns) FILTER (WHERE short_grid)
              > sum(weight_ns) / 2.0 THEN 'grid'
         WHEN sum(weight_ns) = 0 AND count(*) FILTER (WHERE short_grid) > count(*) / 2.0
              THEN 'grid'
         ELSE any_value({_LIMITER}) END AS limiter,
    any_value(reason) AS reason,
    any_value({_CAVEAT}) AS caveat
FROM shares
GROUP BY device_id, coalesce(gfx, gpu_gfx), kernel_name, workgroup_size, lds_bytes,
         scratch_bytes, vgpr_count, accum_vgpr_count, sgpr_count
ORDER BY total_ns DESC NULLS LAST, device_id, kernel_name
"""

"""Which hardware counters to collect on each AMD GPU, and the formulas that turn them into work.

One table, as data, per architecture family (FAMILIES): every quantity aaco derives from counters
(FLOPs by data type, DRAM bytes read and written, L2 hits and misses, LDS bank-conflict cycles,
the bytes the L2 and the LDS served, the VALU lanes in use) is a sum of raw counters times
factors, copied from AMD's own definitions (SOURCES, cited beside each formula). What an
architecture cannot count is absent and said (CounterFormulas.not_counted), never guessed.

Entry points: `formulas_for` (a gfx target's formulas), `counters_for` (the raw counters a runner
collects there), `all_counters` (what a reader looks for) and `no_formulas_reason`.

Concepts: docs/concepts/kernel-diagnosis.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from aaco_pipelines.execution.amd_gpus import gfx_target

# counter_defs.yaml's name of reduce(X, sum). Formulas name raw counters only (what
# `rocprofv3 --pmc` collects): rocprofv3's CSV already sums a raw counter over its hardware
# instances in each dispatch's row ("Accumulate counters based on ID", rocprofiler-sdk
# source/lib/output/generateCSV.cpp at [sdk]'s commit), so X and X_sum are the same number and
# readers accept either spelling.
SUM_SUFFIX = "_sum"

# Where each formula comes from (Formula.source is a key):
#   sol    rocprofiler-compute's System Speed-of-Light panel per architecture (VALU FLOPs, MFMA
#          FLOPs, L2 Cache Hit Rate, L2-Fabric Read/Write BW): projects/rocprofiler-compute/src/
#          rocprof_compute_soc/analysis_configs/<gfx>/0200_system_speed_of_light.yaml (gfx90a,
#          gfx942, gfx950)
#   lds    the same tool's LDS panel ("Bank Conflict", "Bank Conflicts/Access")
#   sdk    rocprofiler-sdk's counter definitions (projects/rocprofiler-sdk/source/share/
#          rocprofiler-sdk/counter_defs.yaml): FETCH_SIZE and WRITE_SIZE per architecture (DRAM
#          bytes), L2CacheHit, LDSBankConflict, and which architectures define each raw counter
#   mfma   "Matrix fused multiply-add operation counters": SQ_INSTS_VALU_MFMA_MOPS_* count
#          matrix FMA ops "in the unit of 512"
#   roof   rocprofiler-compute's empirical roofline panel, the bytes behind its L2 and LDS
#          arithmetic intensities ("Total L2 Cache Data", "Total LDS Data"), gfx90a, gfx942,
#          gfx950; gfx908 at 11fb0725b50d80a1ec97a1c880c7db9f492edd9b
#   roof4  the same panel for gfx1201 ("LDS BW", the SQC_ spelling of the same form)
SOURCES = {
    "sol": "rocprofiler-compute analysis_configs/<gfx>/0200_system_speed_of_light.yaml "
    "(ROCm/rocm-systems@1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992)",
    "lds": "rocprofiler-compute analysis_configs/<gfx>/1200_local_data_share_lds.yaml "
    "(ROCm/rocm-systems@1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992)",
    "sdk": "rocprofiler-sdk source/share/rocprofiler-sdk/counter_defs.yaml "
    "(ROCm/rocm-systems@1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992)",
    "valu": "rocprofiler-sdk counter_defs.yaml, VALUUtilization: 100 x SQ_THREAD_CYCLES_VALU / "
    "(SQ_ACTIVE_INST_VALU x MAX_WAVE_SIZE), gfx9 to gfx950 (ROCm/rocprofiler-sdk@"
    "16c0eaee02c7f2139476d34eedfe04c8c82dab53:source/share/rocprofiler-sdk/counter_defs.yaml)",
    "mfma": "ROCm docs, MI300 and MI200 series performance counters and metrics, "
    "https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi300-mi200-performance-counters.html",
    "roof": "rocprofiler-compute analysis_configs/<gfx>/0400_roofline.yaml, Total L2 Cache Data "
    "and Total LDS Data (ROCm/rocm-systems@10d7b2605a5caad379d1bcb878942eacfedc17f1)",
    "roof4": "rocprofiler-compute analysis_configs/gfx1201/0400_roofline.yaml, LDS BW "
    "(ROCm/rocm-systems@0a4cacac249a31fd6853fa10342c77f9e948b1cb)",
}
# [roof]: l2_bytes = 64 x (TCP_TCC_READ_REQ + TCP_TCC_WRITE_REQ + TCP_TCC_ATOMIC_WITH_RET_REQ
# + TCP_TCC_ATOMIC_WITHOUT_RET_REQ), each vL1D -> L2 request counted as one 64-byte line. On gfx942
# the vcopy capture's 8 MiB of reads are 65,536 TCP_TCC_READ_REQ: 128-byte read requests count as
# 64 bytes there, as they do in rocprofiler-compute.
L2_REQUEST_BYTES = 64.0
# [roof], [roof4]: lds_bytes = (SQ_LDS_IDX_ACTIVE - SQ_LDS_BANK_CONFLICT) x 4 x $lds_banks_per_cu:
# 4-byte banks, lds_banks_per_cu = 32 on every CDNA target and on gfx1201
# (rocprof_compute_soc/soc_gfx90a.py, soc_gfx942.py, soc_gfx950.py, soc_gfx1201.py): 128 bytes per
# conflict-free cycle.
LDS_BYTES_PER_CYCLE = 4.0 * 32

# The quantities a formula can give. FLOPs by data type, vector (VALU) and matrix (MFMA) apart;
# int8 matrix work is integer ops, kept out of FLOP totals.
DTYPES = ("fp64", "fp32", "fp16", "bf16", "fp8")
QUANTITIES = (
    *(f"{dtype}_vector_flops" for dtype in DTYPES),
    *(f"{dtype}_matrix_flops" for dtype in DTYPES),
    "int8_matrix_ops",
    "hbm_read_bytes",  # bytes the L2 read over the fabric: DRAM/HBM, plus remote memory
    "hbm_write_bytes",  # bytes the L2 wrote over the fabric (writes and atomics)
    "l2_hits",
    "l2_misses",
    "lds_bank_conflict_cycles",
    "lds_active_cycles",  # cycles the LDS served indexed accesses, conflicts included
    "valu_thread_cycles",  # VALU cycles times the threads active in them
    "valu_lane_cycles",  # VALU cycles times the wave's 64 lanes: what full waves would use
    "l2_bytes",  # bytes the vector L1 requested from the L2 (reads, writes, atomics)
    "lds_bytes",  # bytes the LDS moved in its conflict-free cycles
)


@dataclass(frozen=True)
class Formula:
    """One quantity as sum(factor x counter), its source, and a caveat when it has one."""

    quantity: str
    terms: tuple[tuple[str, float], ...]  # (raw counter name, factor)
    source: str  # a key of SOURCES
    note: str | None = None

    @property
    def counters(self) -> tuple[str, ...]:
        return tuple(counter for counter, _ in self.terms)


def _valu(dtype: str, suffix: str) -> Formula:
    """64 lanes per instruction, an FMA two FLOPs ([sol] "VALU FLOPs")."""
    names = ("ADD", "MUL", "TRANS", "FMA")
    return Formula(
        f"{dtype}_vector_flops",
        tuple((f"SQ_INSTS_VALU_{n}_{suffix}", 128.0 if n == "FMA" else 64.0) for n in names),
        "sol",
    )


def _mfma(quantity: str, suffix: str) -> Formula:
    """MOPS count matrix FMA ops in units of 512 ([mfma]; [sol] "MFMA FLOPs": 512 x MOPS)."""
    return Formula(quantity, ((f"SQ_INSTS_VALU_MFMA_MOPS_{suffix}", 512.0),), "mfma")


# No architecture counts bf16, fp8 or int8 VALU work: no vector formulas for them.
_VALU = (_valu("fp64", "F64"), _valu("fp32", "F32"), _valu("fp16", "F16"))
# gfx90a has no F8 MFMA; gfx950's F6F4 matrix ops are no data type of aaco's: not counted.
_MFMA_CDNA2 = (
    _mfma("fp64_matrix_flops", "F64"),
    _mfma("fp32_matrix_flops", "F32"),
    _mfma("fp16_matrix_flops", "F16"),
    _mfma("bf16_matrix_flops", "BF16"),
    _mfma("int8_matrix_ops", "I8"),
)
_MFMA_CDNA3 = (*_MFMA_CDNA2, _mfma("fp8_matrix_flops", "F8"))

# L2 (TCC) of CDNA: hits and misses [sol] "L2 Cache Hit Rate"; LDS [lds].
_TCC_HITS = (
    Formula("l2_hits", (("TCC_HIT", 1.0),), "sol"),
    Formula("l2_misses", (("TCC_MISS", 1.0),), "sol"),
)
# Lanes a wave's VALU instructions kept busy [valu]: threads masked off by a branch (divergence)
# or a workgroup that is no multiple of 64 leave lanes idle. MAX_WAVE_SIZE is 64 on CDNA.
_VALU_LANES_CDNA = (
    Formula("valu_thread_cycles", (("SQ_THREAD_CYCLES_VALU", 1.0),), "valu"),
    Formula("valu_lane_cycles", (("SQ_ACTIVE_INST_VALU", 64.0),), "valu"),
)
_LDS_CDNA = (
    Formula("lds_bank_conflict_cycles", (("SQ_LDS_BANK_CONFLICT", 1.0),), "lds"),
    Formula("lds_active_cycles", (("SQ_LDS_IDX_ACTIVE", 1.0),), "lds"),
)
# Bytes at the L2 and the LDS, for the hierarchical roofline [roof].
_L2_REQUESTS = (
    "TCP_TCC_READ_REQ",
    "TCP_TCC_WRITE_REQ",
    "TCP_TCC_ATOMIC_WITH_RET_REQ",
    "TCP_TCC_ATOMIC_WITHOUT_RET_REQ",
)
_LEVEL_BYTES_CDNA = (
    Formula("l2_bytes", tuple((c, L2_REQUEST_BYTES) for c in _L2_REQUESTS), "roof"),
    Formula(
        "lds_bytes",
        (
            ("SQ_LDS_IDX_ACTIVE", LDS_BYTES_PER_CYCLE),
            ("SQ_LDS_BANK_CONFLICT", -LDS_BYTES_PER_CYCLE),
        ),
        "roof",
    ),
)
_LDS_BYTES_RDNA4 = Formula(
    "lds_bytes",
    (("SQC_LDS_IDX_ACTIVE", LDS_BYTES_PER_CYCLE), ("SQC_LDS_BANK_CONFLICT", -LDS_BYTES_PER_CYCLE)),
    "roof4",
)
# gfx908/gfx90a ([sdk] FETCH_SIZE/WRITE_SIZE, [sol] L2-Fabric BW):
#   read  = 32 x RDREQ_32B + 64 x (RDREQ - RDREQ_32B)
#   write = 32 x (WRREQ - WRREQ_64B) + 64 x WRREQ_64B
_BYTES_CDNA2 = (
    Formula("hbm_read_bytes", (("TCC_EA_RDREQ", 64.0), ("TCC_EA_RDREQ_32B", -32.0)), "sdk"),
    Formula("hbm_write_bytes", (("TCC_EA_WRREQ", 32.0), ("TCC_EA_WRREQ_64B", 32.0)), "sdk"),
)
# gfx940-942/gfx950: 128-byte reads are counted by TCC_BUBBLE ("Number of 128-byte read
# requests sent to EA", [sdk]):
#   read  = 128 x BUBBLE + 64 x (EA0_RDREQ - BUBBLE - EA0_RDREQ_32B) + 32 x EA0_RDREQ_32B
_BYTES_CDNA3 = (
    Formula(
        "hbm_read_bytes",
        (("TCC_EA0_RDREQ", 64.0), ("TCC_BUBBLE", 64.0), ("TCC_EA0_RDREQ_32B", -32.0)),
        "sdk",
    ),
    Formula("hbm_write_bytes", (("TCC_EA0_WRREQ", 32.0), ("TCC_EA0_WRREQ_64B", 32.0)), "sdk"),
)
# RDNA's L2 is GL2C: [sdk] L2CacheHit and LDSBankConflict (gfx10-gfx12).
_GL2C_HITS = (
    Formula("l2_hits", (("GL2C_HIT", 1.0),), "sdk"),
    Formula("l2_misses", (("GL2C_MISS", 1.0),), "sdk"),
)
_LDS_RDNA = (
    Formula("lds_bank_conflict_cycles", (("SQC_LDS_BANK_CONFLICT", 1.0),), "sdk"),
    Formula("lds_active_cycles", (("SQC_LDS_IDX_ACTIVE", 1.0),), "sdk"),
)
_BYTES_RDNA3 = (  # [sdk] FETCH_SIZE / WRITE_SIZE for gfx11
    Formula(
        "hbm_read_bytes",
        tuple((f"GL2C_EA_RDREQ_{n}B", float(n)) for n in (32, 64, 96, 128)),
        "sdk",
    ),
    Formula("hbm_write_bytes", (("GL2C_MC_WRREQ", 32.0), ("GL2C_EA_WRREQ_64B", 32.0)), "sdk"),
)
# [sdk] FETCH_SIZE for gfx12 (no 96-byte requests). gfx12 has no WRITE_SIZE in [sdk]: its write
# bytes take gfx11's WRITE_SIZE form with gfx12's GL2C_EA_WRREQ ("transactions (either 32-byte or
# 64-byte)", [sdk]) in place of gfx11's GL2C_MC_WRREQ, and the formula's note says so.
_BYTES_RDNA4 = (
    Formula(
        "hbm_read_bytes", tuple((f"GL2C_EA_RDREQ_{n}B", float(n)) for n in (32, 64, 128)), "sdk"
    ),
    Formula(
        "hbm_write_bytes",
        (("GL2C_EA_WRREQ", 32.0), ("GL2C_EA_WRREQ_64B", 32.0)),
        "sdk",
        note="counter_defs.yaml defines no WRITE_SIZE for gfx12: gfx11's form, with GL2C_EA_WRREQ",
    ),
)

# [sdk]: CDNA 1 defines no per-type VALU or MFMA MOPS counters; gfx11 and gfx12 define only
# SQ_INSTS_VALU (an instruction count) and no WMMA counters. L2 bytes on RDNA 4 would need the
# GL1C_GL2_REQ_* counters its roofline panel reads.
_NO_FLOPS_CDNA1 = "gfx908 has no per-type VALU or MFMA MOPS counters: FLOPs are not counted"
_NO_FLOPS_RDNA = (
    "RDNA counts VALU instructions (SQ_INSTS_VALU), not FLOPs by data type, and no WMMA work: "
    "FLOPs are not counted; nor are the VALU lanes in use (no VALUUtilization there)"
)
_NO_LEVELS_RDNA3 = "; nor L2 and LDS bytes (rocprofiler-compute has no gfx11 roofline)"
_NO_L2_RDNA4 = "; nor L2 bytes (aaco does not collect the GL1C_GL2 requests yet)"


@dataclass(frozen=True)
class CounterFormulas:
    """The formulas of one architecture family and what it cannot count."""

    family: str  # "CDNA 3"
    targets: tuple[str, ...]  # gfx targets it covers
    formulas: tuple[Formula, ...]
    not_counted: str | None = None  # the quantities it has no counters for, in a sentence


FAMILIES = (
    CounterFormulas(
        "CDNA 1",
        ("gfx908",),
        (*_BYTES_CDNA2, *_TCC_HITS, *_LDS_CDNA, *_VALU_LANES_CDNA, *_LEVEL_BYTES_CDNA),
        _NO_FLOPS_CDNA1,
    ),
    CounterFormulas(
        "CDNA 2",
        ("gfx90a",),
        (
            *_VALU,
            *_MFMA_CDNA2,
            *_BYTES_CDNA2,
            *_TCC_HITS,
            *_LDS_CDNA,
            *_VALU_LANES_CDNA,
            *_LEVEL_BYTES_CDNA,
        ),
    ),
    CounterFormulas(
        "CDNA 3",
        ("gfx940", "gfx941", "gfx942"),
        (
            *_VALU,
            *_MFMA_CDNA3,
            *_BYTES_CDNA3,
            *_TCC_HITS,
            *_LDS_CDNA,
            *_VALU_LANES_CDNA,
            *_LEVEL_BYTES_CDNA,
        ),
    ),
    CounterFormulas(
        "CDNA 4",
        ("gfx950",),
        (
            *_VALU,
            *_MFMA_CDNA3,
            *_BYTES_CDNA3,
            *_TCC_HITS,
            *_LDS_CDNA,
            *_VALU_LANES_CDNA,
            *_LEVEL_BYTES_CDNA,
        ),
    ),
    CounterFormulas(
        "RDNA 3",
        ("gfx1100", "gfx1101", "gfx1102"),
        (*_BYTES_RDNA3, *_GL2C_HITS, *_LDS_RDNA),
        _NO_FLOPS_RDNA + _NO_LEVELS_RDNA3,
    ),
    CounterFormulas(
        "RDNA 4",
        ("gfx1200", "gfx1201"),
        (*_BYTES_RDNA4, *_GL2C_HITS, *_LDS_RDNA, _LDS_BYTES_RDNA4),
        _NO_FLOPS_RDNA + _NO_L2_RDNA4,
    ),
)


def formulas_for(gfx: str | None) -> CounterFormulas | None:
    """The formula family of a gfx target; None for one this table does not know."""
    target = gfx_target(gfx)
    return next((f for f in FAMILIES if target in f.targets), None)


def counters_for(gfx: str | None) -> tuple[str, ...]:
    """Every raw counter the formulas of `gfx` name, in table order, each once: what a runner
    collects there. Empty for an unknown target (`no_formulas_reason` says why), never a guess."""
    family = formulas_for(gfx)
    if family is None:
        return ()
    return tuple(dict.fromkeys(c for formula in family.formulas for c in formula.counters))


def all_counters() -> tuple[str, ...]:
    """Every raw counter any formula names, each once: what a reader of counters looks for."""
    names = (c for family in FAMILIES for formula in family.formulas for c in formula.counters)
    return tuple(dict.fromkeys(names))


def no_formulas_reason(gfx: str | None) -> str | None:
    """Why `gfx` has no counter formulas, in a sentence; None when it has them."""
    if formulas_for(gfx) is not None:
        return None
    known = ", ".join(t for family in FAMILIES for t in family.targets)
    what = gfx_target(gfx) or (f"agent {gfx!r}" if gfx else "an unnamed GPU (no agent info)")
    return f"no hardware-counter formulas for {what} (known: {known})"

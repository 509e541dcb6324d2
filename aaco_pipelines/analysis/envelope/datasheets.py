"""Published peaks of AMD GPUs, for sessions whose GPU this host cannot measure, and data types.

A trace ingested from a GPU node is judged against that GPU, never against the host that
ingests it: the envelope measured on that GPU model when the TraceLake has one
(analysis.envelope.choice.session_envelope), otherwise these datasheets, marked `datasheet`
wherever they are shown. Each product's peaks are dense, at its peak engine clock: FLOP per
clock per CU (RATES) x CUs x clock per data type, plus the L2 and LDS ceilings the counted
roofline uses (LEVEL_SOURCES). A trace's GPU agent is matched to a product here.

Entry points: `match_datasheet`, `local_gpu` (this host's GPU), `session_gpu_targets`, and
`node_dtype` / `kernel_dtype` (the data type whose roof a node sits under).

Concepts: docs/concepts/roofline.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from aaco_pipelines.execution.amd_gpus import (
    KFD_NODES,
    gfx_name,
    gfx_target,
    kfd_gpu_nodes,
)

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
FALLBACK_DTYPE = "fp32"  # the roof of a node whose data type is unknown or lacks a peak
# CU shares a product can present as (GCDs, compute partitions): a partition's peaks, bandwidth
# included, are the product's scaled by its CU share.
PARTITIONS = (1, 2, 3, 4, 6, 8)
CLOCK_NOTE_TOLERANCE = 0.02  # an agent clock this far from the datasheet's is mentioned

# White papers and documentation with the per-CU rates (FLOPS/clock/CU tables).
CDNA1_WHITE_PAPER = (
    "Introducing AMD CDNA Architecture (white paper), Table 1",
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/white-papers/"
    "amd-cdna-white-paper.pdf",
)
CDNA2_WHITE_PAPER = (
    "AMD CDNA 2 Architecture (white paper), Table 1",
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/white-papers/"
    "amd-cdna2-white-paper.pdf",
)
CDNA3_WHITE_PAPER = (
    "AMD CDNA 3 Architecture (white paper), Table 1; ROCm 'MI300 series microarchitecture' "
    "peak-performance table",
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/white-papers/"
    "amd-cdna-3-white-paper.pdf",
)
CDNA4_WHITE_PAPER = (
    "Introducing AMD CDNA 4 Architecture (white paper), Table 1",
    "https://www.amd.com/content/dam/amd/en/documents/instinct-business-docs/white-papers/"
    "amd-cdna-4-architecture-whitepaper.pdf",
)

# Bytes per clock of the GPU's inner levels, as rocprofiler-compute's System Speed-of-Light
# panel computes their peaks (ROCm/rocm-systems@125b34004e49c181e67e600c2262a4b1bf67830c:
# projects/rocprofiler-compute/src/rocprof_compute_soc/analysis_configs/gfx942/
# 0200_system_speed_of_light.yaml; gfx950's at 019e04cfccb1761752a6243c00a946bcddc2b717 the same):
# "Theoretical LDS Bandwidth" peak = max_sclk x cu_per_gpu x 0.128 GB/s (128 B/clock/CU) and
# "L2 Cache BW" peak = max_sclk / 1000 x 128 x total_l2_chan GB/s (128 B/clock/channel).
LDS_BYTES_PER_CLOCK_PER_CU = 128
L2_BYTES_PER_CLOCK_PER_CHANNEL = 128
LDS_ARCHS = frozenset({"gfx908", "gfx90a", "gfx942", "gfx950"})  # CDNA: the panel's targets
LEVEL_SOURCES = {
    "LDS": "rocprofiler-compute System Speed-of-Light, Theoretical LDS Bandwidth peak: "
    "128 B/clock/CU x CUs x peak clock (ROCm/rocm-systems@125b34004e49c181e67e600c2262a4b1bf67830c:"
    "projects/rocprofiler-compute/src/rocprof_compute_soc/analysis_configs/gfx942/"
    "0200_system_speed_of_light.yaml)",
    "L2": "rocprofiler-compute System Speed-of-Light, L2 Cache BW peak: 128 B/clock/channel x "
    "L2 channels x peak clock (same file); channels: 32 per MI100 / MI200 die (ROCm Compute "
    "Profiler docs, L2 cache (TCC), https://rocm.docs.amd.com/projects/rocprofiler-compute/en/"
    "latest/conceptual/l2-cache.html), 16 per CDNA 3 / CDNA 4 XCD (l2_banks in soc_gfx942.py and "
    "soc_gfx950.py, ROCm/rocm-systems@10d7b2605a5caad379d1bcb878942eacfedc17f1) x XCDs (num_xcds "
    "spx in utils/mi_gpu_spec.yaml: 8 on MI300X / MI325X / MI350 series, 6 on MI300A)",
}

# FLOP per clock per CU, dense: x CUs x peak clock reproduces AMD's published figures (MI300X
# matrix fp16: 2048 x 304 x 2.1 GHz = 1307.4 TFLOP/s). fp64..int8 are matrix (MFMA / WMMA)
# rates where the GPU has them, else the vector rate (RDNA 2 has no matrix cores; fp64 on RDNA
# is vector); fp32 is the matrix FP32 rate on CDNA, fp32_vector the vector rate, for reference
# only. A type a GPU lacks (fp8 before CDNA 3, tf32 on CDNA 4) is absent: its nodes fall back to
# FALLBACK_DTYPE's roof. CDNA: white papers above. RDNA: the rates that reproduce AMD's
# published card peaks (RDNA 3 WMMA fp16/bf16/iu8 at 512, RDNA 4 WMMA at 1024 for fp16/bf16 and
# 2048 for fp8/iu8; RDNA 2 packed fp16 at twice its 128 fp32 rate, fp64 at 1/16).
RATES: dict[str, dict[str, int]] = {
    "gfx908": {  # CDNA 1: no fp64 matrix; bf16 at half the fp16 rate
        "fp64": 64, "fp32": 256, "fp32_vector": 128, "fp16": 1024, "bf16": 512, "int8": 1024,
    },
    "gfx90a": {  # CDNA 2
        "fp64": 256, "fp32": 256, "fp32_vector": 128, "fp16": 1024, "bf16": 1024, "int8": 1024,
    },
    "gfx942": {  # CDNA 3
        "fp64": 256, "fp32": 256, "fp32_vector": 256, "tf32": 1024, "fp16": 2048, "bf16": 2048,
        "fp8": 4096, "int8": 4096,
    },
    "gfx950": {  # CDNA 4: fp64 matrix halved, tf32 dropped
        "fp64": 128, "fp32": 256, "fp32_vector": 256, "fp16": 4096, "bf16": 4096, "fp8": 8192,
        "int8": 8192,
    },
    "gfx1030": {"fp64": 8, "fp32": 128, "fp32_vector": 128, "fp16": 256},  # RDNA 2
    "gfx1100": {  # RDNA 3 (dual-issue fp32)
        "fp64": 8, "fp32": 256, "fp32_vector": 256, "fp16": 512, "bf16": 512, "int8": 512,
    },
    "gfx1201": {  # RDNA 4
        "fp32": 256, "fp32_vector": 256, "fp16": 1024, "bf16": 1024, "fp8": 2048, "int8": 2048,
    },
}  # fmt: skip


@dataclass(frozen=True)
class Datasheet:
    """One product's published peaks."""

    product: str  # "AMD Instinct MI300X"
    arch: str  # LLVM target, "gfx942"
    compute_units: int
    peak_clock_mhz: float
    memory_bandwidth_bytes_per_s: float
    memory: str  # "HBM3"
    url: str  # the product's specification page
    white_paper: tuple[str, str]  # (document, URL) of the per-CU rates
    names: tuple[str, ...] = ()  # regular expressions its product name matches
    l2_channels: int | None = None  # published L2 channel count (LEVEL_SOURCES); None: unknown

    def peak(self, dtype: str) -> float | None:
        """FLOP/s of the whole product for a data type; None when it has no such peak."""
        rate = RATES[self.arch].get(dtype)
        return None if rate is None else rate * self.compute_units * self.peak_clock_mhz * 1e6

    def peaks(self) -> dict[str, float]:
        return {d: p for d in (*DTYPES, "fp32_vector") if (p := self.peak(d)) is not None}

    def level_bandwidths(self) -> dict[str, float]:
        """B/s of the GPU's inner levels ("L2", "LDS") where their peaks are published."""
        clock = self.peak_clock_mhz * 1e6
        levels = {}
        if self.l2_channels:
            levels["L2"] = L2_BYTES_PER_CLOCK_PER_CHANNEL * self.l2_channels * clock
        if self.arch in LDS_ARCHS:
            levels["LDS"] = LDS_BYTES_PER_CLOCK_PER_CU * self.compute_units * clock
        return levels

    def named(self, product_name: str | None) -> bool:
        return bool(product_name) and any(
            re.search(pattern, product_name, re.IGNORECASE) for pattern in self.names
        )


def _instinct(family: str, model: str) -> str:
    return f"https://www.amd.com/en/products/accelerators/instinct/{family}/{model}.html"


TB = 1e12
DATASHEETS: tuple[Datasheet, ...] = (
    Datasheet(
        "AMD Instinct MI100", "gfx908", 120, 1502, 1.2288 * TB, "HBM2",
        "https://www.amd.com/en/products/accelerators/instinct/mi100.html", CDNA1_WHITE_PAPER,
        (r"MI100",), l2_channels=32,
    ),
    # MI210 before MI250: a 104-CU gfx90a agent without a product name is either an MI210 or
    # one GCD of an MI250, and both have the same per-GCD peaks.
    Datasheet(
        "AMD Instinct MI210", "gfx90a", 104, 1700, 1.6384 * TB, "HBM2e",
        _instinct("mi200", "mi210"), CDNA2_WHITE_PAPER, (r"MI210",), l2_channels=32,
    ),
    Datasheet(
        "AMD Instinct MI250X", "gfx90a", 220, 1700, 3.2768 * TB, "HBM2e",
        _instinct("mi200", "mi250x"), CDNA2_WHITE_PAPER, (r"MI250X",), l2_channels=64,
    ),
    Datasheet(
        "AMD Instinct MI250", "gfx90a", 208, 1700, 3.2768 * TB, "HBM2e",
        _instinct("mi200", "mi250"), CDNA2_WHITE_PAPER, (r"MI250(?!X)",), l2_channels=64,
    ),
    Datasheet(
        "AMD Instinct MI300X", "gfx942", 304, 2100, 5.3 * TB, "HBM3",
        _instinct("mi300", "mi300x"), CDNA3_WHITE_PAPER, (r"MI300X",), l2_channels=128,
    ),
    Datasheet(
        "AMD Instinct MI325X", "gfx942", 304, 2100, 6.0 * TB, "HBM3E",
        _instinct("mi300", "mi325x"), CDNA3_WHITE_PAPER, (r"MI325X",), l2_channels=128,
    ),
    Datasheet(
        "AMD Instinct MI300A", "gfx942", 228, 2100, 5.3 * TB, "HBM3 (shared with the CPU)",
        _instinct("mi300", "mi300a"), CDNA3_WHITE_PAPER, (r"MI300A",), l2_channels=96,
    ),
    Datasheet(
        "AMD Instinct MI355X", "gfx950", 256, 2400, 8.0 * TB, "HBM3E",
        _instinct("mi350", "mi355x"), CDNA4_WHITE_PAPER, (r"MI355X",), l2_channels=128,
    ),
    Datasheet(
        "AMD Instinct MI350X", "gfx950", 256, 2200, 8.0 * TB, "HBM3E",
        _instinct("mi350", "mi350x"), CDNA4_WHITE_PAPER, (r"MI350X",), l2_channels=128,
    ),
    Datasheet(
        "AMD Radeon PRO V620", "gfx1030", 72, 2200, 512e9, "GDDR6",
        "https://www.amd.com/en/products/accelerators/radeon-pro/amd-radeon-pro-v620.html",
        ("AMD RDNA 2 (no matrix cores): packed fp16 at 2x fp32", ""), (r"V620",),
    ),
    Datasheet(
        "AMD Radeon PRO W7900", "gfx1100", 96, 2495, 864e9, "GDDR6",
        "https://www.amd.com/en/products/graphics/workstations/radeon-pro/w7900.html",
        ("AMD RDNA 3 WMMA (fp16/bf16/iu8 at 512 FLOP/clock/CU dense)", ""), (r"W7900",),
    ),
    Datasheet(
        "AMD Radeon RX 7900 XTX", "gfx1100", 96, 2500, 960e9, "GDDR6",
        "https://www.amd.com/en/products/graphics/desktops/radeon/7000-series/"
        "amd-radeon-rx-7900xtx.html",
        ("AMD RDNA 3 WMMA (fp16/bf16/iu8 at 512 FLOP/clock/CU dense)", ""), (r"7900 ?XTX",),
    ),
    Datasheet(
        "AMD Radeon AI PRO R9700", "gfx1201", 64, 2920, 640e9, "GDDR6",
        "https://www.amd.com/en/products/graphics/workstations/radeon-ai-pro/ai-9000-series/"
        "amd-radeon-ai-pro-r9700.html",
        ("AMD RDNA 4 WMMA (fp16/bf16 1024, fp8/iu8 2048 FLOP/clock/CU dense)", ""),
        (r"R9700",),
    ),
    Datasheet(
        "AMD Radeon RX 9070 XT", "gfx1201", 64, 2970, 640e9, "GDDR6",
        "https://www.amd.com/en/products/graphics/desktops/radeon/9000-series/"
        "amd-radeon-rx-9070xt.html",
        ("AMD RDNA 4 WMMA (fp16/bf16 1024, fp8/iu8 2048 FLOP/clock/CU dense)", ""),
        (r"9070 ?XT",),
    ),
)  # fmt: skip


# --- GPU agents ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuAgent:
    """A GPU as a trace's agent info (or this host's KFD topology) describes it."""

    arch: str | None  # "gfx942"; None when neither the name nor the target version says
    product_name: str | None = None
    compute_units: int | None = None
    max_clock_mhz: float | None = None
    agent_id: str | None = None  # as the trace names it ("Agent 2")

    def describe(self) -> str:
        parts = [self.arch or "unknown architecture"]
        if self.product_name:
            parts.append(self.product_name)
        if self.compute_units:
            parts.append(f"{self.compute_units} CUs")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {
            "arch": self.arch,
            "product_name": self.product_name,
            "compute_units": self.compute_units,
            "max_clock_mhz": self.max_clock_mhz,
            "agent_id": self.agent_id,
        }


def agent_arch(name: str | None, details_json: str | None = None) -> str | None:
    """The gfx target of an agent: from its name ("gfx90a:sramecc+:xnack-" -> gfx90a), else
    from the Gfx_Target_Version kept in its details."""
    target = gfx_target(name)
    if target:
        return target
    try:
        details = json.loads(details_json) if details_json else {}
    except ValueError:
        details = {}
    if isinstance(details, Mapping):
        for key, value in details.items():
            if str(key).lower() == "gfx_target_version":
                return gfx_name(value)
    return None


def session_gpu_targets(con, session_id: str) -> pa.Table:
    """The session's GPU agents as (device, gfx, compute_units, name): the agents table names
    a device "Agent <n>", kernel_events.device_id is that n; one agent per device number. Few
    rows, read whole, for the per-kernel SQL to join on."""
    rows = con.execute(
        "SELECT TRY_CAST(regexp_extract(agent_id, '[0-9]+$') AS INTEGER) AS device, name, "
        "details_json, compute_units FROM agents "
        "WHERE session_id = $sid AND upper(agent_type) = 'GPU' ORDER BY agent_id",
        {"sid": session_id},
    ).fetchall()
    first: dict = {}
    for device, name, details, units in rows:
        first.setdefault(device, (agent_arch(name, details), units, name))
    return pa.table(
        {
            "device": pa.array(list(first), pa.int32()),
            "gfx": pa.array([v[0] for v in first.values()], pa.string()),
            "compute_units": pa.array([v[1] for v in first.values()], pa.int64()),
            "name": pa.array([v[2] for v in first.values()], pa.string()),
        }
    )


@dataclass(frozen=True)
class DatasheetMatch:
    sheet: Datasheet
    compute_scale: float  # the agent's share of the product's compute (1 for a whole GPU)
    bandwidth_scale: float  # and of its memory bandwidth
    how: str  # how the agent was matched, in words
    notes: tuple[str, ...] = field(default=())


def match_datasheet(agent: GpuAgent) -> DatasheetMatch | None:
    """The product an agent is, or None when its architecture has no datasheet here."""
    candidates = [s for s in DATASHEETS if s.arch == agent.arch]
    if not candidates:
        return None
    named = [s for s in candidates if s.named(agent.product_name)]
    pool, how = (named, "product name") if named else (candidates, "architecture")
    cus = agent.compute_units
    compute_scale = bandwidth_scale = 1.0
    notes: list[str] = []
    if cus:
        exact = [s for s in pool if s.compute_units == cus]
        parts = [
            s for s in pool if s.compute_units % cus == 0 and s.compute_units // cus in PARTITIONS
        ]
        if exact:
            pool, how = exact, f"{how} and {cus} CUs"
        elif parts:
            pool = parts
            compute_scale = bandwidth_scale = cus / parts[0].compute_units
            how = f"{how} and {cus} CUs: 1/{parts[0].compute_units // cus} of the product"
        else:
            compute_scale = cus / pool[0].compute_units
            notes.append(
                f"the agent has {cus} CUs, the {pool[0].product} {pool[0].compute_units}: "
                "compute peaks scaled by that share, bandwidth kept"
            )
    clock = agent.max_clock_mhz
    if clock:  # several products left: the one whose peak clock is nearest the agent's
        pool = sorted(pool, key=lambda s: abs(s.peak_clock_mhz - clock))
    chosen = pool[0]
    if len(pool) > 1:
        others = ", ".join(s.product for s in pool[1:])
        notes.append(
            f"assumed {chosen.product}: the agent ({agent.describe()}) could also be {others}"
        )
    if clock and abs(clock - chosen.peak_clock_mhz) > CLOCK_NOTE_TOLERANCE * chosen.peak_clock_mhz:
        notes.append(
            f"the agent reports a {clock:g} MHz engine clock; the datasheet peaks are at "
            f"{chosen.peak_clock_mhz:g} MHz"
        )
    return DatasheetMatch(chosen, compute_scale, bandwidth_scale, how, tuple(notes))


# --- This host's GPU (for a measured envelope) ----------------------------------------------


def local_gpu(device_index: int = 0, nodes: Path = KFD_NODES) -> GpuAgent | None:
    """The GPU a ROCm provider runs on (device `device_index` among KFD's GPU nodes, in node
    order), from the KFD topology; None without one. The product name comes from the DRM
    device when the driver exposes it."""
    gpus = kfd_gpu_nodes(nodes)
    if device_index >= len(gpus):
        return None
    _, props = gpus[device_index]
    simd_per_cu = props.get("simd_per_cu") or 4
    return GpuAgent(
        arch=gfx_name(props.get("gfx_target_version")),
        product_name=_drm_product_name(props.get("drm_render_minor")),
        compute_units=int(props["simd_count"] // simd_per_cu),
        max_clock_mhz=float(props["max_engine_clk_fcompute"])
        if props.get("max_engine_clk_fcompute")
        else None,
        agent_id=f"GPU {device_index}",
    )


def _drm_product_name(render_minor: int | None) -> str | None:
    if render_minor is None:
        return None
    try:
        name = Path(f"/sys/class/drm/renderD{render_minor}/device/product_name").read_text()
    except OSError:
        return None
    return name.strip() or None


# --- Data types of nodes and kernels --------------------------------------------------------

# ONNX element types (numpy names, as graph_nodes.output_dtypes holds them) -> roof data type.
ELEMENT_DTYPES = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "int8": "int8",
    "uint8": "int8",
}
# Ops whose arithmetic is 8-bit integer whatever their output type (int32, float, uint8).
INT8_OPS = frozenset(
    {
        "MatMulInteger",
        "ConvInteger",
        "QLinearMatMul",
        "QLinearConv",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "QGemm",
        "QAttention",
        "DynamicQuantizeLSTM",
    }
)


def element_dtype(element: str | None) -> str | None:
    """The roof data type of an ONNX element type name; None for other types (int64, bool)."""
    if not element:
        return None
    element = element.lower()
    if element.startswith("float8"):
        return "fp8"
    return ELEMENT_DTYPES.get(element)


def node_dtype(
    op_type: str | None,
    output_dtypes: Iterable[str | None] | None,
    runtime_op_types: Iterable[str | None] = (),
) -> str | None:
    """A graph node's data type: int8 when it (or the runtime op that ran it) is an integer
    GEMM, else its first output's element type; None when neither says."""
    if op_type in INT8_OPS or any(op in INT8_OPS for op in runtime_op_types or ()):
        return "int8"
    for element in output_dtypes or ():
        found = element_dtype(element)
        if found:
            return found
    return None


# Tensile / hipBLASLt kernel names: Cijk_<A layout>_<B layout>_<types>_..., the types led by
# the input type (S float, D double, H half, B bfloat16, X xfloat32, I8 int8, F8/B8 fp8).
_TENSILE = re.compile(r"^Cijk_[A-Za-z]+_[A-Za-z]+_([A-Z0-9]+)_")
_TENSILE_TYPES = (
    ("F8", "fp8"), ("B8", "fp8"), ("I8", "int8"), ("4xi8", "int8"), ("X", "tf32"),
    ("H", "fp16"), ("B", "bf16"), ("S", "fp32"), ("D", "fp64"),
)  # fmt: skip
# Other kernels: C++ type names and suffixes in (possibly mangled) names. The lowest precision
# found wins: a GEMM's inputs set its roof; elementwise kernels sit far below any roof anyway.
_KERNEL_TYPES = (
    (r"float8|fp8|f8e4m3|f8e5m2|e4m3|e5m2", "fp8"),
    (r"(?<![a-z0-9])u?int8|(?<![a-z0-9])[iu]8(?![0-9])", "int8"),
    (r"bfloat16|bf16|DF16b", "bf16"),
    (r"(?<![a-z])half(?![a-z])|float16|fp16|(?<![a-z0-9])[fh]16(?![0-9])|DF16_|N3c104HalfE", "fp16"),
    (r"(?<![a-z])float(?![a-z0-9_])|fp32|(?<![a-z0-9])f32(?![0-9])", "fp32"),
    (r"(?<![a-z])double(?![a-z])|fp64|(?<![a-z0-9])f64(?![0-9])", "fp64"),
)  # fmt: skip
_KERNEL_PATTERNS = tuple((re.compile(p, re.IGNORECASE), d) for p, d in _KERNEL_TYPES)
_PRECISION_ORDER = ("fp8", "int8", "bf16", "fp16", "tf32", "fp32", "fp64")


def kernel_dtype(kernel_name: str | None) -> str | None:
    """The data type a device kernel computes in, when its name tells; None otherwise (its
    node then sits under the fp32 roof)."""
    if not kernel_name:
        return None
    tensile = _TENSILE.match(kernel_name)
    if tensile:
        types = tensile.group(1)
        for prefix, dtype in _TENSILE_TYPES:
            if types.startswith(prefix):
                return dtype
    found = {dtype for pattern, dtype in _KERNEL_PATTERNS if pattern.search(kernel_name)}
    return next((dtype for dtype in _PRECISION_ORDER if dtype in found), None)


def datasheet_markdown() -> str:
    """The datasheet table, for README."""
    shown = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
    lines = [
        "| product | arch | CUs | clock MHz | " + " | ".join(shown) + " | memory TB/s | source |",
        "| --- | --- | ---: | ---: |" + " ---: |" * len(shown) + " ---: | --- |",
    ]
    for sheet in DATASHEETS:
        peaks = sheet.peaks()
        cells = " | ".join(f"{peaks[d] / 1e12:.1f}" if d in peaks else "—" for d in shown)
        lines.append(
            f"| {sheet.product} | {sheet.arch} | {sheet.compute_units} | "
            f"{sheet.peak_clock_mhz:g} | {cells} | "
            f"{sheet.memory_bandwidth_bytes_per_s / 1e12:.3g} | [spec]({sheet.url}) |"
        )
    return "\n".join(lines) + "\n"

"""What a hardware envelope is: the peaks a roofline is judged against, and where they came from.

A HardwareEnvelope holds one ResourcePeak per resource: the fp32 GEMM (the roof of fp32 nodes
and of nodes whose data type has no peak of its own), one GEMM per other data type
(dtype_gemm), streaming bandwidth from memory, and the bandwidth of each cache level. It is
measured on this host (measure.measure_envelope) or taken from a GPU's datasheet
(datasheet_envelope): source says which, and reference names the document.

An elementwise op whose tensors sit in L2 or the last-level cache legitimately moves bytes
faster than DRAM; judged against the DRAM slope it would sit above its roof. So the roofline is
hierarchical: memory_ceilings() lists (level, capacity, B/s) from the smallest cache to DRAM,
and ceiling_for(bytes_moved) is the ceiling of the smallest level whose capacity holds an op's
bytes (DRAM when they are unknown or larger than every cache). A cache ceiling measured below a
larger level's or DRAM's is noise: it is raised to that one, and its sweep entries say which
(clamped_to).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field

from aaco_pipelines.analysis.envelope.datasheets import (
    FALLBACK_DTYPE,
    GpuAgent,
    match_datasheet,
)
from aaco_pipelines.analysis.envelope.host_peak import TheoreticalPeak

GEMM_DTYPES = ("fp16", "bf16", "int8")  # measured besides fp32 where the provider runs them
# An envelope measured while other processes took more of the host's CPU time than this is
# contended: a quiet 2-core host measured 0-3 %, two busy loops 68 %.
CONTENDED_SHARE = 0.2


@dataclass(frozen=True)
class ResourcePeak:
    resource: str  # "gemm_flops" | "memory_bandwidth" | "cache_bandwidth"
    peak: float  # median of the repeats at the best size
    spread_low: float  # min of those repeats
    spread_high: float  # max of those repeats
    unit: str  # "FLOP/s" | "B/s"
    sweep: list[dict]  # every size tried, in order: kernel, size, median, low, high, repeats, ...

    def peak_entry(self) -> dict:
        """The sweep entry the peak came from (its kernel and size: where it saturated)."""
        return _best_entry(self.sweep)


@dataclass(frozen=True)
class HardwareEnvelope:
    target: str
    providers: list[str]  # what the microbenchmark sessions actually ran on
    runtime_fingerprint: str
    measured_at_ns: int
    gemm: ResourcePeak  # fp32: the roof of fp32 nodes and of nodes whose type has no peak
    bandwidth: ResourcePeak
    source: str = "measured"  # "measured" | "datasheet"
    device: dict | None = None  # the GPU: arch, product_name, compute_units, max_clock_mhz
    dtype_gemm: dict[str, ResourcePeak] = field(default_factory=dict)  # fp16, bf16, int8, ...
    dtype_notes: dict[str, str] = field(default_factory=dict)  # why a data type has no peak
    reference: dict | None = None  # datasheet: product, url, white paper, how matched, notes
    # Share of the host's CPU time other processes took while this was measured (None: not
    # known, a datasheet or an envelope stored before it was recorded).
    host_contention: float | None = None
    # The host CPU's theoretical fp32 peak (host_peak.TheoreticalPeak as a dict): None on a GPU,
    # from a datasheet, where cpuinfo does not say, or stored before it was recorded.
    theoretical: dict | None = None
    # Bandwidth of the CPU's data caches ("L2", "L3"): the same Add at a working set inside each
    # level; each sweep entry has working_set_bytes and capacity_bytes. Empty on a measured GPU.
    # From a GPU datasheet: the published "L2" and "LDS" peaks (datasheets.LEVEL_SOURCES),
    # without a sweep, so without a capacity: memory_ceilings (which places an op by the bytes
    # it moves) leaves them out, and the counted roofline judges each level's counted bytes
    # against them (analysis.kernels.diagnosis).
    cache_bandwidth: dict[str, ResourcePeak] = field(default_factory=dict)

    @property
    def contended(self) -> bool:
        """Measured while other work held the host's CPUs: its peaks may be too low."""
        return self.host_contention is not None and self.host_contention > CONTENDED_SHARE

    def ridge_point(self) -> float:
        """FLOP per byte where the roofline bends: gemm.peak / bandwidth.peak."""
        return self.gemm.peak / self.bandwidth.peak

    def gemm_peaks(self) -> dict[str, float]:
        """GEMM peak per data type, fp32 first."""
        return {FALLBACK_DTYPE: self.gemm.peak, **{d: p.peak for d, p in self.dtype_gemm.items()}}

    def roof_dtype(self, dtype: str | None) -> str:
        """The data type whose peak is a node's roof: its own, else fp32."""
        return dtype if dtype in self.dtype_gemm else FALLBACK_DTYPE

    def for_dtype(self, dtype: str | None) -> HardwareEnvelope:
        """This envelope with the GEMM roof of `dtype` (fp32 when it has none)."""
        roof = self.roof_dtype(dtype)
        if roof == FALLBACK_DTYPE:
            return self
        return dataclasses.replace(self, gemm=self.dtype_gemm[roof])

    def theoretical_share(self) -> float | None:
        """The measured fp32 GEMM peak as a share of the host's theoretical fp32 peak; None where
        that is not known (or on the envelope for_dtype made for another type's roof)."""
        flops = (self.theoretical or {}).get("flops_per_s")
        if not flops or flops <= 0 or self.gemm in self.dtype_gemm.values():
            return None
        return self.gemm.peak / flops

    def memory_ceilings(self) -> list[tuple[str, float | None, float]]:
        """(level, capacity in bytes, peak B/s) of each bandwidth ceiling, the smallest (fastest)
        cache first and ("DRAM", None, bandwidth.peak) last. A level's ceiling is never below
        a larger level's or DRAM's (data that fits a cache also fits every larger one, so a
        lower measurement is noise): it is raised to theirs."""
        levels = []
        for name, peak in self.cache_bandwidth.items():
            capacity = peak.peak_entry().get("capacity_bytes") if peak.sweep else None
            if capacity:
                levels.append((name, float(capacity), peak.peak))
        ceilings = [("DRAM", None, self.bandwidth.peak)]
        floor = self.bandwidth.peak
        for name, capacity, peak in sorted(levels, key=lambda level: -level[1]):
            floor = max(floor, peak)
            ceilings.insert(0, (name, capacity, floor))
        return ceilings

    def ceiling_for(self, bytes_moved: float | None) -> tuple[str, float]:
        """(level, peak B/s) an op moving `bytes_moved` is judged against: the smallest level
        whose capacity holds them; DRAM when unknown or larger than every cache."""
        for name, capacity, peak in self.memory_ceilings():
            if capacity is not None and bytes_moved is not None and bytes_moved <= capacity:
                return name, peak
        return "DRAM", self.bandwidth.peak

    def describe(self) -> str:
        """Where the peaks come from, in a few words."""
        device = self.device or {}
        name = device.get("product_name") or device.get("arch")
        if self.source == "datasheet":
            ref = self.reference or {}
            return f"datasheet of the {ref.get('product', name)} ({device.get('arch')})"
        on = ", ".join(self.providers) or self.target
        described = f"measured on {on}" + (f" ({name}, {device.get('arch')})" if name else "")
        share = self.theoretical_share()
        if share is not None:
            theoretical = self.theoretical
            flops = f"{theoretical['flops_per_s']:.2g}".replace("e+", "e")
            try:
                formula = f" ({TheoreticalPeak.from_dict(theoretical).formula()})"
            except (TypeError, ValueError):  # stored by another version: the number only
                formula = ""
            described += f", fp32 GEMM at {share:.0%} of the host's theoretical {flops} FLOP/s"
            described += formula
        if self.contended:
            described += (
                f", while other processes took {self.host_contention:.0%} of the host's CPU "
                "time: its peaks may be low"
            )
        return described

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> HardwareEnvelope:
        return cls(
            target=d["target"],
            providers=list(d["providers"]),
            runtime_fingerprint=d["runtime_fingerprint"],
            measured_at_ns=int(d["measured_at_ns"]),
            gemm=ResourcePeak(**d["gemm"]),
            bandwidth=ResourcePeak(**d["bandwidth"]),
            source=d.get("source", "measured"),
            device=d.get("device"),
            dtype_gemm={k: ResourcePeak(**v) for k, v in (d.get("dtype_gemm") or {}).items()},
            dtype_notes=dict(d.get("dtype_notes") or {}),
            reference=d.get("reference"),
            host_contention=d.get("host_contention"),
            theoretical=d.get("theoretical"),
            cache_bandwidth={
                k: ResourcePeak(**v) for k, v in (d.get("cache_bandwidth") or {}).items()
            },
        )


def datasheet_envelope(agent: GpuAgent, now_ns: int | None = None) -> HardwareEnvelope | None:
    """The published peaks of the GPU an agent is (analysis.envelope.datasheets), scaled to the agent's
    share of the product; None when its architecture has no datasheet."""
    match = match_datasheet(agent)
    if match is None:
        return None
    sheet = match.sheet
    peaks = {d: p * match.compute_scale for d, p in sheet.peaks().items()}
    bandwidth = sheet.memory_bandwidth_bytes_per_s * match.bandwidth_scale

    def published(resource: str, value: float, unit: str) -> ResourcePeak:
        return ResourcePeak(resource, value, value, value, unit, [])

    missing = [d for d in GEMM_DTYPES + ("fp64", "tf32", "fp8") if d not in peaks]
    levels = {
        level: published("cache_bandwidth", peak * match.compute_scale, "B/s")
        for level, peak in sheet.level_bandwidths().items()
    }
    return HardwareEnvelope(
        target=agent.arch or "unknown",
        providers=[],
        runtime_fingerprint="datasheet",
        measured_at_ns=time.time_ns() if now_ns is None else now_ns,
        gemm=published("gemm_flops", peaks["fp32"], "FLOP/s"),
        bandwidth=published("memory_bandwidth", bandwidth, "B/s"),
        source="datasheet",
        device=agent.to_dict(),
        dtype_gemm={
            d: published("gemm_flops", p, "FLOP/s")
            for d, p in peaks.items()
            if d not in (FALLBACK_DTYPE, "fp32_vector")
        },
        dtype_notes={d: f"the {sheet.product} has no {d} peak" for d in missing},
        cache_bandwidth=levels,
        reference={
            "product": sheet.product,
            "url": sheet.url,
            "rates": sheet.white_paper[0],
            "rates_url": sheet.white_paper[1] or None,
            "matched_by": match.how,
            "compute_scale": match.compute_scale,
            "bandwidth_scale": match.bandwidth_scale,
            "peak_clock_mhz": sheet.peak_clock_mhz,
            "compute_units": sheet.compute_units,
            "memory": sheet.memory,
            "fp32_vector_flops_per_s": peaks.get("fp32_vector"),
            "notes": list(match.notes),
            "basis": "dense peaks (no sparsity) at the peak engine clock: FLOP/clock/CU x CUs x "
            "clock; matrix rates where the GPU has matrix cores",
        },
    )


def sweep_peak(resource: str, unit: str, sweep: list[dict]) -> ResourcePeak:
    """The peak of a sweep: its best entry's median and spread, the whole sweep kept."""
    best = _best_entry(sweep)
    return ResourcePeak(resource, best["median"], best["low"], best["high"], unit, sweep)


def _best_entry(sweep: list[dict]) -> dict:
    """The fastest size that measured the resource itself; the largest size when every one was
    cache-resident (then the peak is an upper bound on memory bandwidth)."""
    counted = [entry for entry in sweep if not entry.get("cache_resident")] or sweep[-1:]
    return max(counted, key=lambda entry: entry["median"])

"""The theoretical fp32 peak of the host's CPU cores, from /proc/cpuinfo and sysfs.

    flops_per_s = cores x clock x SIMD fp32 lanes x FMA units per core x 2 (an FMA is 2 FLOP)

  clock        the largest cpufreq `cpuinfo_max_freq` of sysfs (kHz), else the largest "cpu MHz"
               of cpuinfo (the current or nominal clock: a boost clock may be higher, and so may
               a measured peak)
  lanes        from the instruction sets cpuinfo lists: avx512f 16, avx/avx2 8, sse2 4 (x86
               `flags`); asimd 4 (aarch64 `Features`). Without FMA (avx without fma, sse2) a
               core issues a multiply and an add: 1 FLOP per lane per unit and cycle
  FMA units    2 per core, assumed: x86 cores since Haswell and most Zen issue two FMAs a cycle;
               some AVX-512 parts have one 512-bit unit (there the peak is half of this)
  cores        given by the caller: the threads its work ran on, at most the physical cores
               they may use (physical_cores: SMT siblings share one core's units)

It is a ceiling to compare a measured GEMM peak with, not a roof: nothing here is measured.
Every reader returns None on missing or odd files, so a caller can say "not known".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
SYSFS_CPU = Path("/sys/devices/system/cpu")
FMA_UNITS_PER_CORE = 2  # the assumption stated in TheoreticalPeak.how


@dataclass(frozen=True)
class TheoreticalPeak:
    cores: int
    clock_hz: float
    simd_fp32_lanes: int
    fma_units_per_core: int  # FMA units, or multiply and add units when the ISA has no FMA
    flops_per_s: float
    how: str  # which sources and which assumption
    fma: bool = True  # False: a unit does 1 FLOP per lane and cycle, not 2

    def formula(self) -> str:
        """The product in a few words: '2 cores x 2.6 GHz x 16 lanes x 2 FMA x 2'."""
        units = (
            f"{self.fma_units_per_core} FMA x 2"
            if self.fma
            else f"{self.fma_units_per_core} mul/add units x 1"
        )
        return (
            f"{self.cores} cores x {self.clock_hz / 1e9:.3g} GHz x {self.simd_fp32_lanes} lanes "
            f"x {units}"
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TheoreticalPeak:
        return cls(**d)


def theoretical_cpu_peak(
    cores: int, cpuinfo: Path = CPUINFO, sysfs_cpu: Path = SYSFS_CPU
) -> TheoreticalPeak | None:
    """The fp32 FLOP/s `cores` cores of this CPU could reach at most; None when the clock or the
    SIMD width cannot be read."""
    if not isinstance(cores, int) or cores <= 0:
        return None
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    fields = _cpuinfo_fields(text)
    clock = _sysfs_max_clock_hz(sysfs_cpu)
    clock_source = f"cpufreq cpuinfo_max_freq in {sysfs_cpu}"
    if clock is None:
        clock = _cpuinfo_clock_hz(fields)
        clock_source = f"largest 'cpu MHz' of {cpuinfo} (current or nominal: a boost may be higher)"
    simd = _simd(fields)
    if clock is None or simd is None:
        return None
    lanes, fma, isa = simd
    flops = cores * clock * lanes * FMA_UNITS_PER_CORE * (2 if fma else 1)
    how = f"clock: {clock_source}; lanes: {isa} in {cpuinfo}; " + (
        f"assumed {FMA_UNITS_PER_CORE} FMA units per core (x86 cores since Haswell and most "
        "Zen issue two FMAs a cycle; some AVX-512 parts have one 512-bit unit)"
        if fma
        else "no FMA: assumed a multiply and an add unit per core, 1 FLOP per lane each"
    )
    return TheoreticalPeak(cores, clock, lanes, FMA_UNITS_PER_CORE, flops, how, fma)


def physical_cores(cpus: Iterable[int], sysfs_cpu: Path = SYSFS_CPU) -> int:
    """How many physical cores the logical CPUs `cpus` are: SMT siblings (one
    topology/thread_siblings_list) count once. Where sysfs does not say, every CPU counts."""
    cpus = list(cpus)
    cores = set()
    for cpu in cpus:
        topology = sysfs_cpu / f"cpu{cpu}" / "topology"
        try:
            siblings = (topology / "thread_siblings_list").read_text().strip()
        except OSError:
            return len(cpus)
        if not siblings:
            return len(cpus)
        cores.add(siblings)
    return len(cores)


def _cpuinfo_fields(text: str) -> dict[str, list[str]]:
    """Every value of each cpuinfo key, in order (the file repeats them per processor)."""
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    return fields


def _sysfs_max_clock_hz(sysfs_cpu: Path) -> float | None:
    clocks = []
    for path in sysfs_cpu.glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq"):
        try:
            khz = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
        if khz > 0:
            clocks.append(khz * 1e3)
    return max(clocks) if clocks else None


def _cpuinfo_clock_hz(fields: dict[str, list[str]]) -> float | None:
    clocks = []
    for value in fields.get("cpu mhz", []):
        try:
            mhz = float(value)
        except ValueError:
            continue
        if math.isfinite(mhz) and mhz > 0:
            clocks.append(mhz * 1e6)
    return max(clocks) if clocks else None


def _simd(fields: dict[str, list[str]]) -> tuple[int, bool, str] | None:
    """(fp32 lanes, has FMA, the instruction set that said so) of the first processor listed."""
    if fields.get("flags"):  # x86
        flags = set(fields["flags"][0].split())
        if "avx512f" in flags:
            return 16, True, "avx512f"
        if "avx2" in flags or "avx" in flags:
            fma = "fma" in flags
            avx = "avx2" if "avx2" in flags else "avx"
            return 8, fma, f"{avx}+fma" if fma else f"{avx} without fma"
        if "sse2" in flags:
            return 4, False, "sse2"
        return None
    if fields.get("features"):  # aarch64
        if "asimd" in fields["features"][0].split():
            return 4, True, "asimd"
    return None

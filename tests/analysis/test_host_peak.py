"""The host's theoretical fp32 peak, read from fake /proc/cpuinfo and sysfs files."""

from __future__ import annotations

from pathlib import Path

import pytest

from aaco_pipelines.analysis.envelope.host_peak import (
    TheoreticalPeak,
    physical_cores,
    theoretical_cpu_peak,
)

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu MHz\t\t: {mhz0}
flags\t\t: {flags}

processor\t: 1
vendor_id\t: GenuineIntel
cpu MHz\t\t: {mhz1}
flags\t\t: {flags}
"""
AARCH64 = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: 0x41
"""


def cpuinfo(tmp_path: Path, flags: str, mhz=(2900.0, 2100.5)) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(X86.format(flags=flags, mhz0=mhz[0], mhz1=mhz[1]))
    return path


def sysfs(tmp_path: Path, max_khz: dict[int, str] | None = None) -> Path:
    """A sysfs cpu folder with cpufreq/cpuinfo_max_freq (kHz) for the CPUs given."""
    root = tmp_path / "sys_cpu"
    root.mkdir()
    for cpu, khz in (max_khz or {}).items():
        (root / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (root / f"cpu{cpu}" / "cpufreq" / "cpuinfo_max_freq").write_text(f"{khz}\n")
    return root


AVX512 = "fpu sse sse2 ssse3 fma avx avx2 avx512f avx512dq avx512bw"
AVX2 = "fpu sse sse2 ssse3 sse4_2 fma avx avx2"


def test_avx512_with_a_sysfs_max_clock(tmp_path):
    # sysfs wins over cpuinfo's current clock, and its largest CPU counts.
    sys_cpu = sysfs(tmp_path, {0: "3500000", 1: "3700000", 2: "bogus"})
    peak = theoretical_cpu_peak(4, cpuinfo(tmp_path, AVX512), sys_cpu)
    assert (peak.cores, peak.clock_hz, peak.simd_fp32_lanes) == (4, 3.7e9, 16)
    assert peak.fma_units_per_core == 2 and peak.fma
    assert peak.flops_per_s == 4 * 3.7e9 * 16 * 2 * 2
    assert "cpuinfo_max_freq" in peak.how and "avx512f" in peak.how
    assert "two FMAs" in peak.how  # the assumption is stated
    assert peak.formula() == "4 cores x 3.7 GHz x 16 lanes x 2 FMA x 2"


def test_avx2_with_fma_falls_back_to_the_largest_cpu_mhz(tmp_path):
    peak = theoretical_cpu_peak(2, cpuinfo(tmp_path, AVX2), sysfs(tmp_path))
    assert (peak.clock_hz, peak.simd_fp32_lanes, peak.fma) == (2.9e9, 8, True)
    assert peak.flops_per_s == 2 * 2.9e9 * 8 * 2 * 2
    assert "cpu MHz" in peak.how and "avx2+fma" in peak.how


def test_avx_without_fma_counts_one_flop_per_lane_and_unit(tmp_path):
    peak = theoretical_cpu_peak(2, cpuinfo(tmp_path, "fpu sse sse2 avx"), sysfs(tmp_path))
    assert (peak.simd_fp32_lanes, peak.fma) == (8, False)
    assert peak.flops_per_s == 2 * 2.9e9 * 8 * 2 * 1
    assert "no FMA" in peak.how and peak.formula().endswith("2 mul/add units x 1")


def test_sse_only(tmp_path):
    peak = theoretical_cpu_peak(1, cpuinfo(tmp_path, "fpu sse sse2"), sysfs(tmp_path))
    assert (peak.simd_fp32_lanes, peak.fma) == (4, False)
    assert peak.flops_per_s == 1 * 2.9e9 * 4 * 2 * 1


def test_aarch64_asimd_with_its_clock_from_sysfs(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(AARCH64)  # no "cpu MHz" on aarch64: the clock comes from sysfs
    peak = theoretical_cpu_peak(8, info, sysfs(tmp_path, {0: "3000000"}))
    assert (peak.simd_fp32_lanes, peak.fma, peak.clock_hz) == (4, True, 3e9)
    assert peak.flops_per_s == 8 * 3e9 * 4 * 2 * 2
    assert theoretical_cpu_peak(8, info, tmp_path / "none") is None  # and no clock: unknown


def test_missing_clock_is_not_known(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(X86.replace("cpu MHz\t\t: {mhz0}\n", "").replace("cpu MHz\t\t: {mhz1}\n", "")
                    .format(flags=AVX2))  # fmt: skip
    assert theoretical_cpu_peak(2, info, sysfs(tmp_path)) is None
    # Unparsable or zero clocks count as missing too.
    assert theoretical_cpu_peak(2, cpuinfo(tmp_path, AVX2, ("n/a", 0)), tmp_path / "none") is None


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff\xfe garbage \x80\x81 : : :\n\n",
        b"flags : \ncpu MHz : 2900\n",  # no instruction set named
        b"cpu MHz : 2900\nflags : mmx 3dnow\n",  # none with fp32 SIMD
        b"",
    ],
)
def test_garbage_is_not_known(tmp_path, content):
    info = tmp_path / "cpuinfo"
    info.write_bytes(content)
    assert theoretical_cpu_peak(2, info, sysfs(tmp_path)) is None


def test_unreadable_files_and_bad_core_counts_are_not_known(tmp_path):
    assert theoretical_cpu_peak(2, tmp_path / "absent", tmp_path / "absent") is None
    assert theoretical_cpu_peak(2, tmp_path, tmp_path) is None  # a folder, not a file
    good = cpuinfo(tmp_path, AVX2)
    assert theoretical_cpu_peak(0, good, tmp_path) is None
    assert theoretical_cpu_peak(-1, good, tmp_path) is None


def test_the_peak_round_trips_through_a_dict(tmp_path):
    peak = theoretical_cpu_peak(2, cpuinfo(tmp_path, AVX2), sysfs(tmp_path))
    assert TheoreticalPeak.from_dict(peak.to_dict()) == peak


def test_smt_siblings_count_as_one_physical_core(tmp_path):
    for cpu, siblings in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings)
    assert physical_cores([0, 1, 2, 3], tmp_path) == 2
    assert physical_cores([0, 2], tmp_path) == 1
    assert physical_cores([0, 1, 7], tmp_path) == 3  # cpu7 unknown: every CPU counts

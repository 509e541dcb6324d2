"""The caches a working set can sit in: the CPU's data cache levels from sysfs, and the largest
cache of a GPU.

A streaming size small enough to sit in the last-level cache measures the cache, not memory
(last_level_cache_bytes; sweep.CACHE_MARGIN). The CPU's cache sizes come from cpu0's sysfs; on
a GPU the largest AMD Instinct cache (MI300X's 256 MiB Infinity Cache) is assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

GPU_LAST_LEVEL_CACHE_BYTES = 256 << 20  # MI300X Infinity Cache, the largest on AMD Instinct
_CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache_bytes(device: str) -> int | None:
    """The largest cache a streaming kernel could sit in: the CPU's highest-level cache from
    sysfs (None where sysfs does not say), or GPU_LAST_LEVEL_CACHE_BYTES on a GPU."""
    if device != "cpu":
        return GPU_LAST_LEVEL_CACHE_BYTES
    caches = []
    for index in _CPU_CACHES.glob("index*"):
        try:
            level = int((index / "level").read_text())
            size = _cache_size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        caches.append((level, size))
    return max(caches)[1] if caches else None


def _cache_size_bytes(text: str) -> int:
    """sysfs cache sizes: "49152K", "48M", or plain bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@dataclass(frozen=True)
class CacheLevel:
    """One CPU data cache level, as cpu0's sysfs describes it."""

    name: str  # "L2", "L3"
    size_bytes: int  # one instance
    shared_cpus: int  # logical CPUs sharing one instance (shared_cpu_list)

    def capacity_bytes(self, threads: int) -> int:
        """What the data of `threads` threads can fill: one instance per shared_cpus threads
        (a per-core cache holds one thread's share, a cache shared by all of them its size)."""
        return self.size_bytes * math.ceil(max(threads, 1) / self.shared_cpus)


def cpu_cache_levels() -> list[CacheLevel]:
    """The CPU data caches an elementwise kernel's working set can sit in, smallest level
    first: level 2 and above (L1 holds too little to time one session run in), instruction
    caches skipped, and any level whose size or sharing sysfs does not say."""
    levels: dict[int, CacheLevel] = {}
    for index in _CPU_CACHES.glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _cache_size_bytes((index / "size").read_text())
            shared = len(_cpu_list((index / "shared_cpu_list").read_text()))
        except (OSError, ValueError):
            continue
        if level < 2 or kind == "Instruction" or size <= 0 or shared <= 0:
            continue
        if level not in levels or size > levels[level].size_bytes:
            levels[level] = CacheLevel(f"L{level}", size, shared)
    return [levels[level] for level in sorted(levels)]


def _cpu_list(text: str) -> set[int]:
    """A sysfs CPU list ("0-3,8,10-11") as CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus

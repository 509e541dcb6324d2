"""Timing a kernel, and sweeping its sizes until the resource saturates.

Each size is swept upward until the median stops improving by SATURATION_GAIN for PATIENCE
sizes in a row (one noisy size on a shared host must not end the sweep early) or the time
budget is spent. Per size: WARMUP_RUNS runs, then `repeats` measurements, each timing enough
runs to last MIN_MEASUREMENT_S.

A streaming size whose working set (two inputs and the output) is under CACHE_MARGIN times the
last-level cache is marked cache_resident: it measures the cache, not memory, so it neither ends
the sweep nor sets the peak (unless no size cleared the cache; then the largest one does).

The cache sweeps (CPU only) run the same Add at working sets inside each data cache level
(caches.cpu_cache_levels), half then a quarter of the capacity the sessions' threads fill (a
per-core cache: its size x threads, one instance per CPUs sharing it; a shared cache: its
size), always above the next smaller level's capacity.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from aaco_pipelines.analysis.envelope.caches import cpu_cache_levels, last_level_cache_bytes
from aaco_pipelines.analysis.envelope.kernels import ADD, Kernel
from aaco_pipelines.analysis.envelope.record import ResourcePeak, sweep_peak
from aaco_pipelines.analysis.envelope.session import Runtime, bound_session
from aaco_pipelines.foundation.address_space import address_space_left

CACHE_MARGIN = 2  # a working set this many times the last-level cache streams from memory
SATURATION_GAIN = 0.05
PATIENCE = 2
WARMUP_RUNS = 2
MIN_MEASUREMENT_S = 0.05
# Working sets measured per cache level, as shares of its capacity, the first always: half
# leaves room for the code, the stack and whatever else the cores touch meanwhile.
CACHE_FILL = (0.5, 0.25)
HOST_MEMORY_SHARE = 0.5  # never build feeds larger than this share of available host memory


def _seconds_per_run(run: Callable[[], None], iterations: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(iterations):
        run()
    return (time.perf_counter_ns() - start) * 1e-9 / iterations


def _measure_size(ort, runtime: Runtime, kernel: Kernel, size: int, repeats: int):
    """One sweep entry (rates in work per second over `repeats` measurements) and the providers.

    `setup_s` is everything but the runs (model, feeds, session): it predicts the next size's cost.
    """
    started = time.perf_counter()
    bound = bound_session(ort, runtime, kernel.build(size), kernel.feeds(size))
    setup_s = time.perf_counter() - started
    run_s = min(_seconds_per_run(bound.run, 1) for _ in range(WARMUP_RUNS))
    iterations = max(1, math.ceil(MIN_MEASUREMENT_S / run_s))
    rates = np.array(
        [kernel.work(size) / _seconds_per_run(bound.run, iterations) for _ in range(repeats)]
    )
    entry = {
        "kernel": kernel.name,
        "size": size,
        "median": float(np.median(rates)),
        "low": float(rates.min()),
        "high": float(rates.max()),
        "repeats": repeats,
        "iterations": iterations,
        "seconds_per_run": run_s,
        "setup_s": setup_s,
        "wall_s": time.perf_counter() - started,
    }
    return entry, bound.session.get_providers()


def _predicted_seconds(kernel: Kernel, last: dict, size: int, repeats: int) -> float:
    """Wall time of the next size, scaled from the last: set-up, warm-up, timed repeats."""
    data_ratio = kernel.feed_bytes(size) / kernel.feed_bytes(last["size"])
    run_s = last["seconds_per_run"] * (size / last["size"]) ** kernel.work_exponent
    return (
        last["setup_s"] * data_ratio + WARMUP_RUNS * run_s + repeats * max(MIN_MEASUREMENT_S, run_s)
    )


def _stalled(medians: list[float]) -> bool:
    """True when each of the last PATIENCE sizes failed to beat every earlier one by the gain."""
    if len(medians) <= PATIENCE:
        return False
    best_before = max(medians[:-PATIENCE])
    return all(m < best_before * (1 + SATURATION_GAIN) for m in medians[-PATIENCE:])


def sweep_sizes(ort, runtime: Runtime, kernel: Kernel, repeats: int, deadline: float):
    """Sizes upward until saturated, out of budget or out of host memory; always one size."""
    sweep: list[dict] = []
    providers: list[str] = []
    memory_cap = _available_host_bytes() * HOST_MEMORY_SHARE
    cache = last_level_cache_bytes(runtime.device) if kernel.streams_memory else None
    for size in kernel.sizes:
        if sweep and (
            _stalled([entry["median"] for entry in sweep if not entry["cache_resident"]])
            or kernel.feed_bytes(size) > memory_cap
            or time.perf_counter() + _predicted_seconds(kernel, sweep[-1], size, repeats) > deadline
        ):
            break
        entry, providers = _measure_size(ort, runtime, kernel, size, repeats)
        entry["cache_resident"] = (
            cache is not None and kernel.feed_bytes(size) < CACHE_MARGIN * cache
        )
        sweep.append(entry)
    return sweep, providers


def _cache_sizes(capacity: int, smaller_capacity: int) -> tuple[int, ...]:
    """ADD sizes (elements) whose working sets fill CACHE_FILL of `capacity` but exceed the next
    smaller level's capacity (else they would measure that level); midway between when none
    does. Whole 64-byte lines of float32."""
    sets = [capacity * f for f in CACHE_FILL if capacity * f > smaller_capacity]
    sets = sets or [(capacity + smaller_capacity) / 2]
    sizes = (max(16, int(s // ADD.feed_bytes(1)) // 16 * 16) for s in sets)
    return tuple(dict.fromkeys(sizes))


def sweep_caches(
    ort, runtime: Runtime, threads: int, repeats: int, deadline: float
) -> dict[str, list[dict]]:
    """The Add at working sets inside each CPU cache level, largest first (half its capacity);
    each level's first size always, the others while the deadline allows."""
    sweeps: dict[str, list[dict]] = {}
    smaller = 0
    for level in cpu_cache_levels():
        capacity = level.capacity_bytes(threads)
        sweep: list[dict] = []
        for size in _cache_sizes(capacity, smaller):
            if sweep and (
                time.perf_counter() + _predicted_seconds(ADD, sweep[-1], size, repeats) > deadline
            ):
                break
            entry, _ = _measure_size(ort, runtime, ADD, size, repeats)
            entry.update(
                working_set_bytes=ADD.feed_bytes(size),
                capacity_bytes=capacity,
                level_bytes=level.size_bytes,
                shared_cpus=level.shared_cpus,
                threads=threads,
            )
            sweep.append(entry)
        sweeps[level.name] = sweep
        smaller = capacity
    return sweeps


def cache_peaks(sweeps: dict[str, list[dict]], dram: ResourcePeak) -> dict[str, ResourcePeak]:
    """Each level's peak. An entry slower than a larger level's ceiling or DRAM's records which
    one it fell below (clamped_to): memory_ceilings raises such a level's ceiling to it."""
    floor_name, floor = "DRAM", dram.peak
    peaks = {}
    for name in reversed(list(sweeps)):  # the largest level first
        if not sweeps[name]:
            continue
        for entry in sweeps[name]:
            entry["clamped_to"] = floor_name if entry["median"] < floor else None
        peaks[name] = sweep_peak("cache_bandwidth", "B/s", sweeps[name])
        if peaks[name].peak > floor:
            floor_name, floor = name, peaks[name].peak
    return {name: peaks[name] for name in sweeps if name in peaks}


def _available_host_bytes() -> int:
    """Available host memory, or what this process may still map under `ulimit -v` if less."""
    import psutil

    available = int(psutil.virtual_memory().available)
    left = address_space_left()
    return available if left is None else min(available, left)

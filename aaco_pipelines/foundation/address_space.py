"""The address-space limit of this process (`ulimit -v`, a batch system's memory cap).

Under such a limit every thread's stack, malloc arena and mapped library counts, not only the
memory touched, so aaco sizes what it can (DuckDB, the envelope's buffers) to fit what is left,
and says "out of memory" in one line where nothing can fit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource

_M_ARENA_MAX = -8  # glibc's mallopt parameter


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS in bytes, or None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def describe_limit() -> str:
    limit = address_space_limit()
    return "unlimited" if limit is None else f"{limit >> 10} KiB"


def address_space_left() -> int | None:
    """Bytes this process may still map under its limit, or None when there is no limit."""
    limit = address_space_limit()
    if limit is None:
        return None
    import psutil

    return max(0, limit - psutil.Process().memory_info().vms)


# What a measurement needs beyond its libraries: threads' stacks, DuckDB's pool, the envelope's
# and the profile's buffers. Below it, a run failed at random places, or hung in a Parquet read
# whose pool thread could not start (ulimit -v 800000).
MIN_HEADROOM = 384 << 20


def require_headroom() -> None:
    """Under a limit, MemoryError now unless MIN_HEADROOM is left once aaco's libraries are
    mapped: one clear line before any work, instead of a failure or a hang part-way through."""
    if address_space_limit() is None:
        return
    # What a measurement maps: ONNX Runtime, onnx, DuckDB, Arrow, and scipy (verdicts import it
    # when they judge). Named here, not through the pipeline's modules: this module is below them.
    import duckdb  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import scipy.special  # noqa: F401

    left = address_space_left()
    if left is not None and left < MIN_HEADROOM:
        raise MemoryError(f"{left >> 20} MiB left after loading libraries")


def fit_address_space() -> None:
    """Under an address-space limit, at most two malloc arenas (glibc; elsewhere nothing): each
    thread's arena otherwise reserves 64 MiB; and one thread in each of Arrow's pools: a pool
    thread that cannot get its stack hung a Parquet read for ever (pyarrow 22, `ulimit -v`
    800000). And one OpenBLAS thread, set before numpy loads it: an OpenBLAS thread that
    cannot get its stack makes OpenBLAS raise SIGINT in its own process (300 MiB), which read
    as a user's Ctrl-C. Call before any thread starts."""
    if address_space_limit() is None:
        return
    try:
        ctypes.CDLL(ctypes.util.find_library("c")).mallopt(_M_ARENA_MAX, 2)
    except (OSError, AttributeError):
        pass
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the measuring process inherits it
    import pyarrow

    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)

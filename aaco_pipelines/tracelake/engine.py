"""Every DuckDB connection aaco opens, sized to the memory the process may use.

DuckDB sizes its buffer pool from the machine's physical memory (80 %), and each of its threads
gets a glibc malloc arena that reserves 64 MiB of address space: one connection took 600 MiB of
address space here (DuckDB 2.0 also starts 8 `async_threads` per database, whatever `threads`
says). Under an address-space limit (`ulimit -v`) that does not fit: queries fail with
out-of-memory, and DuckDB 2.0 crashed the process outright (SIGSEGV under `ulimit -v 1500000`).
So where RLIMIT_AS is set (see address_space.py), DuckDB gets a quarter of the limit, one worker
thread and one async thread; the rest is for ONNX Runtime, Arrow and Python. Every connection in
a process gets the same settings: DuckDB refuses a second connection to one file with another
configuration.

A TraceLake file's DuckDB also gets a fixed memory limit (AACO_DUCKDB_MEMORY_MB, default 1024):
its buffer pool otherwise caches what it reads and writes up to 80 % of the machine, so memory
grew with the trace (exporting 2 * 10^7 kernels to Perfetto took 7 GB), and under the limit
DuckDB spills its sorts and joins to `<lake>.tmp` instead (under DuckDB 1.5 to `<lake>.tmp-<pid>`:
see `settings`). An in-memory database keeps DuckDB's default: there the
limit would bound the data itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.address_space import address_space_limit

SHARE_OF_ADDRESS_SPACE = 0.25
MIN_MEMORY_LIMIT = 64 << 20
LAKE_MEMORY_MB = 1024
LAKE_MIN_MEMORY_MB = 128  # DuckDB's CSV reader alone takes 30 MiB buffers: 64 MiB failed a load
LAKE_MEMORY_VARIABLE = "AACO_DUCKDB_MEMORY_MB"
IN_MEMORY = ":memory:"
# By version, not by asking a connection: under an address-space limit, a connection with
# DuckDB's defaults is what must not be opened.
DUCKDB_2 = int(duckdb.__version__.split(".")[0]) >= 2


def settings(database: str | Path = IN_MEMORY) -> dict[str, str]:
    """DuckDB configuration for a connection of this process to `database`: a memory limit
    for a lake file, and a smaller one (with fewer threads) under an address-space limit."""
    limits = [] if str(database) == IN_MEMORY else [lake_memory_limit()]
    config: dict[str, str] = {}
    if limits and not DUCKDB_2:
        # DuckDB 1.5 names its spill files alike in every process: two processes spilling into
        # one folder at once both died (SIGSEGV). 2.0 names them by process itself.
        config["temp_directory"] = f"{database}.tmp-{os.getpid()}"
    soft = address_space_limit()
    if soft is not None:
        limits.append(max(int(soft * SHARE_OF_ADDRESS_SPACE), MIN_MEMORY_LIMIT))
        config["threads"] = "1"
        if DUCKDB_2:  # async_threads is 2.0's; 1.5 refuses a setting it does not know
            config["async_threads"] = "1"
    if limits:
        config["memory_limit"] = f"{min(limits) >> 20}MiB"
    return config


def lake_memory_limit() -> int:
    """Bytes of memory DuckDB may use for a lake file (AACO_DUCKDB_MEMORY_MB)."""
    value = os.environ.get(LAKE_MEMORY_VARIABLE) or str(LAKE_MEMORY_MB)
    if not value.isdigit() or int(value) < LAKE_MIN_MEMORY_MB:
        raise AacoInputError(
            f"{LAKE_MEMORY_VARIABLE}={value!r} is not a memory size",
            fix=f"set it to a whole number of MiB, at least {LAKE_MIN_MEMORY_MB}, or unset "
            f"it for {LAKE_MEMORY_MB}",
        )
    return int(value) << 20


def connect(database: str | Path = IN_MEMORY, *, read_only: bool = False):
    """duckdb.connect with this process's settings."""
    return duckdb.connect(str(database), read_only=read_only, config=settings(database))


_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


@contextmanager
def memory_at_least(con: duckdb.DuckDBPyConnection, needed: int) -> Iterator[None]:
    """Within the block, the connection's database may use at least `needed` bytes, its own
    limit again after: for the one read that must hold a whole document (a rocprofv3 JSON)."""
    before = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    number, unit = before.split()
    if float(number) * _UNITS[unit] >= needed:
        yield
        return
    con.execute(f"SET memory_limit = '{needed >> 20}MiB'")
    try:
        yield
    finally:
        con.execute(f"SET memory_limit = '{number} {unit}'")

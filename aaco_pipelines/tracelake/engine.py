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
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from aaco_pipelines.address_space import address_space_limit

SHARE_OF_ADDRESS_SPACE = 0.25
MIN_MEMORY_LIMIT = 64 << 20


def settings() -> dict[str, str]:
    """DuckDB configuration for this process: a memory limit under an address-space limit."""
    soft = address_space_limit()
    if soft is None:
        return {}
    limit = max(int(soft * SHARE_OF_ADDRESS_SPACE), MIN_MEMORY_LIMIT)
    config = {"memory_limit": f"{limit >> 20}MiB", "threads": "1"}
    if _has_async_threads():  # DuckDB 2.0's; 1.5 refuses a setting it does not know
        config["async_threads"] = "1"
    return config


def _has_async_threads() -> bool:
    """By version, not by asking a connection: under the limit, a connection with DuckDB's
    defaults is what must not be opened."""
    major = int(duckdb.__version__.split(".")[0])
    return major >= 2


def connect(database: str | Path = ":memory:", *, read_only: bool = False):
    """duckdb.connect with this process's settings."""
    return duckdb.connect(str(database), read_only=read_only, config=settings())

"""Reads of a trace that always end: a time budget, stop signals, and for SQLite a row cap.

A rocpd database's `kernels` is a view, SQL the file brings with it: a recursive one may never
yield a row, or never stop yielding them, while `aaco ingest` holds the TraceLake's write lock.
So every SQLite statement on a trace runs under a progress handler that aborts it once the
read's time budget is spent or a stop signal (SIGTERM, SIGINT, SIGHUP) has arrived, and the
rows it yields are capped by what the file can hold. DuckDB's CSV and JSON reads are
interrupted at the same deadline, and a stop signal that DuckDB turned into "Query
interrupted" is the stop it was.

- Time budget: AACO_TRACE_READ_TIMEOUT_S seconds when set, else 60 s plus 1 s per 10 MB of
  trace (a 1 GB trace: 160 s). A read runs at tens of MB a second, so only a view that
  computes instead of reading, or a stuck file system, meets it.
- Row cap: a row of a SQLite table takes at least 8 bytes of its file (a 2-byte cell pointer,
  the payload-size and rowid varints, and a record header of one byte per column, with at
  least a name, a start and an end column), so a database of N bytes holds at most N / 8
  kernels, calls or copies; a read that yields more is refused.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.stopping import raise_if_stopped, stop_requested

TIMEOUT_VARIABLE = "AACO_TRACE_READ_TIMEOUT_S"
BASE_BUDGET_S = 60.0
BYTES_PER_EXTRA_S = 10_000_000
MIN_ROW_BYTES = 8
# SQLite VM instructions between two looks at the clock and the stop flag: tens of
# microseconds of work, and about 0.1 % of a read's time spent looking.
_CHECK_EVERY = 20_000


@dataclass
class TraceRead:
    """The read of one trace: the user's path (named in errors), its size, the budget, the
    moment it runs out, and the row cap."""

    path: Path
    size: int
    budget_s: float
    deadline: float
    max_rows: int

    @classmethod
    def of(cls, path: Path, size: int) -> TraceRead:
        """A read, starting now, of `size` bytes of trace (a database: the inflated size)."""
        budget = read_budget_s(size)
        return cls(path, size, budget, time.monotonic() + budget, size // MIN_ROW_BYTES)

    def connect(self, database: Path) -> sqlite3.Connection:
        """A read-only connection whose every statement stops at the deadline or a stop
        signal (sqlite3.OperationalError "interrupted": see `explained`). Read it in the main
        thread: only there does a stop signal's handler run."""
        db = sqlite3.connect(database.resolve().as_uri() + "?mode=ro", uri=True)
        db.set_progress_handler(self._should_stop, _CHECK_EVERY)
        return db

    def _should_stop(self) -> bool:
        # In the main thread a pending signal's handler runs on this call and raises; SQLite
        # then aborts as when this returns True, and stop_requested() says which signal.
        return stop_requested() is not None or time.monotonic() > self.deadline

    @contextmanager
    def explained(self) -> Iterator[None]:
        """An aborted SQLite statement as what aborted it: Interrupted for a stop signal, one
        line naming the trace and the budget for the deadline."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "interrupted" not in str(exc):
                raise
            raise_if_stopped()
            if time.monotonic() > self.deadline:
                raise self._timed_out("a view in it may never end") from None
            raise KeyboardInterrupt("the trace read was interrupted") from None

    @contextmanager
    def interrupting(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """DuckDB's reads on `con` interrupted at the deadline; a stop signal DuckDB caught
        ("Query interrupted") raised as the stop it was."""
        fired = threading.Event()

        def interrupt() -> None:
            fired.set()
            con.interrupt()

        timer = threading.Timer(max(self.deadline - time.monotonic(), 0.0), interrupt)
        timer.daemon = True
        timer.start()
        try:
            yield
        except (duckdb.Error, RuntimeError):
            raise_if_stopped()
            if fired.is_set():
                raise self._timed_out("a file in it may never end") from None
            raise
        finally:
            timer.cancel()
        if fired.is_set():  # it ran out as the read finished: its next statement would fail
            raise self._timed_out("a file in it may never end")

    def count(self, rows: int, table: str) -> None:
        """Refuse a SQLite read that has yielded more rows of `table` than the file holds."""
        if rows > self.max_rows:
            raise AacoInputError(
                f"its {table} rows number over {self.max_rows:,}, more than a SQLite file of "
                f"{self.size:,} bytes can hold ({MIN_ROW_BYTES} bytes a row at least): a view "
                "in it computes rows instead of reading them",
                path=self.path,
                fix="re-collect the trace; aaco reads rocpd's own views (data_views.sql) only",
            )

    def _timed_out(self, suspect: str) -> AacoInputError:
        size = f"{self.size / 1e6:.1f} MB" if self.size >= 1e6 else f"{self.size:,} bytes"
        return AacoInputError(
            f"reading the trace took over {round(self.budget_s, 1):g} s, the budget for "
            f"{size}: {suspect}",
            path=self.path,
            fix=f"re-collect the trace; if it is sound and this host slow, set "
            f"{TIMEOUT_VARIABLE} to more seconds",
        )


def read_budget_s(size: int) -> float:
    """Seconds a read of `size` bytes of trace may take (see the module's docstring)."""
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not value:
        return BASE_BUDGET_S + size / BYTES_PER_EXTRA_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise AacoInputError(
            f"{TIMEOUT_VARIABLE}={value!r} is not a number of seconds",
            fix=f"set it to a positive number, or unset it for {BASE_BUDGET_S:.0f} s plus "
            "1 s per 10 MB of trace",
        )
    return seconds

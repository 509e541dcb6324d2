"""An INSERT fed batch by batch from the calling thread, run by DuckDB in a thread of its own.

The SQLite reads of a trace must run in the main thread: only there does a stop signal's
handler run. When DuckDB pulled the batches itself, in its own scan thread, its wait for them
did not always look for signals, and a SIGTERM then waited out the whole read budget. So the
caller reads, and DuckDB inserts beside it: the read and the insert still overlap, as when
DuckDB pulled, with at most a few batches held between them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from contextlib import suppress

import duckdb
import pyarrow as pa

_QUEUED_BATCHES = 4
_POLL_S = 0.1


class _Abandoned(Exception):
    """The reading thread stopped: the INSERT fails with this (its caller rolls it back)."""


def streamed_insert(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    view: str,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch],
) -> int:
    """Run `sql`, which reads the registered `view`, in a thread while `batches` are pulled
    in this one; the rows it inserted. Whatever stops the batches (a stop signal, a deadline,
    a bad row) stops the INSERT, and is raised here."""
    pending: queue.Queue = queue.Queue(maxsize=_QUEUED_BATCHES)
    abandoned = threading.Event()
    outcome: dict = {}

    def pulled() -> Iterator[pa.RecordBatch]:
        while not abandoned.is_set():
            try:
                batch = pending.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if batch is None:
                return
            yield batch
        raise _Abandoned("the trace read stopped")

    def insert() -> None:
        try:
            outcome["rows"] = con.execute(sql).fetchall()[0][0]
        except BaseException as exc:  # handed to the reading thread
            outcome["error"] = exc

    con.register(view, pa.RecordBatchReader.from_batches(schema, pulled()))
    inserting = threading.Thread(target=insert, name="trace-insert", daemon=True)
    inserting.start()
    try:
        for batch in batches:
            if not _handed(pending, batch, inserting):
                break  # the INSERT failed: its error is raised below
        _handed(pending, None, inserting)
        _wait(inserting)
    except BaseException:
        abandoned.set()
        _wait(inserting)
        raise
    finally:
        with suppress(duckdb.Error):  # an aborted transaction refuses even this
            con.unregister(view)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]


def _handed(pending: queue.Queue, batch, inserting: threading.Thread) -> bool:
    """Whether `batch` was queued; False once the INSERT has ended (failed)."""
    while inserting.is_alive():
        try:
            pending.put(batch, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _wait(inserting: threading.Thread) -> None:
    """Join in short waits, so that a stop signal's handler runs meanwhile."""
    while inserting.is_alive():
        inserting.join(_POLL_S)

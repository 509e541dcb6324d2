"""Bounded waits for the two locks on a TraceLake file, and the lake's health when it opens.

Two locks guard the lake. aaco's own writer lock (an flock on `<lake>.lock`, which records the
holder's pid) serializes aaco writers. DuckDB's file lock is taken by every connection: a
read-write one excludes every other process, read-only ones included, while read-only ones share
it. Either can be held by a process that never lets go: a `duckdb` shell opened without
-readonly, or an aaco run stopped with SIGSTOP. So every wait here is bounded
(AACO_LOCK_TIMEOUT_S), says every few seconds what it waits for, and ends in one line naming the
lake, the holder and the fix, instead of hanging or printing a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import psutil

from aaco_pipelines.errors import NO_SPACE_ERRNOS, AacoInputError
from aaco_pipelines.tracelake import engine

# Long enough to sit out another aaco writer's commit (seconds, or tens of seconds for a 10^7-
# kernel GPU trace) and a reader's short query; short enough that a holder which never lets go is
# named within a minute, not after the 5 minutes a user would already have given up at.
DEFAULT_LOCK_TIMEOUT_S = 60.0
FIRST_NOTICE_S = 1.0  # a wait this long is worth a line: locks are normally held for ms
NOTICE_EVERY_S = 5.0

DUCKDB_LOCKED = "Could not set lock on file"
DUCKDB_HOLDER = re.compile(r"\(PID (\d+)\)")
# DuckDB's messages for a file that is not (or no longer) a whole DuckDB database; the first two
# name the file, which must be the lake (not a trace being loaded).
DAMAGED = ("not a valid DuckDB database", "Could not read enough bytes from file")
CORRUPT_BLOCK = "Corrupt database file"
QUOTED_FILE = re.compile(r'file "([^"]+)"')
HEADERS_SIZE = 3 * 4096  # DuckDB's main header and two alternating database headers
NO_SPACE = tuple(os.strerror(code) for code in NO_SPACE_ERRNOS)  # "No space left on device", ...
DAMAGED_FIX = (
    "restore it from a backup, or move it aside (with its .wal, if any) and run `aaco restore`, "
    "which rebuilds it from the session bundles and the lake's journal"
)

Notice = Callable[[str], None]


class TraceLakeBusy(AacoInputError):
    """Another process held the lake longer than the lock timeout."""


class TraceLakeDamaged(AacoInputError):
    """The lake file is not a whole DuckDB database: truncated, overwritten, another format."""


def lock_timeout(given: float | None = None) -> float:
    """The longest wait for a lock: `given`, else AACO_LOCK_TIMEOUT_S, else 60 s."""
    if given is not None:
        return float(given)
    text = os.environ.get("AACO_LOCK_TIMEOUT_S", "").strip()
    if not text:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise AacoInputError(
            f"AACO_LOCK_TIMEOUT_S={text!r} is not a number of seconds",
            fix="set it to the seconds to wait for a busy TraceLake "
            f"(default {DEFAULT_LOCK_TIMEOUT_S:.0f})",
        )
    return value


def print_notice(line: str) -> None:
    """The default progress hook: one line on stderr, where the CLI's messages go."""
    print(f"aaco: {line}", file=sys.stderr, flush=True)


def holder_text(pid: int | None) -> str:
    """'pid 123 (duckdb lake.duckdb)', with ', stopped' for a process stopped by a signal."""
    if pid is None:
        return "another process (pid unknown)"
    try:
        process = psutil.Process(pid)
        command = " ".join(" ".join(process.cmdline()).split()) or process.name()  # one line
        stopped = process.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except (psutil.Error, OSError):
        return f"pid {pid}"
    return f"pid {pid} ({_shorten(command)}){', stopped' if stopped else ''}"


class LockWait:
    """One bounded wait on a lake (both locks of a writer share its deadline)."""

    def __init__(self, lake: Path, timeout_s: float, notice: Notice | None):
        self.lake, self.timeout_s, self.notice = lake, timeout_s, notice or print_notice
        self.started = time.monotonic()
        self.next_notice = self.started + FIRST_NOTICE_S
        self.delay = 0.02

    def tick(self, lock: str, pid: int | None) -> None:
        """Sleep a little before the next try; give up with one line once the time is out."""
        now = time.monotonic()
        waited = now - self.started
        if waited >= self.timeout_s:
            raise self.gave_up(lock, pid, waited)
        if now >= self.next_notice:
            self.notice(
                f"{self.lake}: waiting {waited:.0f} s so far for {lock}, held by "
                f"{holder_text(pid)} (gives up after {self.timeout_s:g} s, AACO_LOCK_TIMEOUT_S)"
            )
            self.next_notice = now + NOTICE_EVERY_S
        time.sleep(min(self.delay, self.started + self.timeout_s - now))
        self.delay = min(self.delay * 2, 0.5)

    def gave_up(self, lock: str, pid: int | None, waited: float) -> TraceLakeBusy:
        holder = holder_text(pid)
        if holder.endswith("stopped"):
            fix = f"resume it (kill -CONT {pid}) or end it (kill {pid})"
        else:
            fix = (
                "close that process: DuckDB lets no one write while another process has the "
                "file open, even read-only (a duckdb shell, with -readonly or not)"
            )
        return TraceLakeBusy(
            f"gave up after {waited:.0f} s waiting for {lock}, held by {holder}",
            path=self.lake,
            fix=f"{fix}, or raise AACO_LOCK_TIMEOUT_S (now {self.timeout_s:g} s)",
        )


@contextlib.contextmanager
def writer_lock(lake: Path, wait: LockWait) -> Iterator[None]:
    """aaco's exclusive writer lock, its holder's pid recorded in the lock file."""
    with open(f"{lake}.lock", "a+") as handle:
        while not _try_lock(handle):
            wait.tick(f"the writer lock {handle.name}", _recorded_pid(handle))
        try:
            with contextlib.suppress(OSError):  # only a name for waiters: never stops a write
                os.ftruncate(handle.fileno(), 0)  # unbuffered: nothing left to fail at close
                os.write(handle.fileno(), f"{os.getpid()}\n".encode())
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_duckdb(lake: Path, *, read_only: bool, wait: LockWait) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to an existing or new lake file, waiting while another process holds
    it; a file that is not a whole DuckDB database is refused with one line."""
    refuse_damaged(lake)
    while True:
        try:
            con = engine.connect(lake, read_only=read_only)
        except duckdb.IOException as exc:
            if DUCKDB_LOCKED not in str(exc):
                error = damaged_or_same(exc, lake)
                if error is exc:
                    raise
                raise error from exc
            found = DUCKDB_HOLDER.search(str(exc))
            wait.tick("DuckDB's file lock", int(found.group(1)) if found else None)
            continue
        except duckdb.ConnectionException as exc:
            if not read_only or "different configuration" not in str(exc):
                raise
            # This process already holds the lake read-write (a reader inside a writer's
            # connection): share that instance, known whole; DuckDB refuses a second one.
            return engine.connect(lake)
        try:  # checked under DuckDB's lock: no other process is rewriting the file now
            refuse_truncated(con, lake)
        except BaseException:
            con.close()
            raise
        return con


def refuse_damaged(lake: Path) -> None:
    """Refuse a lake file that is not DuckDB's (a text, SQLite or random file): DuckDB would try
    to load an extension, over the network, to open a SQLite file."""
    head = _head(lake)
    if head is not None and head[8:12] != b"DUCK":
        is_sqlite = head.startswith(b"SQLite format 3")
        raise damaged(lake, "a SQLite database" if is_sqlite else "not a DuckDB database")


def refuse_truncated(con: duckdb.DuckDBPyConnection, lake: Path) -> None:
    """Refuse a lake file too short for the blocks in use: DuckDB opens a truncated file and
    fails only when a query reaches a missing block. (The header's block count is no bound:
    DuckDB cuts free blocks off the end of the file.)"""
    block_size, used = con.execute(
        "SELECT block_size, used_blocks FROM pragma_database_size()"
    ).fetchall()[0]
    _refuse_shorter_than(lake, used * block_size)


def refuse_missing_blocks(con: duckdb.DuckDBPyConnection, lake: Path) -> None:
    """The thorough form of refuse_truncated (for aaco doctor): the highest block that the
    catalog or any table uses must be in the file."""
    block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0]
    highest = con.execute("SELECT coalesce(max(block_id), -1) FROM pragma_metadata_info()")
    highest = highest.fetchall()[0][0]
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
    ).fetchall()
    for (table,) in tables:
        used = con.execute(
            "SELECT max(greatest(block_id, coalesce(list_max(additional_block_ids), -1))) "
            "FROM pragma_storage_info(?)",
            [table],
        ).fetchall()[0][0]
        highest = max(highest, used if used is not None else -1)
    _refuse_shorter_than(lake, (highest + 1) * block_size)


def _refuse_shorter_than(lake: Path, block_bytes: int) -> None:
    if lake.with_name(lake.name + ".wal").exists():
        # A writer was killed before its checkpoint: DuckDB replays the write-ahead log, and
        # the blocks it counts are not all in the file yet. Not damage: the next write
        # checkpoints them.
        return
    size, needed = lake.stat().st_size, HEADERS_SIZE + block_bytes
    if size < needed:
        raise damaged(lake, f"truncated ({size} of at least {needed} bytes)")


def _head(lake: Path) -> bytes | None:
    try:
        with open(lake, "rb") as handle:
            return handle.read(16)
    except FileNotFoundError:
        return None


def damaged(lake: Path, what: str = "not a DuckDB database or damaged") -> TraceLakeDamaged:
    return TraceLakeDamaged(f"the TraceLake file is {what}", path=lake, fix=DAMAGED_FIX)


def damaged_or_same(exc: duckdb.Error, lake: Path) -> BaseException:
    """The one-line error for a DuckDB error that says the lake file is damaged; else `exc`."""
    text = str(exc)
    about_lake = str(lake.absolute()) in text or str(lake) in text
    if CORRUPT_BLOCK in text or (about_lake and any(found in text for found in DAMAGED)):
        return damaged(lake, f"damaged ({_first_line(exc)})")
    return exc


def write_failure(exc: BaseException, lake: Path) -> BaseException:
    """The one-line error for a lake write that failed on a full or read-only file system, or
    on a damaged file; else `exc` itself."""
    if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
        text, written = os.strerror(exc.errno), exc.filename or lake
    elif isinstance(exc, duckdb.Error):
        text = str(exc)
        found = QUOTED_FILE.search(text)
        written = found.group(1) if found else lake
    else:
        return exc
    problem = next((reason for reason in NO_SPACE if reason in text), None)
    if problem is None:
        return damaged_or_same(exc, lake) if isinstance(exc, duckdb.Error) else exc
    mount = _mount_point(Path(written))
    return AacoInputError(
        f"{problem[0].lower()}{problem[1:]} while writing the TraceLake on {mount}; "
        "this write was rolled back, earlier rows are kept",
        path=lake,
        fix=f"free space on {mount} (df -h {mount}) or make it writable, or point "
        "AACO_TRACELAKE at another file system, then run the command again",
    )


def _try_lock(handle) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _recorded_pid(handle) -> int | None:
    handle.seek(0)
    text = handle.read().strip()
    return int(text) if text.isdigit() else None


def _mount_point(path: Path) -> Path:
    path = path.absolute().parent
    while not os.path.ismount(path):
        path = path.parent
    return path


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

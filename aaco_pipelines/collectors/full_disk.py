"""A write that failed for want of space, told apart from a bad trace, naming the folder that filled.

Loading a trace writes in three places: the TraceLake's folder (its file, WAL and spill files),
AACO_HOME (the bundle, the scratch copy of a gzip trace) and the temporary folder (SQLite's sort
files). When one fills, DuckDB and SQLite say so in their own words ("Could not write file ...:
No space left on device", "database or disk is full"); taken for a read error, that became
"the trace is truncated or corrupt ... re-collect it". This recognises those messages (and
OSError's ENOSPC/EDQUOT/EFBIG) and says which folder filled and which variable moves it.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "database or disk is full")
_QUOTED_PATH = re.compile(r'"(/[^"]+)"')


def full_disk(exc: BaseException, doing: str = "loading the trace") -> AacoInputError | None:
    """The one-line error for `exc` when it, or the error it arose from (DuckDB's "Current
    transaction is aborted" follows its IO error), is a full disk; None for any other."""
    if isinstance(exc, AacoInputError):
        return None  # said already, in one line (the TraceLake's own full-disk error)
    full = next((e for e in _chain(exc) if _is_full(e)), None)
    if full is None:
        return None
    written = _written_file(full)
    variable, folder = _folder_of(written)
    what = f" (writing {written})" if written else ""
    return AacoInputError(
        f"no space left on this folder's disk while {doing}{what}",
        path=folder,
        fix=f"free space there, or point {variable} at a disk with room; the trace is not at "
        "fault and nothing half-written was kept",
    )


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen = 0
    while exc is not None and seen < 8:
        yield exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, AacoInputError):
        return False
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return True
    if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == 13:
        return True  # SQLITE_FULL: its temporary files (sorts, GROUP BY) filled the disk
    message = str(exc).lower()
    return any(words in message for words in _FULL_WORDS)


def _written_file(exc: BaseException) -> Path | None:
    """The file the failed write was to: the OSError's, the one DuckDB quotes, or for SQLite
    (which names none) its temporary folder."""
    if isinstance(exc, OSError) and exc.filename:
        return Path(exc.filename)
    quoted = _QUOTED_PATH.search(str(exc))
    if quoted:
        return Path(quoted.group(1))
    if isinstance(exc, sqlite3.Error):
        return Path(os.environ.get("SQLITE_TMPDIR") or tempfile.gettempdir())
    return None


def _folder_of(written: Path | None) -> tuple[str, Path]:
    """(the variable that moves it, the folder) of the aaco folder holding `written`, the most
    specific first; AACO_HOME when the file is unknown."""
    paths = AacoPaths.from_env()
    folders = [
        ("AACO_HOME", paths.home),  # first: the lake's folder by default, and named so
        ("AACO_TRACELAKE", paths.tracelake.parent),
        ("SQLITE_TMPDIR / TMPDIR", Path(tempfile.gettempdir())),
    ]
    if written is None:
        return "AACO_HOME", paths.home
    written = written.absolute()
    inside = [(v, f) for v, f in folders if written == f or written.is_relative_to(f)]
    if inside:
        return max(inside, key=lambda found: len(found[1].parts))
    return "AACO_HOME / AACO_TRACELAKE / TMPDIR", written if written.is_dir() else written.parent

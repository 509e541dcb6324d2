"""Gzip traces inflated under a cap, and to disk only in AACO_HOME's scratch folder.

Gzip inflates up to a thousandfold: a 2 MB `.db.gz` became 2 GiB in TMPDIR and was accepted. A
trace is inflated up to MAX_RATIO (100) times its compressed size, at least MIN_CAP (64 MiB):
real traces inflate 3-25 times (the RPD sample 3.5x, the rocprofv3 JSON sample 23x). The
SQLite formats must be inflated to a file (SQLite reads no gzip); that file goes to AACO_HOME's
scratch folder (AacoPaths.scratch), whose free space is checked first: the cap there is also
the free space less MARGIN (64 MiB, left for the TraceLake's writes). A full disk names that
folder. The file is removed when the read ends, whatever happened; one left by a killed aaco is
removed by the next inflation (a file in use is held under flock).
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aaco_pipelines.errors import AacoInputError

MAX_RATIO = 100
MIN_CAP = 64 << 20
MARGIN = 64 << 20
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
_PREFIX = ".inflated-"
_ABANDONED_AFTER_S = 5.0  # older than this and unlocked: its aaco is gone


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def ratio_cap(path: Path) -> int:
    """The most bytes the gzip file at `path` may inflate to."""
    return max(MAX_RATIO * path.stat().st_size, MIN_CAP)


def inflated_head(path: Path, head_bytes: int) -> bytes:
    """The first `head_bytes` of the inflated content, once the whole stream is checked to be
    intact and within `ratio_cap` (nothing is written)."""
    cap = ratio_cap(path)
    with _gzip_errors(path):
        with gzip.open(path, "rb") as stream:
            head = stream.read(head_bytes)
            total = len(head)
            while chunk := stream.read(_CHUNK):  # the whole stream must be there, not its start
                total += len(chunk)
                _check_cap(path, total, cap, _ratio_limit(path), _BOMB_FIX)
    return head


@contextmanager
def inflated_copy(path: Path, scratch: Path) -> Iterator[Path]:
    """The gzip file at `path` inflated into `scratch` while in use, removed afterwards."""
    scratch.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(scratch)
    free = shutil.disk_usage(scratch).free
    cap, limit, fix = ratio_cap(path), _ratio_limit(path), _BOMB_FIX
    if free - MARGIN < cap:
        cap = free - MARGIN
        limit = f"the free space of {scratch} ({free >> 20} MiB) less {MARGIN >> 20} MiB kept free"
        fix = "free space there, point AACO_HOME at a disk with room, or inflate it yourself"
    name = path.name.removesuffix(".gz") or "trace"
    handle, plain = tempfile.mkstemp(prefix=_PREFIX, suffix=f"-{name}", dir=scratch)
    with os.fdopen(handle, "wb") as out:
        fcntl.flock(out, fcntl.LOCK_EX)  # in use: never taken for a killed aaco's leftover
        try:
            _inflate(path, out, (cap, limit, fix), scratch)
            yield Path(plain)
        finally:
            os.unlink(plain)


def _inflate(path: Path, out, cap: tuple[int, str, str], scratch: Path) -> None:
    total = 0
    with _gzip_errors(path), gzip.open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            total += len(chunk)
            _check_cap(path, total, *cap)
            try:
                out.write(chunk)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                    raise
                raise AacoInputError(
                    f"no space left on this folder's disk while inflating {path}",
                    path=scratch,
                    fix="free space there, or point AACO_HOME at a disk with room, or give the "
                    "trace inflated (gunzip -k); nothing was kept",
                ) from None
        out.flush()


def _ratio_limit(path: Path) -> str:
    return f"{MAX_RATIO}x its {path.stat().st_size:,} bytes, at least {MIN_CAP >> 20} MiB"


_BOMB_FIX = (
    "if it is a real trace, inflate it yourself where there is room (gunzip -k) and give the "
    "plain file; otherwise it is a gzip bomb"
)


def _check_cap(path: Path, total: int, cap: int, limit: str, fix: str) -> None:
    if total > cap:
        raise AacoInputError(
            f"the gzip file inflates past {max(cap, 0) >> 20} MiB, its cap ({limit})",
            path=path,
            fix=fix,
        )


@contextmanager
def _gzip_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise AacoInputError(
            f"truncated or corrupt gzip file ({str(exc).strip() or type(exc).__name__})",
            path=path,
            fix="copy the file again in full, or give the uncompressed trace",
        ) from exc


def _remove_abandoned(scratch: Path) -> None:
    """Inflated copies no process holds, left by an aaco that was killed (kill -9)."""
    for leftover in scratch.glob(f"{_PREFIX}*"):
        try:
            if time.time() - leftover.stat().st_mtime < _ABANDONED_AFTER_S:
                continue
            with open(leftover, "rb") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                leftover.unlink()
        except OSError:  # held by a running aaco, or gone already
            continue

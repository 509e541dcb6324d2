"""Write-then-rename: a reader sees a file whole or not at all, and a write that fails (a full
disk, a stop signal) leaves no temp file behind. Only a process killed outright (kill -9) can
leave its `.<name>.tmp`, which session_folders' clean-up removes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def temp_path(path: Path) -> Path:
    """The temp file a write of `path` goes through (the name clean-up looks for)."""
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temp path for a writer that wants one (Parquet): renamed to `path` when the block
    ends, removed when it fails."""
    tmp = temp_path(path)
    tmp.unlink(missing_ok=True)  # an interrupted write's, maybe read-only
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: str | bytes) -> None:
    with replacing(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)

"""Which files of a trace aaco may open: regular files, in the trace's own folder.

A FIFO blocks whoever opens it and a device such as /dev/zero never ends, so neither is ever
opened; a link that leads nowhere (dangling, or a loop) is an error rather than a crash; and a
link inside a trace folder must stay inside it — a path found in the folder never leads aaco out
of it (into /etc, or another run's trace). Everything is checked with lstat/stat, before the
first byte of the trace is read or copied.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from aaco_pipelines.errors import AacoInputError

_NOT_A_FILE = "not a regular file (a FIFO, device or socket: reading it would hang or never end)"


def trace_files(path: Path, pattern: str = "*", *, recursive: bool = True) -> list[Path]:
    """The regular files of a trace matching `pattern` (the trace itself when it is a file),
    sorted; links to files inside the folder count. AacoInputError, naming the entry and the
    fix, when any entry of the trace is unsafe to open (see `check_trace`)."""
    path = Path(path)
    if check_trace(path) == "file":
        return [path]
    found = path.rglob(pattern) if recursive else path.glob(pattern)
    return sorted(p for p in found if p.is_file())


def files_beside(path: Path, names: list[str]) -> list[Path]:
    """The regular files of these names in the folder of the trace file `path` (the other files
    of one profiler run), in the order given; AacoInputError for one that is unsafe to open, as
    for an entry of a trace folder (a link among them must stay in that folder)."""
    folder = Path(path).parent
    found = []
    for name in names:
        beside = folder / name
        if beside != Path(path) and os.path.lexists(beside):
            if stat.S_ISREG(_target_mode(beside, inside=folder.resolve())):
                found.append(beside)
    return found


def check_trace(path: Path) -> str:
    """Whether the trace at `path` is a "file" or a "folder", once it is safe to read;
    AacoInputError otherwise.
    The trace itself may be a link (it is the user's own path); inside a folder, every entry,
    hidden ones too, must be a regular file, a folder, or a link to one inside the folder."""
    path = Path(path)
    mode = _target_mode(path, inside=None)
    if stat.S_ISREG(mode):
        return "file"
    if not stat.S_ISDIR(mode):
        raise AacoInputError(
            _NOT_A_FILE,
            path=path,
            fix="give the trace's file or folder (save what a pipe or device yields to a file)",
        )
    root = path.resolve()
    for entry in path.rglob("*"):  # links to folders are checked, never walked into
        _target_mode(entry, inside=root)
    return "folder"


def _target_mode(path: Path, inside: Path | None) -> int:
    """The st_mode of what `path` leads to, once it is a regular file or a folder (inside
    `inside`, when given)."""
    try:
        own = os.lstat(path)
    except FileNotFoundError:
        raise AacoInputError(
            "trace not found", path=path, fix="give an existing file or folder"
        ) from None
    if stat.S_ISLNK(own.st_mode):
        return _link_target_mode(path, inside)
    if inside is not None and not (stat.S_ISREG(own.st_mode) or stat.S_ISDIR(own.st_mode)):
        raise AacoInputError(
            f"{_NOT_A_FILE}, in a trace folder",
            path=path,
            fix="remove it from the folder, or give the trace's own files",
        )
    return own.st_mode


def _link_target_mode(link: Path, inside: Path | None) -> int:
    try:
        target = link.resolve(strict=True)
        mode = os.stat(target).st_mode
    except (OSError, RuntimeError):  # RuntimeError: a loop, before Python 3.13
        raise AacoInputError(
            "a symbolic link that leads nowhere (dangling, or a loop)",
            path=link,
            fix="point the link at the trace file, or remove it",
        ) from None
    if inside is not None and not target.is_relative_to(inside):
        raise AacoInputError(
            f"a symbolic link out of the trace's folder (to {target})",
            path=link,
            fix="copy what it points to into the trace folder, or remove the link; aaco never "
            "follows a link out of a trace's folder",
        )
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise AacoInputError(
            f"a symbolic link to something that is {_NOT_A_FILE}",
            path=link,
            fix="point the link at the trace file, or remove it",
        )
    return mode

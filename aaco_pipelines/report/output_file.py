"""The file a user names with --output (`aaco export`, `aaco report`): only a new path or a
regular file is replaced, and it appears whole or not at all.

Renaming over a path replaces whatever is there: as root, /dev/full became a 251 MB regular
file; a FIFO or a socket would be lost the same way, and a symbolic link (even to a regular
file, even dangling) would be replaced by a file instead of meaning the file it names. So
anything else is refused, before any work, in one line. The content is written beside the
output and renamed over it at the end: a failed or interrupted write leaves the earlier file as
it was and nothing beside it. A killed writer (`kill -9`, an out-of-memory kill) cannot remove
its partial file, so the writer holds a lock on it while it writes, and the next write of the
same output removes every partial file beside it that no live process holds.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from aaco_pipelines.errors import NO_SPACE_ERRNOS, AacoInputError

ABANDONED_AFTER_S = 5.0


def check_output(output: Path) -> Path:
    """`output`, when it is a new path in an existing folder or an existing regular file (not a
    link to one); AacoInputError naming it and the fix otherwise."""
    output = Path(output)
    try:
        mode = os.lstat(output).st_mode
    except FileNotFoundError:
        if not output.parent.is_dir():
            raise AacoInputError(
                "the output folder does not exist", path=output.parent, fix="create it first"
            ) from None
        return output
    except OSError as exc:  # a file where a folder should be, a name too long, ...
        raise _cannot_write(output, exc) from exc
    if stat.S_ISLNK(mode):
        raise AacoInputError(
            "--output is a symbolic link; aaco replaces only regular files, never a link",
            path=output,
            fix="name the file itself (or a new file), or remove the link",
        )
    if stat.S_ISDIR(mode):
        raise AacoInputError("--output is a folder", path=output, fix="name a file in it")
    if not stat.S_ISREG(mode):
        raise AacoInputError(
            "--output is not a regular file (a device, FIFO or socket); aaco replaces only "
            "regular files",
            path=output,
            fix="name a new file or a regular one",
        )
    return output


@contextmanager
def replacing(output: Path) -> Iterator[TextIO]:
    """A UTF-8 text file open beside `output`, renamed over it when the block ends without
    error, removed otherwise. Creating it is the check that the folder is writable (and what
    refuses /proc or /sys), so a caller opens it before doing the work."""
    output = check_output(output)
    partial = output.with_name(f".{output.name}.{secrets.token_hex(4)}.partial")
    try:
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _cannot_write(output, exc) from exc
    fcntl.flock(descriptor, fcntl.LOCK_EX)  # released however this process ends
    remove_abandoned_partials(output)
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            yield handle
        check_output(output)  # still what it was when the work began
        os.replace(partial, output)
    except OSError as exc:
        if exc.errno in NO_SPACE_ERRNOS:
            raise _no_space(output, exc) from exc
        raise
    finally:
        partial.unlink(missing_ok=True)


def remove_abandoned_partials(output: Path) -> None:
    """Remove the partial files of `output` that no live writer holds (a killed export's). One
    changed in the last few seconds is left: its writer may be between creating and locking it."""
    recent = time.time() - ABANDONED_AFTER_S
    for partial in output.parent.glob(f".{glob.escape(output.name)}.*.partial"):
        try:
            descriptor = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone already, or not a file this module made
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live writer's (this one's included)
        else:
            if os.fstat(descriptor).st_mtime > recent:
                continue
            partial.unlink(missing_ok=True)
        finally:
            os.close(descriptor)


def _cannot_write(output: Path, exc: OSError) -> AacoInputError:
    return AacoInputError(
        f"cannot write the output there ({exc.strerror or exc})",
        path=output,
        fix="name a file in a folder you can write to",
    )


def _no_space(output: Path, exc: OSError) -> AacoInputError:
    problem = "read-only file system" if exc.errno == errno.EROFS else "no space left"
    return AacoInputError(
        f"{problem} while writing the output; the earlier file, if any, is unchanged",
        path=output,
        fix="free space on that file system, or name a file on another one",
    )

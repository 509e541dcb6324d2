"""A measuring process never outlives the process that started it (nor does the side-by-side
one, execution.side_by_side).

The measuring process runs in its own process group, so the parent can kill all of it (rocprofv3
and the measuring process it wraps) at a timeout. That also means nothing kills it when the
parent dies: `kill -9` of `aaco run`, or of a Dagster step, left it spinning with ppid 1 for ever.

The lifeline is a pipe. The parent keeps the write end and never writes; the measuring process
inherits the read end and a thread blocks on it. When the parent dies, for any reason, the kernel
closes the write end, the read returns end-of-file, and the measuring process kills its own
process group (rocprofv3 wrapping it too), unless that is the parent's group: then only itself.
Where the read end did not survive (a wrapper that closes inherited descriptors), the thread
watches the parent's pid and start time instead. A child may leave something to clean first
(`on_death`: the side-by-side job's folder, which its dead parent would have removed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
import time
from collections.abc import Callable

import psutil

FD_VARIABLE = "AACO_LIFELINE_FD"
PARENT_VARIABLE = "AACO_LIFELINE_PARENT"  # "<pid>:<start time>:<process group>" of the parent
_POLL_S = 0.5


class Lifeline:
    """The parent's end: `env` and `pass_fds` go to Popen, `started()` after it, `close()` at
    the end (closing it early tells the measuring process to die)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        me = psutil.Process()
        self.env = {
            FD_VARIABLE: str(self.read_fd),
            PARENT_VARIABLE: f"{me.pid}:{me.create_time()}:{os.getpgrp()}",
        }
        self.pass_fds = (self.read_fd,)

    def started(self) -> None:
        """The measuring process holds its copy of the read end now; the parent's copy would
        keep the pipe open after the measuring process died."""
        os.close(self.read_fd)

    def close(self) -> None:
        os.close(self.write_fd)


def watch_parent(
    environ: dict[str, str] | None = None, on_death: Callable[[], None] | None = None
) -> threading.Thread | None:
    """In the measuring process: die with the parent, after `on_death`. None when it was not
    started with a lifeline (run by hand)."""
    env = os.environ if environ is None else environ
    fd, parent = env.get(FD_VARIABLE), env.get(PARENT_VARIABLE)
    if fd is None and parent is None:
        return None
    wait = _pipe_waiter(int(fd)) if fd is not None and _is_pipe(int(fd)) else None
    wait = wait or _parent_waiter(parent)
    group = _parent_group(parent)
    thread = threading.Thread(
        target=_die_after, args=(wait, group, on_death), name="aaco-lifeline", daemon=True
    )
    thread.start()
    return thread


def _parent_group(parent: str | None) -> int | None:
    """The process group the parent was in (None from a lifeline of an older aaco)."""
    fields = (parent or "").split(":")
    try:
        return int(fields[2]) if len(fields) > 2 else None
    except ValueError:
        return None


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _pipe_waiter(fd: int):
    def wait() -> None:
        while True:
            try:
                if not os.read(fd, 1):
                    return  # end of file: every write end is closed, the parent is gone
            except InterruptedError:
                continue
            except OSError:
                return

    return wait


def _parent_waiter(parent: str | None):
    pid, started = ((parent or "").split(":") + ["", ""])[:2]

    def alive() -> bool:
        try:
            return psutil.Process(int(pid)).create_time() == float(started)
        except (psutil.Error, ValueError):
            return False

    def wait() -> None:
        while alive():
            time.sleep(_POLL_S)

    return wait


def _die_after(wait, parent_group: int | None, on_death) -> None:
    wait()
    if on_death is not None:
        with contextlib.suppress(Exception):  # dying matters more than tidying
            on_death()
    kill_own_group(parent_group)


def kill_own_group(parent_group: int | None = None) -> None:
    """SIGKILL this process's group when it is not the parent's (the runner starts the
    measuring process, or rocprofv3 around it, in a group of its own), else only this process:
    never the parent's group. `parent_group`: the lifeline's parent's, else the immediate
    parent's is asked (rocprofv3, when it wraps this process, shares its group)."""
    group = os.getpgrp()
    if parent_group is None:
        parent_group = _group_of(os.getppid())
    if group != parent_group:
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None

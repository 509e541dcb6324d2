"""A measuring process never outlives the process that started it.

The measuring process runs in its own process group, so the parent can kill all of it (rocprofv3
and the measuring process it wraps) at a timeout. That also means nothing kills it when the
parent dies: `kill -9` of `aaco run`, or of a Dagster step, left it spinning with ppid 1 for ever.

The lifeline is a pipe. The parent keeps the write end and never writes; the measuring process
inherits the read end and a thread blocks on it. When the parent dies, for any reason, the kernel
closes the write end, the read returns end-of-file, and the measuring process kills its own
process group. Where the
read end did not survive (a wrapper that closes inherited descriptors), the thread watches the
parent's pid and start time instead.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
import time

import psutil

FD_VARIABLE = "AACO_LIFELINE_FD"
PARENT_VARIABLE = "AACO_LIFELINE_PARENT"  # "<pid>:<start time>" of the parent
_POLL_S = 0.5


class Lifeline:
    """The parent's end: `env` and `pass_fds` go to Popen, `started()` after it, `close()` at
    the end (closing it early tells the measuring process to die)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        me = psutil.Process()
        self.env = {
            FD_VARIABLE: str(self.read_fd),
            PARENT_VARIABLE: f"{me.pid}:{me.create_time()}",
        }
        self.pass_fds = (self.read_fd,)

    def started(self) -> None:
        """The measuring process holds its copy of the read end now; the parent's copy would
        keep the pipe open after the measuring process died."""
        os.close(self.read_fd)

    def close(self) -> None:
        os.close(self.write_fd)


def watch_parent(environ: dict[str, str] | None = None) -> threading.Thread | None:
    """In the measuring process: die with the parent. None when it was not started with a
    lifeline (run by hand)."""
    env = os.environ if environ is None else environ
    fd, parent = env.get(FD_VARIABLE), env.get(PARENT_VARIABLE)
    if fd is None and parent is None:
        return None
    wait = _pipe_waiter(int(fd)) if fd is not None and _is_pipe(int(fd)) else None
    wait = wait or _parent_waiter(parent)
    thread = threading.Thread(target=_die_after, args=(wait,), name="aaco-lifeline", daemon=True)
    thread.start()
    return thread


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
    pid, _, started = (parent or "").partition(":")

    def alive() -> bool:
        try:
            return psutil.Process(int(pid)).create_time() == float(started)
        except (psutil.Error, ValueError):
            return False

    def wait() -> None:
        while alive():
            time.sleep(_POLL_S)

    return wait


def _die_after(wait) -> None:
    wait()
    kill_own_group()


def kill_own_group() -> None:
    """SIGKILL this process's group when it leads one of its own (the runner starts it so),
    else only this process: never the parent's group."""
    group = os.getpgrp()
    parent_group = _group_of(os.getppid())
    if group != parent_group:
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None

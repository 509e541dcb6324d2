"""Who the local cluster's processes are: a PID and its identity, so that a record outliving
its process (a reboot, a kill -9) never has `aaco cluster` signal a stranger.

A PID alone is not an identity: after a reboot the numbers in cluster.json name whatever runs
now, and `down` would stop it, as root. So every process is recorded with its start time (the
kernel's, as psutil reads it: a reused PID has another) and a mark, an environment variable
its children inherit. The mark finds what a killed head left behind (its webserver, daemon and
code servers), which no PID or process group in the record still names.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from aaco_pipelines.instance.local_services import stop_process

MARK_ENV = "AACO_CLUSTER_PROCESS"
SAME_START_S = 0.5  # psutil's start time is in clock ticks since boot: equal within a tick
STOP_ROUNDS = 3  # stop_marked looks again for processes started while it stopped others
RUNNING, STOPPED, STALE = "running", "stopped", "stale"


@dataclass(frozen=True)
class ProcessRecord:
    """One process of the cluster: its PID, when it started, and the mark it carries."""

    pid: int
    started: float | None = None  # psutil create_time; None in a record written before
    mark: str | None = None  # its MARK_ENV value, inherited by its children

    def to_json(self) -> dict:
        return {"pid": self.pid, "started": self.started, "mark": self.mark}

    @classmethod
    def from_json(cls, value) -> ProcessRecord:
        """A record, or a bare PID from a cluster.json written before identities."""
        if isinstance(value, int):
            return cls(pid=value)
        return cls(pid=int(value["pid"]), started=value.get("started"), mark=value.get("mark"))

    def state(self) -> str:
        """running (this very process), stopped, or stale: the PID runs but is another
        process, or the record cannot say which process it was (written before identities)."""
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return STOPPED
            started = process.create_time()
        except psutil.Error:
            return STOPPED
        if self.started is None or abs(started - self.started) > SAME_START_S:
            return STALE
        return RUNNING

    def running(self) -> bool:
        return self.state() == RUNNING

    def process(self) -> psutil.Process | None:
        """The recorded process itself, if it runs: psutil's handle then refuses to signal
        another process that takes its PID later."""
        try:
            process = psutil.Process(self.pid)
            same = (
                self.started is not None
                and abs(process.create_time() - self.started) <= SAME_START_S
            )
            return process if same and process.status() != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            return None


def new_mark(name: str) -> str:
    """A mark no other process carries: the process's role and a random token."""
    return f"{name}:{uuid.uuid4().hex}"


def identify(pid: int, mark: str | None = None) -> ProcessRecord:
    """The record of a process that runs now (just started by us)."""
    return ProcessRecord(pid=pid, started=psutil.Process(pid).create_time(), mark=mark)


def marked(marks: Iterable[str]) -> list[psutil.Process]:
    """Every live process whose environment carries one of `marks` (this one aside)."""
    return [process for found in marked_by(marks).values() for process in found]


def marked_by(marks: Iterable[str]) -> dict[str, list[psutil.Process]]:
    """{mark: its live processes} for the marks some process carries, in one look at every
    process's environment (this one aside)."""
    wanted = {m for m in marks if m}
    found: dict[str, list[psutil.Process]] = {}
    if not wanted:
        return found
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            mark = process.environ().get(MARK_ENV)
            if mark in wanted:
                found.setdefault(mark, []).append(process)
    return found


def stop_marked(marks: Iterable[str], timeout_s: float) -> list[int]:
    """SIGTERM to every process carrying one of `marks`, SIGKILL to those left after
    `timeout_s`; the PIDs stopped. Each is checked by its mark just before each signal, so a
    process that exited meanwhile and whose PID was reused is never signalled. Looked for
    again after each round (STOP_ROUNDS at most): a process a stopping one started meanwhile
    (a Dagster code server, once, in CI) carries the mark too."""
    stopped: list[int] = []
    for _ in range(STOP_ROUNDS):
        processes = marked(marks)
        if not processes:
            break
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGTERM)  # psutil checks the PID is this process
        _, left = psutil.wait_procs(processes, timeout=timeout_s)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=5)
        stopped += [p.pid for p in processes]
    return stopped


def stop_recorded(record: ProcessRecord, sig: int, timeout_s: float) -> bool:
    """`sig` to the recorded process if it is still that process, SIGKILL after `timeout_s`
    (local_services.stop_process, through the identity-checked handle); whether it was
    running."""
    process = record.process()
    if process is None:
        return False
    stop_process(process, sig, timeout_s)
    return True

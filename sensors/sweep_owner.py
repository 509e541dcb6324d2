"""Who runs a sweep's run: the `aaco sweep` process that executes it in process.

A run executed in process has no run worker Dagster could check on: when that process dies
(kill -9, the OOM killer, a reboot, a CI cancel) the run stays STARTED, holding its pool slots,
for ever. So every such run carries its owner in its tags (host, pid, and the process's start
time, so that a pid the system has since given to another process is not taken for the owner),
and the next sweep on that host can tell a run that is still running from one nobody runs.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import psutil

HOST_TAG = "aaco/host"
PID_TAG = "aaco/pid"
STARTED_TAG = "aaco/pid_started"  # the process's start time, seconds since the epoch
SAME_START_S = 1.0  # two readings of one process's start time; a reused pid starts later


def this_host() -> str:
    return socket.gethostname()


def owner_tags() -> dict[str, str]:
    """The tags naming this process as the owner of the runs it executes."""
    return {
        HOST_TAG: this_host(),
        PID_TAG: str(os.getpid()),
        STARTED_TAG: f"{psutil.Process().create_time():.2f}",
    }


def has_owner(tags: Mapping[str, str]) -> bool:
    return all(tag in tags for tag in (HOST_TAG, PID_TAG, STARTED_TAG))


def owner_alive(tags: Mapping[str, str]) -> bool:
    """Whether the process the tags name (on this host) still runs. A zombie (killed, not yet
    reaped by its parent) runs nothing; a process we may not inspect is taken as alive."""
    try:
        process = psutil.Process(int(tags[PID_TAG]))
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(process.create_time() - float(tags[STARTED_TAG])) < SAME_START_S
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def describe_owner(tags: Mapping[str, str]) -> str:
    """'sweep pid 4321', with the host when it is another; else the run's trigger."""
    if not has_owner(tags):
        trigger = tags.get("aaco/trigger", "unknown")
        return f"trigger {trigger}, no owner process recorded"
    host = tags[HOST_TAG]
    on_host = "" if host == this_host() else f" on host {host}"
    return f"sweep pid {tags[PID_TAG]}{on_host}"

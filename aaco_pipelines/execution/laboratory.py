"""Laboratory mode: pin the worker to fixed cores and fence it in a cgroup, for repeatable numbers.

Latency varies with which cores a run lands on, with neighbours stealing them and with thread
pools sized to cores the run does not own. Laboratory mode fixes all three: explicit cores, ONNX
Runtime thread pools sized to them, and (where the host allows) a cgroup that enforces the cores
and a memory limit. Everything that could not be applied is reported, never silently skipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.environment import cpu_frequencies_mhz, cpu_governors, online_cpus

_MOUNTS = Path("/proc/self/mounts")
_CGROUP_PARENT = "aaco"


@dataclass(frozen=True)
class LaboratorySettings:
    cores: tuple[int, ...]  # cores the worker is pinned to
    intra_op_threads: int  # == len(cores): one ONNX Runtime compute thread per owned core
    inter_op_threads: int = 1


def laboratory_settings(requested_cores: Sequence[int] | None = None) -> LaboratorySettings:
    """Cores for the worker: the requested ones, else all allowed cores but the lowest.

    With two or more allowed cores the lowest-numbered one (core 0 when allowed, where the kernel
    routes most housekeeping and interrupts) is left to the parent's sampler thread and the OS, so
    neither competes with the worker: on 2 cores the worker gets core 1. A single allowed core is
    shared, there is no better choice.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if requested_cores is None:
        cores = allowed[1:] if len(allowed) >= 2 else allowed
    else:
        cores = sorted(set(requested_cores))
        refused = [core for core in cores if core not in allowed]
        if not cores or refused:
            raise AacoInputError(
                f"laboratory cores {list(requested_cores)} are not usable here "
                f"(not allowed: {refused or 'none given'}; this process may run on {allowed})",
                fix=f"choose laboratory cores from {allowed}, or leave them unset",
            )
    return LaboratorySettings(cores=tuple(cores), intra_op_threads=len(cores))


def pin_current_process(settings: LaboratorySettings) -> dict:
    """Pin every existing thread of this process (new threads inherit) to the settings' cores.

    sched_setaffinity(0) changes only the calling thread, so threads a library already started
    are pinned one by one.
    """
    cores = set(settings.cores)
    os.sched_setaffinity(0, cores)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:
            continue  # the thread exited meanwhile
    return {"affinity": sorted(os.sched_getaffinity(0))}


def cgroup2_mount() -> Path | None:
    """Where the unified (v2) hierarchy is mounted: /sys/fs/cgroup, or .../unified on hybrids."""
    try:
        lines = _MOUNTS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _enable_controllers(parent: Path, wanted: set[str]) -> dict[str, str]:
    """Enable the wanted controllers for the parent's children; returns {missing: reason}.

    Only controllers the system already hands down to `parent` can be enabled; the root's
    subtree_control is the host's policy and is left alone.
    """
    handed_down = set((parent / "cgroup.controllers").read_text().split())
    missing = {
        controller: f"{controller} controller not enabled for {parent} by the host"
        for controller in sorted(wanted - handed_down)
    }
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    for controller in sorted((wanted & handed_down) - enabled):
        try:
            (parent / "cgroup.subtree_control").write_text(f"+{controller}")
        except OSError as exc:
            missing[controller] = f"cannot enable {controller}: {type(exc).__name__}: {exc}"
    return missing


def _apply_limits(
    path: Path, controllers: set[str], memory_limit_bytes: int | None, cores: Sequence[int]
) -> list[str]:
    applied = []
    if "memory" in controllers and memory_limit_bytes is not None:
        (path / "memory.max").write_text(str(int(memory_limit_bytes)))
        applied.append("memory")
    if "cpuset" in controllers:
        (path / "cpuset.cpus").write_text(",".join(str(core) for core in sorted(cores)))
        applied.append("cpuset")
    return applied


def place_in_cgroup(
    pid: int, name: str, memory_limit_bytes: int | None, cores: Sequence[int]
) -> dict:
    """Move `pid` into a fresh cgroup v2 <mount>/aaco/<name> with a memory limit and cpuset.

    A controller the host does not hand down is listed under "missing" with the reason; when none
    of the wanted ones is available (e.g. a cgroup v1/v2 hybrid, whose v2 side has no
    controllers) the cgroup would enforce nothing, so it is not made and "placed" is False.
    Never raises: a refusal gets {"placed": False, "reason": ...} and directories made on the
    way are removed.
    """
    mount = cgroup2_mount()
    if mount is None:
        return {"placed": False, "reason": f"no cgroup2 mount in {_MOUNTS} (cgroup v1 only host)"}
    parent = mount / _CGROUP_PARENT
    path = parent / name
    created: list[Path] = []
    try:
        for directory in (parent, path):
            if not directory.is_dir():
                directory.mkdir()
                created.append(directory)
        wanted = {"cpuset"} | ({"memory"} if memory_limit_bytes is not None else set())
        missing = _enable_controllers(parent, wanted)
        if wanted <= set(missing):
            raise _NothingToEnforce("; ".join(missing.values()))
        applied = _apply_limits(path, wanted - set(missing), memory_limit_bytes, cores)
        (path / "cgroup.procs").write_text(str(pid))
    except Exception as exc:
        for directory in reversed(created):
            _rmdir(directory)
        why = str(exc) if isinstance(exc, _NothingToEnforce) else f"{type(exc).__name__}: {exc}"
        return {"placed": False, "reason": f"{path}: {why}"}
    return {"placed": True, "path": str(path), "controllers": applied, "missing": missing}


class _NothingToEnforce(Exception):
    """The host hands none of the wanted controllers down, so a cgroup would fence nothing."""


def _rmdir(directory: Path) -> bool:
    try:
        directory.rmdir()
    except OSError:
        return False  # busy (still has processes or children) or already gone
    return True


def remove_cgroup(record: dict) -> None:
    """Remove the cgroup `place_in_cgroup` made, once its process has exited; never raises.

    The shared aaco/ parent goes too when no other session still has a cgroup in it.
    """
    if not record.get("placed"):
        return
    path = Path(record["path"])
    if _rmdir(path):
        _rmdir(path.parent)


def cpu_frequency_record() -> dict:
    """Governor and current MHz per CPU, so a run on a throttled or powersave host is visible."""
    cpus = online_cpus()
    return {
        "governors": {f"cpu{cpu}": value for cpu, value in cpu_governors(cpus).items()},
        "frequency_mhz": {f"cpu{cpu}": value for cpu, value in cpu_frequencies_mhz(cpus).items()},
    }

"""Laboratory mode: pin the measuring process to fixed cores and fence it in a cgroup, for
repeatable numbers.

Latency varies with which cores a run lands on, with neighbours stealing them and with thread
pools sized to cores the run does not own. Laboratory mode fixes all three: explicit cores, ONNX
Runtime thread pools sized to them, and (where the host allows) a cgroup that enforces the cores
and a memory limit. Everything that could not be applied is reported, never silently skipped.

Pinned threads cannot move away from a neighbour the way unpinned ones do, so pinning to a core
another process keeps busy makes the numbers noisier than no laboratory at all. The cores are
therefore chosen after a short look at how busy each one is, and cores that are busy anyway (a
loaded host, or cores the user asked for) are said out loud and recorded with the shares seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.environment import cpu_frequencies_mhz, cpu_governors, online_cpus
from aaco_pipelines.execution.host_sampler import read_cpu_jiffies

_MOUNTS = Path("/proc/self/mounts")
_CGROUP_PARENT = "aaco"
# How long the cores are watched before choosing: 20 jiffies a core at 100 Hz, cheap beside a run.
BUSY_WINDOW_S = 0.2
# A laboratory core whose time other processes take beyond this share is busy: the limit of a
# contended host (analysis.envelope.record.CONTENDED_SHARE), applied to the cores the measuring
# process owns.
BUSY_CORE_SHARE = 0.2
# The lowest core is left free unless another is busier by more than this: a jiffy or two of
# noise must not move the measuring process from session to session.
NOTICEABLY_BUSIER = 0.1


@dataclass(frozen=True)
class LaboratorySettings:
    cores: tuple[int, ...]  # cores the measuring process is pinned to
    intra_op_threads: int  # == len(cores): one ONNX Runtime compute thread per owned core
    inter_op_threads: int = 1
    # Busy share of each core looked at just before the run ({"cpu1": 0.03}): other processes'
    # work, as this one only waited. Empty where /proc/stat cannot be read.
    core_busy: dict[str, float] = field(default_factory=dict)
    warning: str | None = None  # its cores were busy with other work anyway


def laboratory_settings(
    requested_cores: Sequence[int] | None = None, window_s: float = BUSY_WINDOW_S
) -> LaboratorySettings:
    """Cores for the measuring process: the requested ones, else all allowed cores but the busiest.

    How busy each core is, is looked at over `window_s` first. Requested cores are kept even when
    busy (the user chose them), with a warning; so are chosen ones when no quieter core is left.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if requested_cores is None:
        busy = core_busy_shares(allowed, window_s)
        cores = choose_cores(allowed, busy)
    else:
        cores = _requested(requested_cores, allowed)
        busy = core_busy_shares(cores, window_s)
    return LaboratorySettings(
        cores=tuple(cores),
        intra_op_threads=len(cores),
        core_busy={f"cpu{core}": round(share, 3) for core, share in sorted(busy.items())},
        warning=busy_warning(cores, busy, requested=requested_cores is not None),
    )


def _requested(requested_cores: Sequence[int], allowed: list[int]) -> list[int]:
    cores = sorted(set(requested_cores))
    refused = [core for core in cores if core not in allowed]
    if not cores or refused:
        raise AacoInputError(
            f"laboratory cores {list(requested_cores)} are not usable here "
            f"(not allowed: {refused or 'none given'}; this process may run on {allowed})",
            fix=f"choose laboratory cores from {allowed}, or leave them unset",
        )
    return cores


def core_busy_shares(cores: Sequence[int], window_s: float = BUSY_WINDOW_S) -> dict[int, float]:
    """Each core's busy share of its time over `window_s` (/proc/stat, steal included, as the
    host sampler counts it). This process only sleeps meanwhile, so the busy time is other
    processes'. Empty where /proc/stat cannot be read; a core that went offline is left out."""
    try:
        before = read_cpu_jiffies()
        time.sleep(window_s)
        after = read_cpu_jiffies()
    except OSError:
        return {}
    shares = {}
    for core in cores:
        if core in before and core in after:
            busy, total = (now - then for then, now in zip(before[core], after[core], strict=True))
            if total > 0:
                shares[core] = min(max(busy / total, 0.0), 1.0)
    return shares


def choose_cores(allowed: Sequence[int], busy: Mapping[int, float]) -> list[int]:
    """All allowed cores but one, left to the parent's sampler thread and the OS.

    The one left is the busiest, so the measuring process avoids a core other work is using; on
    a quiet host (no core NOTICEABLY_BUSIER than the lowest) it is the lowest, where the kernel
    routes most housekeeping and interrupts. The measuring process always gets the same number of
    cores, hence threads, so sessions stay comparable: dropping every busy core would change the
    thread count, and the latency with it, on a loaded host. A single allowed core is shared;
    there is no better choice.
    """
    allowed = sorted(allowed)
    if len(allowed) < 2:
        return allowed
    lowest = allowed[0]
    busiest = max(allowed, key=lambda core: (busy.get(core, 0.0), -core))
    noticeably = busy.get(busiest, 0.0) - busy.get(lowest, 0.0) > NOTICEABLY_BUSIER
    spare = busiest if noticeably else lowest
    return [core for core in allowed if core != spare]


def busy_warning(
    cores: Sequence[int], busy: Mapping[int, float], requested: bool = False
) -> str | None:
    """One line for the user when other processes keep the pinned cores busy, else None."""
    taken = {core: busy[core] for core in cores if busy.get(core, 0.0) > BUSY_CORE_SHARE}
    if not taken:
        return None
    listed = ", ".join(f"cpu{core} {share:.0%}" for core, share in sorted(taken.items()))
    why = "as requested" if requested else "for want of quieter ones"
    return (
        f"warning: laboratory cores busy with other work ({listed}), kept {why}: pinned "
        "threads cannot move away, so expect noisier latencies"
    )


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

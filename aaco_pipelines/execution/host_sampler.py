"""Raw host counters, sampled from a thread of the parent while the measuring process runs.

The sampler watches the measuring process by pid from the parent, so the measurement is not
perturbed by its own instrumentation. Each tick reads /proc directly (no subprocess) and keeps raw
cumulative counters; turning them into rates is the collector's job (`collectors.host_telemetry`),
so the raw table stays an exact record of what the kernel said.
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import pyarrow as pa

from aaco_pipelines.execution.environment import cpu_frequencies_mhz
from aaco_pipelines.execution.ticker import BackgroundSampler

NAN = math.nan
PROCESS_COLUMNS = (
    "proc_rss_bytes",
    "proc_threads",
    "proc_voluntary_ctx",
    "proc_involuntary_ctx",
    "proc_run_ns",
    "proc_runqueue_wait_ns",
    "proc_cpu_jiffies",
)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal in a /proc/stat cpu line
_CTX_FIELDS = ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")


def read_cpu_jiffies() -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies per logical CPU from /proc/stat; total excludes guest time.

    guest and guest_nice are already counted in user and nice, so only the first eight fields
    add up to the CPU's time.
    """
    jiffies: dict[int, tuple[int, int]] = {}
    with open("/proc/stat") as handle:
        for line in handle:
            if not line.startswith("cpu"):
                break
            name, *fields = line.split()
            if name == "cpu":
                continue
            values = [int(field) for field in fields[:8]]
            jiffies[int(name[3:])] = (sum(values[i] for i in _BUSY_FIELDS), sum(values))
    return jiffies


class OtherWork:
    """The share of the host's CPU time that other processes have taken since this was made:
    every CPU's busy jiffies (/proc/stat, steal included: a VM's lost time is lost to it too)
    less this process's own CPU time (its threads', exited ones included), over all CPUs'
    time. None where /proc/stat is missing (not Linux)."""

    def __init__(self):
        self._start = self._now()

    def share(self) -> float | None:
        end = self._now()
        if self._start is None or end is None:
            return None
        busy, total, own = (after - before for before, after in zip(self._start, end, strict=True))
        return min(max((busy - own) / total, 0.0), 1.0) if total > 0 else None

    @staticmethod
    def _now() -> tuple[float, float, float] | None:
        try:
            jiffies = read_cpu_jiffies()
        except OSError:
            return None
        times = os.times()
        own = (times.user + times.system) * os.sysconf("SC_CLK_TCK")
        return (
            float(sum(busy for busy, _ in jiffies.values())),
            float(sum(total for _, total in jiffies.values())),
            own,
        )


def _status_fields(path: Path, wanted: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    with open(path) as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in wanted:
                found[key] = int(value.split()[0])
    return found


def _task_counters(task: Path) -> tuple[float, float, float, float]:
    """(voluntary ctx, involuntary ctx, run ns, run-queue wait ns) of one thread."""
    status = _status_fields(task / "status", _CTX_FIELDS)
    try:
        run_ns, wait_ns = (float(v) for v in (task / "schedstat").read_text().split()[:2])
    except (FileNotFoundError, ValueError):
        run_ns = wait_ns = NAN
    return (
        float(status.get("voluntary_ctxt_switches", NAN)),
        float(status.get("nonvoluntary_ctxt_switches", NAN)),
        run_ns,
        wait_ns,
    )


def read_process_counters(pid: int) -> dict[str, float]:
    """The watched process's counters, all NaN once it has exited (or is a zombie)."""
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
        if fields[0] in ("Z", "X"):
            return dict.fromkeys(PROCESS_COLUMNS, NAN)
        status = _status_fields(proc / "status", ("VmRSS", "VmHWM", "Threads"))
        totals = [0.0, 0.0, 0.0, 0.0]
        for tid in os.listdir(proc / "task"):
            try:
                counters = _task_counters(proc / "task" / tid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread exited between listing and reading
            totals = [total + value for total, value in zip(totals, counters, strict=True)]
    except (FileNotFoundError, ProcessLookupError):
        return dict.fromkeys(PROCESS_COLUMNS, NAN)
    return {
        "proc_rss_bytes": float(status["VmRSS"] * 1024) if "VmRSS" in status else NAN,
        "proc_hwm_bytes": float(status["VmHWM"] * 1024) if "VmHWM" in status else NAN,
        "proc_threads": float(status.get("Threads", NAN)),
        "proc_voluntary_ctx": totals[0],
        "proc_involuntary_ctx": totals[1],
        "proc_run_ns": totals[2],
        "proc_runqueue_wait_ns": totals[3],
        "proc_cpu_jiffies": float(int(fields[11]) + int(fields[12])),  # utime + stime
    }


class HostSampler(BackgroundSampler):
    """Samples host and measuring process counters at a fixed rate until stopped; one row per
    tick."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        super().__init__(interval_s, f"aaco-sampler-{pid}")
        self.pid = pid
        self.cpus = sorted(read_cpu_jiffies())
        self._columns: dict[str, list] = {name: [] for name in self._column_names()}
        self._peak_rss = 0
        self._lock = threading.Lock()
        self._table: pa.Table | None = None

    def _column_names(self) -> list[str]:
        names = ["timestamp_ns"]
        for cpu in self.cpus:
            names += [f"cpu{cpu}_busy_jiffies", f"cpu{cpu}_total_jiffies", f"cpu{cpu}_freq_mhz"]
        return names + list(PROCESS_COLUMNS)

    def sample_once(self) -> None:
        """Read every counter now and append one row; a row is appended whole or not at all."""
        row: dict[str, float | int | None] = {"timestamp_ns": time.time_ns()}
        jiffies = read_cpu_jiffies()
        frequencies = cpu_frequencies_mhz(self.cpus)
        for cpu in self.cpus:
            busy, total = jiffies.get(cpu, (None, None))  # None: the CPU went offline
            row[f"cpu{cpu}_busy_jiffies"] = busy
            row[f"cpu{cpu}_total_jiffies"] = total
            frequency = frequencies.get(cpu)
            row[f"cpu{cpu}_freq_mhz"] = NAN if frequency is None else frequency
        process = read_process_counters(self.pid)
        row.update({name: process[name] for name in PROCESS_COLUMNS})
        with self._lock:
            for name, values in self._columns.items():
                values.append(row[name])
            for key in ("proc_rss_bytes", "proc_hwm_bytes"):
                value = process.get(key, NAN)
                if not math.isnan(value):
                    self._peak_rss = max(self._peak_rss, int(value))

    def stop(self) -> pa.Table:
        """Stop sampling (after one last tick) and return the raw table; safe to call twice."""
        if self._table is not None:
            return self._table
        self._join()
        try:
            self.sample_once()
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        self._table = self._build_table()
        return self._table

    def _build_table(self) -> pa.Table:
        with self._lock:
            arrays = {}
            for name, values in self._columns.items():
                counter = name == "timestamp_ns" or name.endswith("_jiffies")
                kind = pa.int64() if counter and not name.startswith("proc_") else pa.float64()
                arrays[name] = pa.array(values, type=kind)
        metadata = {
            b"clk_tck": str(os.sysconf("SC_CLK_TCK")).encode(),
            b"cpu_count": str(len(self.cpus)).encode(),
            b"pid": str(self.pid).encode(),
            b"interval_s": str(self.interval_s).encode(),
        }
        return pa.table(arrays).replace_schema_metadata(metadata)

    @property
    def latest_rss_bytes(self) -> int | None:
        with self._lock:
            values = self._columns["proc_rss_bytes"]
            latest = values[-1] if values else NAN
        return None if math.isnan(latest) else int(latest)

    @property
    def peak_rss_bytes(self) -> int:
        """Highest RSS seen, including the kernel's high-water mark between ticks (VmHWM)."""
        with self._lock:
            return self._peak_rss

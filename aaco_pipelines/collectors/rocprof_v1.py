"""Legacy rocprof (v1) results.csv → a kernel_events plan.

Header of the ROCm 5.x `rocprof --timestamp on` output (the HPCTrainingExamples MI250 sample):
Index, KernelName, gpu-id, queue-id, queue-index, pid, tid, grd, wgr, lds, scr, arch_vgpr,
accum_vgpr, sgpr, wave_size, sig, obj, DispatchNs, BeginNs, EndNs, CompleteNs, DurationNs.
Older files say `vgpr` instead of arch_vgpr/accum_vgpr and may lack DurationNs; only KernelName,
BeginNs and EndNs are required. `grd` and `wgr` are work-items (grid) and work-items per
workgroup, already totals. Names are matched case-insensitively, read by the same no-sniffing
DuckDB CSV read as rocprofv3's CSV.

KernelName is kept raw in event_name ("foo.kd", "foo(int) [clone .kd]"); kernel_name is the
symbol without the code-object decorations (" [clone .kd]", ".kd"), arguments kept, so it
compares with rocprofv3's Kernel_Name. start = BeginNs, duration = EndNs - BeginNs (raw; the
file's own DurationNs is the same difference). dispatch_id is the dispatch order `Index`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.collectors.rocprofv3_csv import (
    column,
    csv_header,
    duration,
    present,
    read_csv_sql,
)

SOURCE = "rocprof_v1"

_REQUIRED = {"kernelname", "beginns", "endns"}


def matches(header: list[str]) -> bool:
    """Whether a (lower-cased) CSV header is rocprof v1's results.csv."""
    return _REQUIRED <= set(header)


def plans(con: duckdb.DuckDBPyConnection, path: Path) -> dict[str, Plan]:
    """The kernel_events plan of one results.csv."""
    header = csv_header(path)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW rocprof_v1 AS SELECT * FROM {read_csv_sql(path, header)}"
    )
    return {"kernel_events": ("rocprof_v1", _kernel_events(set(header)))}


def _kernel_events(c: set) -> dict[str, str]:
    name = column(c, "kernelname")
    symbol = (
        f"regexp_replace(regexp_replace(trim({name}), '\\s*\\[clone \\.kd\\]$', ''), '\\.kd$', '')"
    )
    return present(
        {
            "source": f"'{SOURCE}'",
            "category": "'Kernel'",
            "event_name": name,
            "kernel_name": symbol,
            "start_ns": column(c, "beginns"),
            "duration_ns": duration("beginns", "endns"),
            "thread_id": column(c, "tid"),
            "process_id": column(c, "pid"),
            "device_id": column(c, "gpu-id"),
            "queue_id": column(c, "queue-id"),
            "dispatch_id": column(c, "index"),
            "grid_size": column(c, "grd"),
            "workgroup_size": column(c, "wgr"),
            "lds_bytes": column(c, "lds"),
            "scratch_bytes": column(c, "scr"),
            "vgpr_count": column(c, "arch_vgpr", "vgpr"),
            "accum_vgpr_count": column(c, "accum_vgpr"),
            "sgpr_count": column(c, "sgpr"),
        }
    )

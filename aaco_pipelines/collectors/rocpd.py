"""ROCm 7's rocpd SQLite database (rocprofv3's default output, `<pid>_results.db`) → table plans.

Read through the stable views rocprofiler-sdk documents for queries ("Using rocpd output
format", and source/share/rocprofiler-sdk-rocpd/data_views.sql), never the per-run
`rocpd_*_<uuid>` tables under them:

- kernels: name, pid, tid, agent_log_index (agent_abs_index, agent_type_index), queue_id,
  stream_id, dispatch_id, kernel_id, start, end, grid_x/y/z (work-items), workgroup_x/y/z,
  lds_size, scratch_size, corr_id
- regions (host API calls: HIP, HSA, markers, RCCL): category, name, pid, tid, start, end, corr_id
- memory_copies: name (MEMORY_COPY_HOST_TO_DEVICE, ...), start, end, size, queue_id,
  src_agent_log_index, dst_agent_log_index, corr_id
- counters_collection (one row per dispatch x counter): dispatch_id, correlation_id,
  kernel_name, agent_log_index, counter_name, value
- rocpd_info_agents, or the rocpd_info_agent view: type, absolute_index, logical_index, name,
  product_name, extdata (JSON; cu_count, wave_front_size, max_engine_clk_fcompute when present)
- rocpd_info_kernel_symbol (sgpr_count, arch_vgpr_count, accum_vgpr_count), joined on
  kernels.kernel_id when the kernels view does not carry the register counts itself.

A later rocprofiler-sdk revision renamed some view columns (agent_logical_index for
agent_log_index, correlation_id for corr_id) and carries the register counts in the kernels
view itself under its own names (`S.arch_vgpr_count AS vgpr_count, S.accum_vgpr_count,
S.sgpr_count`, beside `lds_size` and `scratch_size`): every spelling is accepted, so a real
capture's registers are never dropped for a name (an MI300X capture read "no VGPR count" for
every kernel). Agents are named
"Agent <logical index>" and device_id is that index, as in rocprofv3's CSV (its default
"relative" agent index).
"""

from __future__ import annotations

import sqlite3

from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.foundation.sql import sql_identifier, sql_literal

SOURCE = "rocpd"


_MARKERS = ("rocpd_info_agent", "rocpd_kernel_dispatch", "rocpd_region", "rocpd_event")
# The logical (rocprofv3's default "relative") index first, as the CSV's Agent_Id prints it.
_AGENT_INDEX = ("agent_log_index", "agent_logical_index", "agent_abs_index", "agent_absolute_index")


def matches(names: set[str]) -> bool:
    """Whether a SQLite database's table/view names are rocprofv3's rocpd schema."""
    return any(name.startswith(_MARKERS) for name in names)


def plans(db: sqlite3.Connection) -> dict[str, Plan]:
    """One plan per documented view the database has."""
    names = object_names(db)
    builders = {
        "kernel_events": ("kernels", _kernel_events),
        "api_calls": ("regions", _api_calls),
        "memory_copies": ("memory_copies", _memory_copies),
        "counters": ("counters_collection", _counters),
        "agents": (_agents_view(names), _agents),
    }
    return {
        table: build(db, view, names) for table, (view, build) in builders.items() if view in names
    }


def object_names(db: sqlite3.Connection) -> set[str]:
    rows = db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    return {name for (name,) in rows}


def columns_of(db: sqlite3.Connection, view: str) -> set[str]:
    return {row[1].lower() for row in db.execute(f"PRAGMA table_info({sql_identifier(view)})")}


def pick(columns: set[str], *names: str, alias: str = "") -> str | None:
    """The first of `names` the view has, quoted (and qualified by `alias`)."""
    prefix = f"{alias}." if alias else ""
    return next((prefix + sql_identifier(name) for name in names if name in columns), None)


def present(expressions: dict[str, str | None]) -> dict[str, str]:
    return {name: expr for name, expr in expressions.items() if expr is not None}


def _agents_view(names: set[str]) -> str:
    return "rocpd_info_agents" if "rocpd_info_agents" in names else "rocpd_info_agent"


def _agent_name(index: str | None) -> str | None:
    return index and f"'Agent ' || {index}"


def _product(c: set[str], prefix: str) -> str | None:
    parts = [pick(c, f"{prefix}_{axis}", alias="K") for axis in "xyz"]
    return " * ".join(parts) if all(parts) else None


def _kernel_events(db: sqlite3.Connection, view: str, names: set[str]) -> Plan:
    c = columns_of(db, view)
    source, registers = _with_registers(db, view, c, names)
    start, end = pick(c, "start", alias="K"), pick(c, "end", alias="K")
    name = pick(c, "name", alias="K")
    return source, present(
        {
            "source": f"'{SOURCE}'",
            "kernel_name": name,
            "start_ns": start,
            "duration_ns": f"{end} - {start}",
            "thread_id": pick(c, "tid", alias="K"),
            "process_id": pick(c, "pid", alias="K"),
            "device_id": pick(c, *_AGENT_INDEX, alias="K"),
            "queue_id": pick(c, "queue_id", alias="K"),
            "stream_id": pick(c, "stream_id", alias="K"),
            "correlation_id": pick(c, "corr_id", "correlation_id", alias="K"),
            "dispatch_id": pick(c, "dispatch_id", alias="K"),
            "grid_size": _product(c, "grid"),
            "workgroup_size": _product(c, "workgroup"),
            "lds_bytes": pick(c, "lds_size", "lds_block_size", "group_segment_size", alias="K"),
            "scratch_bytes": pick(c, "scratch_size", "private_segment_size", alias="K"),
            "vgpr_count": registers("arch_vgpr_count", "vgpr_count"),
            "accum_vgpr_count": registers("accum_vgpr_count", "agpr_count"),
            "sgpr_count": registers("sgpr_count"),
        }
    )


def _with_registers(db: sqlite3.Connection, view: str, c: set[str], names: set[str]):
    """The kernels FROM clause and where register counts come from: the view itself (later
    revisions) or, joined in, its kernel symbol (ROCm 7.0's view does not carry them)."""
    source = f"{sql_identifier(view)} K"
    if "sgpr_count" in c or "rocpd_info_kernel_symbol" not in names:
        return source, lambda *spellings: pick(c, *spellings, alias="K")
    symbols = columns_of(db, "rocpd_info_kernel_symbol")
    same_run = " AND S.guid = K.guid" if "guid" in c & symbols else ""
    source += f" LEFT JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id{same_run}"
    return source, lambda *spellings: pick(symbols, *spellings, alias="S")


def _api_calls(db: sqlite3.Connection, view: str, names: set[str]) -> Plan:
    c = columns_of(db, view)
    return sql_identifier(view), present(
        {
            "source": f"'{SOURCE}'",
            "domain": pick(c, "category"),
            "api_name": pick(c, "name"),
            "start_ns": '"start"',
            "duration_ns": '"end" - "start"',
            "process_id": pick(c, "pid"),
            "thread_id": pick(c, "tid"),
            "correlation_id": pick(c, "corr_id", "correlation_id"),
        }
    )


def _memory_copies(db: sqlite3.Connection, view: str, names: set[str]) -> Plan:
    c = columns_of(db, view)
    src = pick(c, *(f"src_{name}" for name in _AGENT_INDEX))
    dst = pick(c, *(f"dst_{name}" for name in _AGENT_INDEX))
    return sql_identifier(view), present(
        {
            "source": f"'{SOURCE}'",
            "direction": pick(c, "name"),
            "src_agent": _agent_name(src),
            "dst_agent": _agent_name(dst),
            "bytes": pick(c, "size"),
            "start_ns": '"start"',
            "duration_ns": '"end" - "start"',
            "queue_id": pick(c, "queue_id"),
            "correlation_id": pick(c, "corr_id", "correlation_id"),
        }
    )


def _counters(db: sqlite3.Connection, view: str, names: set[str]) -> Plan:
    c = columns_of(db, view)
    index = pick(c, *_AGENT_INDEX)
    return sql_identifier(view), present(
        {
            "source": f"'{SOURCE}'",
            "dispatch_id": pick(c, "dispatch_id"),
            "correlation_id": pick(c, "correlation_id", "corr_id"),
            "kernel_name": pick(c, "kernel_name"),
            "agent": _agent_name(index),
            "counter": pick(c, "counter_name"),
            "value": pick(c, "value", "counter_value"),
        }
    )


def _agents(db: sqlite3.Connection, view: str, names: set[str]) -> Plan:
    c = columns_of(db, view)
    extdata = pick(c, "extdata")

    def extra(key: str) -> str | None:
        return (
            extdata
            and f"CASE WHEN json_valid({extdata}) THEN json_extract({extdata}, "
            f"{sql_literal('$.' + key)}) END"
        )

    return sql_identifier(view), present(
        {
            "source": f"'{SOURCE}'",
            "agent_id": _agent_name(pick(c, "logical_index", "absolute_index")),
            "node_id": pick(c, "absolute_index"),
            "agent_type": pick(c, "type"),
            "name": pick(c, "name"),
            "product_name": pick(c, "product_name"),
            "compute_units": extra("cu_count"),
            "wave_front_size": extra("wave_front_size"),
            "max_clock_mhz": extra("max_engine_clk_fcompute"),
            "details_json": extdata and f"CASE WHEN json_valid({extdata}) THEN {extdata} END",
        }
    )

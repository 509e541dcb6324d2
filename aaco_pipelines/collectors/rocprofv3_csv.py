"""rocprofv3's CSV output → plans for kernel_events, api_calls, memory_copies, counters, agents.

The output is a folder of `<prefix>_<kind>.csv` files (any subset, any prefix), or one such
file, which stands for its run: the files of the same prefix beside it are read with it, and
`missing_from_run` says what is lost when they are not there. Each file is recognised by its
header, not its name, and read by DuckDB with a fixed dialect and its own column names
lower-cased, so every header generation rocprofv3 wrote (ROCm 6.2 to 7.x, `rocpd convert`) maps
onto the same TraceLake columns.

Entry points: `plans` (one plan per TraceLake table the output has), `trace_files`, `run_files`
and `missing_from_run`.

Concepts: docs/concepts/gpu-traces.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb

from aaco_pipelines.collectors import trace_paths
from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.quoting import excerpt
from aaco_pipelines.foundation.sql import sql_identifier, sql_literal, sql_path

SOURCE = "rocprofv3_csv"

# Kind of file → the TraceLake table it fills.
TABLE_OF_KIND = {
    "kernel_trace": "kernel_events",
    "api_trace": "api_calls",
    "memory_copy_trace": "memory_copies",
    "counter_collection": "counters",
    "agent_info": "agents",
}
# rocprofv3's own file names: a file named so must have the matching header.
_SUFFIXES = {
    "kernel_trace.csv": "kernel_trace",
    "hip_api_trace.csv": "api_trace",
    "hsa_api_trace.csv": "api_trace",
    "marker_api_trace.csv": "api_trace",
    "rccl_api_trace.csv": "api_trace",
    "memory_copy_trace.csv": "memory_copy_trace",
    "counter_collection.csv": "counter_collection",
    "agent_info.csv": "agent_info",
}
# The outputs of a run whose absence beside one file of it costs something, and what.
_WHAT_A_MISSING_FILE_COSTS = {
    "agent_info.csv": "the GPU goes unnamed: no datasheet envelope, no roofline verdicts",
    "hip_api_trace.csv": "no HIP API calls: kernels are not tied to the calls that launched them",
}
# The columns that identify a kind; checked in this order (counter rows also name a kernel).
_SIGNATURES = (
    ("counter_collection", {"counter_name", "counter_value"}),
    ("kernel_trace", {"kernel_name", "start_timestamp", "end_timestamp"}),
    ("api_trace", {"domain", "function", "start_timestamp", "end_timestamp"}),
    ("memory_copy_trace", {"direction", "source_agent_id", "start_timestamp", "end_timestamp"}),
    ("agent_info", {"node_id", "agent_type"}),
)


def csv_header(path: Path) -> list[str]:
    """The first line's column names, lower-cased and trimmed ([] for an empty file).
    AacoInputError for a header Python's csv module refuses (a field over its 128 KB limit,
    as an unclosed quote makes): no profiler writes one."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            first = next(csv.reader(handle), [])
    except csv.Error as exc:
        raise AacoInputError(
            f"not a profiler's CSV header ({exc}: a header field over "
            f"{csv.field_size_limit() // 1024} KB, or an unclosed quote)",
            path=path,
            fix="give rocprofv3's or rocprof's own CSV; re-collect it if it was damaged",
        ) from None
    names = [name.strip().lower() for name in first]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # DuckDB would say "Duplicate named argument" in a binder message
        raise AacoInputError(
            f"the CSV header names {excerpt(', '.join(twice))} twice: no profiler writes that",
            path=path,
            fix="re-collect the trace, or remove the repeated column",
        )
    return names


def classify(header: list[str]) -> str | None:
    """Which rocprofv3 CSV a header belongs to (a key of TABLE_OF_KIND), None if none."""
    names = set(header)
    return next((kind for kind, needed in _SIGNATURES if needed <= names), None)


def trace_files(path: Path) -> dict[str, list[Path]]:
    """The rocprofv3 CSV files of a folder (searched recursively: `--pmc` runs write pmc_N/
    subfolders) or of a single file with its run's files beside it (`run_files`), by kind. A
    file named like a rocprofv3 output whose header does not match is truncated or corrupt,
    and stops the read rather than being skipped. FIFOs, devices and links out of the folder
    are refused before any file is opened."""
    path = Path(path)
    single = trace_paths.check_trace(path) == "file"
    candidates = run_files(path) if single else trace_paths.trace_files(path, "*.csv")
    found: dict[str, list[Path]] = {}
    for candidate in candidates:
        named = single or _named_kind(candidate)
        kind = _kind_of(candidate, named)
        if isinstance(named, str) and kind is not None and kind != named:
            missing = ", ".join(sorted(dict(_SIGNATURES)[named] - set(csv_header(candidate))))
            raise AacoInputError(
                f"named a {named} CSV, but its header has no {missing} (it reads as a {kind} "
                "one): a column was renamed or the file is another's",
                path=candidate,
                fix=f"give rocprofv3's own {named}.csv, or rename the file if it is a {kind}",
            )
        if kind is None and named:
            raise AacoInputError(
                "not a rocprofv3 CSV this reader knows (unrecognised header)",
                path=candidate,
                fix="give rocprofv3's own kernel_trace / hip_api_trace / memory_copy_trace / "
                "counter_collection / agent_info CSV; re-collect if it was truncated",
            )
        if kind is not None:
            found.setdefault(kind, []).append(candidate)
    return found


def run_files(path: Path) -> list[Path]:
    """A trace file and, when it is named like a rocprofv3 CSV output (`<prefix>_<kind>.csv`),
    the other outputs of its run beside it (same prefix), each checked safe to open
    (trace_paths.files_beside); any other file alone."""
    prefix = _run_prefix(path)
    if prefix is None:
        return [path]
    return [path, *trace_paths.files_beside(path, [prefix + s for s in _SUFFIXES])]


def missing_from_run(path: Path) -> str | None:
    """What one rocprofv3 CSV file lacks that its run's other outputs would give (the agent
    info, the HIP API trace), and what that costs, in one line; None when nothing is missing
    or `path` is not such a file."""
    prefix = _run_prefix(path)
    if prefix is None:
        return None
    present = {p.name for p in run_files(path)}
    lost = [
        f"{prefix}{suffix} ({cost})"
        for suffix, cost in _WHAT_A_MISSING_FILE_COSTS.items()
        if prefix + suffix not in present
    ]
    if not lost:
        return None
    return (
        f"reading {path.name} without {' or '.join(lost)} beside it; ingest the whole "
        "rocprofv3 output folder, or copy those files beside this one"
    )


def _run_prefix(path: Path) -> str | None:
    """`<prefix>_` of a file named like a rocprofv3 CSV output, None for any other name."""
    suffix = next((s for s in _SUFFIXES if path.name.endswith(s)), None)
    return path.name.removesuffix(suffix) if suffix else None


def plans(con: duckdb.DuckDBPyConnection, path: Path) -> dict[str, Plan]:
    """One plan (FROM clause, column expressions) per TraceLake table the output has."""
    builders = {
        "kernel_trace": _kernel_events,
        "api_trace": _api_calls,
        "memory_copy_trace": _memory_copies,
        "counter_collection": _counters,
        "agent_info": _agents,
    }
    files = trace_files(path)
    result = {}
    for kind in TABLE_OF_KIND:  # kernels first: the table everything else hangs off
        if kind in files:
            view, columns = register_csv(con, f"rocprofv3_{kind}", files[kind])
            if kind == "agent_info":  # one copy per pmc_N/ pass of a counter run
                view = f"(SELECT DISTINCT * FROM {view})"
            result[TABLE_OF_KIND[kind]] = (view, builders[kind](columns))
    return result


def register_csv(con: duckdb.DuckDBPyConnection, view: str, files: list[Path]) -> tuple[str, set]:
    """A DuckDB view over CSV files (their columns united by name), and its column names."""
    selects, columns = [], set()
    for file in files:
        header = csv_header(file)
        columns |= set(header)
        selects.append(f"SELECT * FROM {read_csv_sql(file, header)}")
    view = sql_identifier(view)
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS " + " UNION ALL BY NAME ".join(selects))
    return view, columns


# Columns rocprofv3 always writes as integers: parsed as BIGINT straight away (parsing text
# and casting it afterwards costs a second pass over 10^7-row traces); everything else is text.
INTEGER_COLUMNS = frozenset(
    {
        "queue_id", "stream_id", "thread_id", "process_id", "dispatch_id", "kernel_id",
        "correlation_id", "start_timestamp", "end_timestamp", "lds_block_size", "scratch_size",
        "vgpr_count", "accum_vgpr_count", "sgpr_count", "arch_vgpr_count",
        "private_segment_size", "group_segment_size",
        "workgroup_size_x", "workgroup_size_y", "workgroup_size_z",
        "grid_size_x", "grid_size_y", "grid_size_z",
    }
)  # fmt: skip


def read_csv_sql(file: Path, header: list[str]) -> str:
    """DuckDB's read_csv of one file with its own header, no sniffing: integer columns typed,
    the rest VARCHAR. A fixed dialect (comma, double quotes, strict) reads a quoted kernel name
    with commas, or a short file, the same way every time, and a malformed row is an error
    instead of a silent guess."""
    columns = ", ".join(
        f"{sql_literal(name)}: '{'BIGINT' if name in INTEGER_COLUMNS else 'VARCHAR'}'"
        for name in header
    )
    return (
        f"read_csv({sql_path(file)}, header = true, auto_detect = false, delim = ',', "
        f"quote = '\"', escape = '\"', strict_mode = true, columns = {{{columns}}})"
    )


def column(columns: set, *names: str) -> str | None:
    """The first of `names` the file has, as a quoted identifier."""
    return next((sql_identifier(name) for name in names if name in columns), None)


def product(columns: set, prefix: str) -> str | None:
    """prefix_x * prefix_y * prefix_z as BIGINT, when the file has all three."""
    parts = [column(columns, f"{prefix}_{axis}") for axis in "xyz"]
    return " * ".join(f"CAST({p} AS BIGINT)" for p in parts) if all(parts) else None


def duration(start: str, end: str) -> str:
    return f"CAST({sql_identifier(end)} AS BIGINT) - CAST({sql_identifier(start)} AS BIGINT)"


def present(expressions: dict[str, str | None]) -> dict[str, str]:
    return {name: expr for name, expr in expressions.items() if expr is not None}


def _kind_of(file: Path, named: bool) -> str | None:
    """The kind of a CSV by its header; None for one that is not a rocprofv3 CSV, unless it is
    named like one (or given itself) and its header is broken: that is said."""
    try:
        return classify(csv_header(file))
    except UnicodeDecodeError:
        return None
    except AacoInputError:
        if named:
            raise
        return None


def _named_kind(file: Path) -> str | None:
    return next((kind for suffix, kind in _SUFFIXES.items() if file.name.endswith(suffix)), None)


def _agent_number(agent: str | None) -> str | None:
    """Agent_Id's number: "Agent 2", "GPU 0" or a bare "2" → 2 (the index rocprofv3 printed).
    rocprofv3's own "Agent N" by prefix and substring (a sixth of the time of a regular
    expression; `agent[7:]` list slicing took twice as long as substr, 0.1 s a 10^7-kernel
    load), anything else by its trailing digits. (DuckDB's ltrim with a character set cost
    0.4 µs a row.)"""
    if not agent:
        return None
    return (
        f"CASE WHEN prefix({agent}, 'Agent ') THEN TRY_CAST(substr({agent}, 7) AS INTEGER) "
        f"ELSE TRY_CAST(regexp_extract({agent}, '[0-9]+$') AS INTEGER) END"
    )


# kernel_trace headers by generation (docs/concepts/gpu-traces.md): ROCm 7.x and `rocpd convert`
# write LDS_Block_Size, Scratch_Size, VGPR_Count (or Arch_VGPR_Count) and Agent_Id as
# "Agent 2"; ROCm 6.2 to 6.4.1 and the documentation's 19-column sample write
# Group_Segment_Size, Private_Segment_Size and a bare number. Grid_Size_* count work-items, not
# workgroups, in every generation (rocprofiler-sdk issue "Grid_Size ... 1048576"): grid_size is
# total work-items. Durations are End - Start of the file's raw nanoseconds, never fixed.
def _kernel_events(c: set) -> dict[str, str]:
    name = column(c, "kernel_name")
    return present(
        {
            "source": f"'{SOURCE}'",
            "kernel_name": name,
            "start_ns": column(c, "start_timestamp"),
            "duration_ns": duration("start_timestamp", "end_timestamp"),
            "thread_id": column(c, "thread_id"),
            "process_id": column(c, "process_id"),
            "device_id": _agent_number(column(c, "agent_id")),
            "queue_id": column(c, "queue_id"),
            "stream_id": column(c, "stream_id"),
            "correlation_id": column(c, "correlation_id"),
            "dispatch_id": column(c, "dispatch_id"),
            "grid_size": product(c, "grid_size"),
            "workgroup_size": product(c, "workgroup_size"),
            "lds_bytes": column(c, "lds_block_size", "group_segment_size"),
            "scratch_bytes": column(c, "scratch_size", "private_segment_size"),
            "vgpr_count": column(c, "vgpr_count", "arch_vgpr_count"),
            "accum_vgpr_count": column(c, "accum_vgpr_count"),
            "sgpr_count": column(c, "sgpr_count"),
        }
    )


def _api_calls(c: set) -> dict[str, str]:
    return present(
        {
            "source": f"'{SOURCE}'",
            "domain": column(c, "domain"),
            "api_name": column(c, "function"),
            "start_ns": column(c, "start_timestamp"),
            "duration_ns": duration("start_timestamp", "end_timestamp"),
            "process_id": column(c, "process_id"),
            "thread_id": column(c, "thread_id"),
            "correlation_id": column(c, "correlation_id"),
        }
    )


def _memory_copies(c: set) -> dict[str, str]:
    return present(
        {
            "source": f"'{SOURCE}'",
            "direction": column(c, "direction"),
            "src_agent": column(c, "source_agent_id"),
            "dst_agent": column(c, "destination_agent_id"),
            "start_ns": column(c, "start_timestamp"),
            "duration_ns": duration("start_timestamp", "end_timestamp"),
            "correlation_id": column(c, "correlation_id"),
        }
    )


def _counters(c: set) -> dict[str, str]:
    return present(
        {
            "source": f"'{SOURCE}'",
            "dispatch_id": column(c, "dispatch_id"),
            "correlation_id": column(c, "correlation_id"),
            "kernel_name": column(c, "kernel_name"),
            "agent": column(c, "agent_id"),
            "counter": column(c, "counter_name"),
            "value": column(c, "counter_value"),
        }
    )


_AGENT_COLUMNS = {
    "node_id": ("node_id",),
    "agent_type": ("agent_type",),
    "name": ("name",),
    "product_name": ("product_name",),
    "compute_units": ("cu_count",),
    "wave_front_size": ("wave_front_size",),
    "max_clock_mhz": ("max_engine_clk_fcompute",),
}


def _agents(c: set) -> dict[str, str]:
    """Agents as rocprofv3 names them in the other files ("Agent <logical node id>", its
    default index); every column not mapped is kept, typed, in details_json."""
    mapped = {name for names in _AGENT_COLUMNS.values() for name in names} | {"logical_node_id"}
    index = column(c, "logical_node_id", "node_id")
    details = ", ".join(f"{sql_literal(name)}: {_as_json(name)}" for name in sorted(c - mapped))
    return present(
        {
            "source": f"'{SOURCE}'",
            "agent_id": index and f"'Agent ' || {index}",
            **{field: column(c, *names) for field, names in _AGENT_COLUMNS.items()},
            "details_json": f"to_json({{{details}}})" if details else None,
        }
    )


def _as_json(column_name: str) -> str:
    """A column as JSON: the value itself when it parses as JSON, else a JSON string. The
    name is the file's own, so it is only ever a quoted identifier here."""
    value = sql_identifier(column_name)
    return f"coalesce(TRY_CAST({value} AS JSON), to_json({value}))"

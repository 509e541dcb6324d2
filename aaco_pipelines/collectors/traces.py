"""Device traces of AMD's profilers → rows of the TraceLake schema.

`detect_format` decides what a path holds by its content — the SQLite header and then the table
names, the gzip magic (and an intact stream), the JSON document's opening, a CSV header — so a
renamed or misnamed file is still read right. What is no device trace is said for what it is,
before anything is copied or loaded: an ONNX Runtime profile alone (`detect_device_trace`), a
Chrome trace that rpd2tracing exported from an RPD database.

`load_trace` asks that format's module for one plan per table (the FROM clause the rows come
from and one SQL expression per schema column) and runs one `INSERT ... SELECT` per table on
the caller's connection, inside its transaction: DuckDB's parallel scan for CSV and JSON, Arrow
batches fetched a chunk at a time from the standard library's sqlite3 for rocpd and RPD
databases (DuckDB's sqlite extension cannot be downloaded here), read in the calling thread
under a deadline, stop signals and a row cap (bounded_reads: a rocpd view is SQL the file
brings) while DuckDB inserts them beside it (streamed_insert). Rows never become Python objects in the DuckDB path and never pile up in
either. Kernel families are recorded after the load, once per distinct kernel name
(`label_kernels`). A gzip trace is inflated under a cap, into AACO_HOME's scratch folder when
SQLite must read it (inflation).

`collect_trace` runs the same load into an in-memory DuckDB and writes each table to Parquet,
all files renamed into place only after every one succeeded.
"""

from __future__ import annotations

import codecs
import csv
import os
import re
import shutil
import sqlite3
import tempfile
import zlib
from contextlib import closing, nullcontext
from pathlib import Path

import duckdb
import pyarrow as pa

from aaco_pipelines.collectors import (
    rocpd,
    rocprof_v1,
    rocprofv3_csv,
    rocprofv3_json,
    rpd,
    trace_paths,
)
from aaco_pipelines.collectors.bounded_reads import TraceRead
from aaco_pipelines.collectors.full_disk import full_disk
from aaco_pipelines.collectors.inflation import inflated_copy, inflated_head, is_gzip
from aaco_pipelines.collectors.kernel_families import kernel_families
from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.collectors.streamed_insert import streamed_insert
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.quoting import excerpt
from aaco_pipelines.foundation.sql import sql_identifier, sql_literal
from aaco_pipelines.foundation.stopping import raise_if_stopped
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.schema import schema_ddl, sql_projection, trace_table

FORMATS = ("rocprofv3_csv", "rocprofv3_json", "rocpd", "rpd", "rocprof_v1", "ort_profile")
SUPPORTED = (
    "supported: a rocprofv3 CSV output folder or one of its *_kernel_trace.csv / "
    "*_hip_api_trace.csv / *_memory_copy_trace.csv / *_counter_collection.csv / "
    "*_agent_info.csv files (its run's other files beside it are read too), rocprofv3 JSON "
    "(*_results.json or .json.gz), a ROCm 7 rocpd database (*_results.db), a rocmProfileData "
    "RPD database (.rpd, or .rpd.gz), a rocprof v1 results.csv; an ONNX Runtime profile "
    "(*onnxruntime_profile*.json) only beside one of these, in a folder given whole"
)
_DUCKDB_READERS = {
    "rocprofv3_csv": rocprofv3_csv,
    "rocprofv3_json": rocprofv3_json,
    "rocprof_v1": rocprof_v1,
}
_SQLITE_READERS = {"rocpd": rocpd, "rpd": rpd}
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_SUFFIXES = (".db", ".rpd", ".sqlite", ".sqlite3")
_HEAD_BYTES = 1 << 16
_SQLITE_CHUNK_ROWS = 16_384
# What a file that is no trace at all says; any other failure names what is wrong with a trace.
_NOT_A_TRACE = ("not a trace format this reader knows", "the file is empty")
_SQLITE_TYPES = {pa.int32(): "INTEGER", pa.int64(): "INTEGER", pa.float64(): "REAL"}
_READ_ERRORS = (
    duckdb.Error,
    sqlite3.Error,
    pa.ArrowException,
    OSError,
    EOFError,
    ValueError,
    zlib.error,
)


def detect_format(path: Path, *, scratch: Path | None = None) -> str:
    """The format of a trace file or folder, one of FORMATS; AacoInputError when it is none
    of them, unreadable or truncated. `scratch`: where a gzip database is inflated to be
    looked at (default AACO_HOME's scratch folder)."""
    return _resolve(Path(path), scratch)[0]


def detect_device_trace(path: Path, *, scratch: Path | None = None) -> str:
    """The format of a device trace, as `detect_format`; an ONNX Runtime profile alone (host
    node times, no device kernels) is refused, saying what to give instead."""
    trace_format, source = _resolve(Path(path), scratch)
    _refuse_host_profile(trace_format, source)
    return trace_format


def trace_files(path: Path) -> list[Path]:
    """Every file a trace is read from, to copy or size it: a folder's files, or the file
    with, for one file of a rocprofv3 CSV output, its run's files beside it."""
    path = Path(path)
    if trace_paths.check_trace(path) == "folder":
        return trace_paths.trace_files(path)
    return rocprofv3_csv.run_files(path)


def load_trace(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    session_id: str,
    *,
    iteration: int | None = None,
    scratch: Path | None = None,
) -> dict[str, int]:
    """Insert a trace's rows into the TraceLake tables open on `con`, inside the caller's
    transaction; {table: rows} for the tables it had rows for.

    This is the one reader of device traces: rows go from the file straight into the tables in
    one INSERT per table (DuckDB's parallel CSV/JSON scan, or sqlite3 chunks as Arrow batches),
    so a ten-million-kernel trace is read once and never becomes Python objects; kernel families
    come after, per distinct name (`label_kernels`). `iteration` stamps every kernel with that
    iteration (a trace with no ONNX Runtime runs to place kernels in). `scratch`: as for
    `detect_format`."""
    trace_format, source = _resolve(Path(path), scratch)
    _refuse_host_profile(trace_format, source)
    session = sql_literal(session_id)
    try:
        counts = _insert_tables(con, trace_format, source, session, iteration, scratch)
        for database in _counter_pass_databases(Path(path), trace_format, source):
            counts["counters"] = counts.get("counters", 0) + _insert_counters(
                con, database, session, scratch
            )
        if counts.get("counters"):
            _refuse_unusable_counters(con, session_id, source)
    except duckdb.OutOfMemoryException as exc:
        raise MemoryError(str(exc)) from exc  # the process's limit, not the trace
    except _READ_ERRORS as exc:
        raise _read_error(exc, trace_format, source) from exc
    except RuntimeError:
        raise_if_stopped()  # DuckDB caught the stop signal and said "Query interrupted"
        raise
    return {table: rows for table, rows in counts.items() if rows}


def _refuse_unusable_counters(con, session_id: str, source: Path) -> None:
    """Hardware counters count up from zero: a NaN, an infinity or a negative value is a
    damaged file, refused in one line rather than stored as if measured."""
    bad, counter, value = con.execute(
        "SELECT count(*), arg_min(counter, value), min(value) FROM counters "
        "WHERE session_id = ? AND NOT (isfinite(value) AND value >= 0)",
        [session_id],
    ).fetchall()[0]
    if bad:
        raise AacoInputError(
            f"{bad} counter value(s) are not finite, non-negative counts (for example "
            f"{excerpt(counter)} = {value})",
            path=source,
            fix="re-collect the counters (rocprofv3 --pmc), or ingest the trace without its "
            "counter files",
        )


def _refuse_host_profile(trace_format: str, source: Path) -> None:
    if trace_format == "ort_profile":
        raise AacoInputError(
            "an ONNX Runtime profile alone: host-side node times, no device kernels, so not a "
            "device trace",
            path=source,
            fix="put it, named *onnxruntime_profile*.json, in the folder of the device trace "
            "recorded with it and give that folder (it places the kernels on ONNX nodes); to "
            "measure a model on this host, use `aaco run --model MODEL`",
        )


def _read_error(exc: BaseException, trace_format: str, source: Path) -> AacoInputError:
    """What a failed read says: a full disk names its folder, an overflow the timestamps,
    anything else the trace."""
    problem = full_disk(exc)
    if problem is not None:
        return problem
    if isinstance(exc, duckdb.OutOfRangeException) and "overflow" in str(exc).lower():
        return AacoInputError(
            f"a time in this {trace_format} trace overflows 64-bit nanoseconds ({_reason(exc)})",
            path=source,
            fix="its timestamps are corrupt (an end before a start, or a value near 2^63); "
            "re-collect it",
        )
    return AacoInputError(
        f"could not read this {trace_format} trace ({_reason(exc)})",
        path=source,
        fix="the trace is truncated or corrupt, or not what its header says; re-collect it",
    )


def collect_trace(path: Path, session_id: str, out_dir: Path) -> dict[str, int]:
    """Write out_dir/<table>.parquet for every table the trace has rows for; {table: rows}.

    The trace is loaded into an in-memory DuckDB by `load_trace` and each table copied out, for
    looking at a trace's tables without a TraceLake; sessions load large traces straight into
    the TraceLake instead. Files appear only once every table succeeded."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".trace-", dir=out_dir))
    try:
        with engine.connect() as con:
            for statement in schema_ddl():
                con.execute(statement)
            counts = load_trace(con, path, session_id, scratch=staging)
            label_kernels(con, session_id)
            for table in counts:
                target = sql_literal(str(staging / f"{table}.parquet"))
                con.execute(f"COPY ({_copied(table)}) TO {target} (FORMAT parquet)").fetchall()
        for table in counts:
            os.replace(staging / f"{table}.parquet", out_dir / f"{table}.parquet")
        return counts
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copied(table: str) -> str:
    """What collect_trace writes of a table: kernels with their families, in time order (a
    view's join keeps no order of its own)."""
    if table == "kernel_events":
        return "FROM kernel_events_with_family ORDER BY start_ns, kernel_name"
    return f"FROM {table}"


# --- detection --------------------------------------------------------------------------------


def _resolve(path: Path, scratch: Path | None) -> tuple[str, Path]:
    """(format, the file or folder to read). A folder is a rocprofv3 CSV output, or holds
    exactly one trace file of another format (a rocpd database, a JSON results file). What
    would hang or lead out of the folder (a FIFO, a device, a bad link) is refused first. A
    folder whose only would-be trace is damaged (a corrupt database) says so."""
    if trace_paths.check_trace(path) == "file":
        return _detect_file(path, scratch), path
    if rocprofv3_csv.trace_files(path):
        return "rocprofv3_csv", path
    found, damaged = [], []
    for file in _visible_files(path):
        try:
            found.append((_detect_file(file, scratch), file))
        except AacoInputError as exc:
            if not exc.problem.startswith(_NOT_A_TRACE):
                damaged.append(exc)
    found = [(fmt, file) for fmt, file in found if fmt != "ort_profile"] or found
    if len(found) == 1:
        return found[0]
    if not found and damaged:
        raise damaged[0]
    problem = "several traces in one folder" if found else "no trace found in this folder"
    raise AacoInputError(problem, path=path, fix=f"give the trace file itself; {SUPPORTED}")


def _visible_files(folder: Path) -> list[Path]:
    files = trace_paths.trace_files(folder, recursive=False)
    return [p for p in files if not p.name.startswith(".")]


def _detect_file(path: Path, scratch: Path | None) -> str:
    zipped = is_gzip(path)
    head = inflated_head(path, _HEAD_BYTES) if zipped else _plain_head(path)
    if not head:
        raise AacoInputError(
            "the file is empty", path=path, fix=f"re-collect the trace; {SUPPORTED}"
        )
    if head.startswith(_SQLITE_MAGIC):
        with _plain_copy(path, zipped, scratch) as plain:
            return _detect_database(path, plain)
    if path.name.lower().removesuffix(".gz").endswith(_SQLITE_SUFFIXES):
        raise AacoInputError(
            "named like a SQLite trace database, but it is not a SQLite database (its first "
            "bytes are not SQLite's header): corrupt, or another file renamed",
            path=path,
            fix="copy the database again in full, or re-collect it",
        )
    text = _text(head)
    if text is not None and rpd.exported_by_rpd2tracing(text):
        raise AacoInputError(
            "a Chrome trace exported by rpd2tracing (rocmProfileData) from an RPD database: "
            "a picture of the trace for chrome://tracing, without the launch details and "
            "links aaco reads",
            path=path,
            fix="ingest the .rpd database it came from (rpd2tracing's first argument): "
            "aaco ingest TRACE.rpd",
        )
    fmt = text is not None and _detect_text(text, zipped)
    if not fmt:
        raise AacoInputError("not a trace format this reader knows", path=path, fix=SUPPORTED)
    return fmt


def _plain_head(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(_HEAD_BYTES)


def _text(head: bytes) -> str | None:
    """The head as text (a multi-byte character cut at the end is fine), None if binary."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text.lstrip("\ufeff \t\r\n")


def _detect_text(text: str, zipped: bool) -> str | None:
    if rocprofv3_json.matches(text):
        return "rocprofv3_json"
    if text.startswith("[") and re.search(r'"cat"\s*:\s*"(Session|Node)"', text):
        return "ort_profile"  # ONNX Runtime's categories; any other Chrome trace is refused
    if zipped or text.startswith(("{", "[")):
        return None  # a compressed CSV is not read as-is; JSON of another tool is not a trace
    header = [name.strip().lower() for name in next(csv.reader([text.splitlines()[0]]), [])]
    if rocprofv3_csv.classify(header):
        return "rocprofv3_csv"
    return "rocprof_v1" if rocprof_v1.matches(header) else None


def _detect_database(path: Path, plain: Path) -> str:
    read = TraceRead.of(path, plain.stat().st_size)
    try:
        with closing(read.connect(plain)) as db, read.explained():
            names = rocpd.object_names(db)
    except sqlite3.Error as exc:
        raise AacoInputError(
            f"a corrupt SQLite database, unreadable ({_reason(exc)})",
            path=path,
            fix="the file is truncated or damaged; copy it again in full, or re-collect it",
        ) from exc
    if rpd.matches(names):
        return "rpd"
    if rocpd.matches(names):
        return "rocpd"
    raise AacoInputError("a SQLite database, but neither rocpd nor RPD", path=path, fix=SUPPORTED)


def _plain_copy(path: Path, zipped: bool, scratch: Path | None):
    """The path itself, or its content inflated into `scratch` (SQLite cannot read gzip)
    while in use (inflation.inflated_copy: capped, always removed)."""
    if not zipped:
        return nullcontext(path)
    return inflated_copy(path, scratch or AacoPaths.from_env().scratch)


# --- writing ----------------------------------------------------------------------------------


def _insert_tables(
    con, trace_format: str, source: Path, session: str, iteration, scratch: Path | None
) -> dict:
    if trace_format in _SQLITE_READERS:
        with _plain_copy(source, is_gzip(source), scratch) as plain:
            read = TraceRead.of(source, plain.stat().st_size)
            with closing(read.connect(plain)) as db, read.explained():
                plans = _SQLITE_READERS[trace_format].plans(db)
                return {
                    table: _insert_batches(con, table, session, plan, db, iteration, read)
                    for table, plan in plans.items()
                }
    size = sum(file.stat().st_size for file in trace_files(source))
    with TraceRead.of(source, size).interrupting(con):
        plans = _DUCKDB_READERS[trace_format].plans(con, source)
        return {
            table: _insert_plan(con, table, session, plan, iteration)
            for table, plan in plans.items()
        }


def _insert_plan(con, table: str, session: str, plan: Plan, iteration: int | None) -> int:
    """One INSERT ... SELECT from the file into `table`, typed by the schema."""
    source, expressions = plan
    expressions = {"session_id": session, **expressions}
    if table == "kernel_events":
        expressions = {**expressions, **_stamped_iteration(iteration)}
    target, schema = trace_table(table, expressions)
    select = sql_projection(schema, expressions)
    inserted = con.execute(f"INSERT INTO {target} BY NAME SELECT {select} FROM {source}")
    return inserted.fetchall()[0][0]


def _insert_batches(
    con,
    table: str,
    session: str,
    plan: Plan,
    db: sqlite3.Connection,
    iteration: int | None,
    read: TraceRead,
) -> int:
    """INSERT of the plan's rows fetched from SQLite as Arrow batches: fetched in this thread
    (where a stop signal is seen), each SQLite step stopping at the read's deadline or a stop
    signal and the rows at its cap (`read`); inserted by DuckDB beside it (streamed_insert)."""
    target, schema = trace_table(table, {"session_id", *plan[1]})
    expressions = {f.name: sql_identifier(f.name) for f in schema}
    if table == "kernel_events":
        expressions.update(_stamped_iteration(iteration))
    select = sql_projection(schema, expressions)
    insert = f"INSERT INTO {target} BY NAME SELECT {select} FROM trace_batches"
    batches = _sqlite_batches(db, session, plan, schema, lambda rows: read.count(rows, table))
    return streamed_insert(con, insert, "trace_batches", schema, batches)


def _counter_pass_databases(path: Path, trace_format: str, source: Path) -> list[Path]:
    """The rocpd databases of counter passes in pmc_<k>/ folders of a rocpd trace folder (as
    `aaco run --counters` writes them, one rocprofv3 run per pass): their counters belong to
    the trace too. A CSV folder's pmc_<k>/ files are read with it already."""
    if trace_format != "rocpd" or source == path:
        return []
    return [
        database
        for database in trace_paths.trace_files(path, "*.db")
        if database.parent != path and database.relative_to(path).parts[0].startswith("pmc_")
    ]


def _insert_counters(con, database: Path, session: str, scratch: Path | None) -> int:
    """A counter pass's rows of the counters table only: its kernels and agents are the traced
    pass's again (each counter pass is a run of its own)."""
    if _detect_file(database, scratch) != "rocpd":
        raise AacoInputError("a counter pass's database is not rocpd", path=database, fix=SUPPORTED)
    read = TraceRead.of(database, database.stat().st_size)
    with closing(read.connect(database)) as db, read.explained():
        plan = rocpd.plans(db).get("counters")
        if plan is None:
            return 0
        return _insert_batches(con, "counters", session, plan, db, None, read)


def _stamped_iteration(iteration: int | None) -> dict[str, str]:
    """The iteration every kernel is stamped with, when given."""
    return {} if iteration is None else {"iteration": str(int(iteration))}


def label_kernels(con: duckdb.DuckDBPyConnection, session_id: str) -> None:
    """Record the family of each kernel name of the session that has none in kernel_symbols
    (re-deciding names seen before, so a newer pattern table takes effect): thousands of
    distinct names classified, not millions of rows updated."""
    names = con.sql(
        "SELECT DISTINCT kernel_name FROM kernel_events "
        "WHERE session_id = $sid AND kernel_family IS NULL AND kernel_name IS NOT NULL",
        params={"sid": session_id},
    ).to_arrow_table()["kernel_name"]
    if len(names) == 0:
        return
    con.register(
        "labelled", pa.table({"kernel_name": names, "kernel_family": kernel_families(names)})
    )
    try:
        con.execute(
            "DELETE FROM kernel_symbols WHERE kernel_name IN (SELECT kernel_name FROM labelled)"
        )
        con.execute("INSERT INTO kernel_symbols BY NAME SELECT * FROM labelled")
    finally:
        con.unregister("labelled")


def _sqlite_batches(db, session: str, plan: Plan, schema: pa.Schema, count):
    """The plan's rows fetched from SQLite a chunk at a time, each chunk one Arrow batch. Only
    mapped columns are fetched; the others are null arrays, not a None per row. `count` hears
    the rows fetched so far, and refuses too many."""
    source, expressions = plan
    expressions = {"session_id": session, **expressions}
    fields = [field for field in schema if field.name in expressions]
    cursor = db.execute(f"SELECT {_sqlite_projection(fields, expressions)} FROM {source}")
    fetched_rows = 0
    while chunk := cursor.fetchmany(_SQLITE_CHUNK_ROWS):
        fetched_rows += len(chunk)
        count(fetched_rows)
        columns = zip(*chunk, strict=True)
        fetched = {
            f.name: pa.array(values, f.type) for f, values in zip(fields, columns, strict=True)
        }
        arrays = [
            fetched[f.name] if f.name in fetched else pa.nulls(len(chunk), f.type) for f in schema
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _sqlite_projection(fields: list[pa.Field], expressions: dict[str, str]) -> str:
    """A SQLite SELECT list of `fields` in order, each cast to its column's storage type."""
    return ", ".join(
        f"CAST({expressions[f.name]} AS {_SQLITE_TYPES.get(f.type, 'TEXT')}) "
        f"AS {sql_identifier(f.name)}"
        for f in fields
    )


def _reason(exc: BaseException) -> str:
    """An error's first line, and the file it names if any (DuckDB's CSV errors end with
    "file = <path>", which says which file of a folder failed)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    named = [line.removeprefix("file = ") for line in lines[1:] if line.startswith("file = ")]
    return f"{lines[0]} in {named[0]}" if named else lines[0]

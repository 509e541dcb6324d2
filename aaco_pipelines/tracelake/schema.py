"""The TraceLake schema's registry: every table by name, SCHEMA_VERSION, the DuckDB DDL, conform().

Each table is one Arrow schema, the single source of its DuckDB DDL, defined in the module of its
group under tracelake/tables/ (sessions, traces, generation, analysis, roofline, governance) and
imported here into TABLES, so code imports tables and helpers alike from this module
(`from aaco_pipelines.tracelake.schema import KERNEL_EVENTS, conform`). Here too: how tables are
stored (STORED_AS, TRACE_TABLES), the views read over them (VIEWS) and the statements creating them.

Every collector returns Arrow tables with exactly these schemas; times are integer nanoseconds
(Unix epoch for timestamps, plain ns for durations); `session_id` ties every row to its run and
`model_sha256` ties graph rows to the exact model file. Bump SCHEMA_VERSION with every change and
add the migration in `tracelake.store`.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.analysis import (
    BOTTLENECK_REPORTS,
    CRITICAL_PATH_NODES,
    CRITICAL_PATHS,
    DERIVED_METRICS,
    KERNEL_PLACES,
    MEASUREMENT_QUALITY,
    NODE_ATTRIBUTION,
    OP_BREAKDOWN,
    PHASE_BREAKDOWN,
    STRUCTURAL_DIFFS,
)
from aaco_pipelines.tracelake.tables.generation import (
    GENERATION_METRICS,
    GENERATION_STEPS,
    REQUESTS,
)
from aaco_pipelines.tracelake.tables.governance import (
    ALERT_DELIVERIES,
    ALERT_EVENTS,
    ALERTS,
    BASELINES,
    BISECTIONS,
    DRIFT_VERDICTS,
    OBJECTIVE_VERDICTS,
)
from aaco_pipelines.tracelake.tables.roofline import (
    COUNTER_ROOFLINE,
    HARDWARE_ENVELOPES,
    KERNEL_DIAGNOSES,
    ROOFLINE_POINTS,
)
from aaco_pipelines.tracelake.tables.sessions import (
    COMPLETED_SESSIONS,
    GRAPH_EDGES,
    GRAPH_NODES,
    ITERATIONS,
    MODELS,
    SESSIONS,
    TELEMETRY,
)
from aaco_pipelines.tracelake.tables.traces import (
    AGENTS,
    API_CALLS,
    COUNTERS,
    KERNEL_EVENTS,
    KERNEL_SYMBOLS,
    MEMORY_COPIES,
)

SCHEMA_VERSION = 24  # v24: a bottleneck class says whether the evidence decided it

TABLES: dict[str, pa.Schema] = {
    "models": MODELS,
    "graph_nodes": GRAPH_NODES,
    "graph_edges": GRAPH_EDGES,
    "sessions": SESSIONS,
    "iterations": ITERATIONS,
    "kernel_events": KERNEL_EVENTS,
    "telemetry": TELEMETRY,
    "api_calls": API_CALLS,
    "memory_copies": MEMORY_COPIES,
    "counters": COUNTERS,
    "agents": AGENTS,
    "node_attribution": NODE_ATTRIBUTION,
    "op_breakdown": OP_BREAKDOWN,
    "phase_breakdown": PHASE_BREAKDOWN,
    "requests": REQUESTS,
    "generation_steps": GENERATION_STEPS,
    "generation_metrics": GENERATION_METRICS,
    "derived_metrics": DERIVED_METRICS,
    "hardware_envelopes": HARDWARE_ENVELOPES,
    "roofline_points": ROOFLINE_POINTS,
    "bottleneck_reports": BOTTLENECK_REPORTS,
    "measurement_quality": MEASUREMENT_QUALITY,
    "drift_verdicts": DRIFT_VERDICTS,
    "objective_verdicts": OBJECTIVE_VERDICTS,
    "alerts": ALERTS,
    "alert_events": ALERT_EVENTS,
    "alert_deliveries": ALERT_DELIVERIES,
    "bisections": BISECTIONS,
    "structural_diffs": STRUCTURAL_DIFFS,
    "baselines": BASELINES,
    "kernel_symbols": KERNEL_SYMBOLS,
    "kernel_places": KERNEL_PLACES,
    "kernel_diagnoses": KERNEL_DIAGNOSES,
    "counter_roofline": COUNTER_ROOFLINE,
    "critical_paths": CRITICAL_PATHS,
    "critical_path_nodes": CRITICAL_PATH_NODES,
    "completed_sessions": COMPLETED_SESSIONS,
}
# Tables stored under another name: every session row lives in session_records, and `sessions`
# is the view of the completed ones, so reports, the gate, baselines and drift history never see
# a session that a kill, a full disk or a lock timeout left half-loaded or half-analysed. The
# stages that load and analyse a session read session_records.
STORED_AS = {"sessions": "session_records", "kernel_events": "kernel_events_profile"}

# kernel_events is stored as two tables, read as one view: rows with the whole schema (ONNX
# Runtime's profiler, a bundle's Parquet) in kernel_events_profile, and the kernels loaded from a
# device trace file in kernel_events_trace, which keeps only what a device trace has. DuckDB
# stores an all-NULL column at about 25 ns a row (2.1 s for the 9 columns a rocprofv3 kernel row
# left empty, 10^7 kernels), and a constant or copied one at 12-25 ns; a column the table lacks
# costs nothing. Every device kernel is of category Kernel, named by its kernel name: the view
# says so instead of each row.
TRACE_IMPLIED = {"category": "'Kernel'", "event_name": "kernel_name"}
PROFILE_ONLY = {"node_name", "op_type", "provider", "node_index", "input_shapes", "output_shapes",
                "kernel_family", "pool_threads"}  # fmt: skip
TRACE_KERNEL_EVENTS = pa.schema(
    [f for f in KERNEL_EVENTS if f.name not in PROFILE_ONLY and f.name not in TRACE_IMPLIED]
)
TRACE_TABLES = {"kernel_events": ("kernel_events_trace", TRACE_KERNEL_EVENTS)}


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder, add missing nullable columns and cast, so every source lands in one schema."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def duckdb_type(arrow_type: pa.DataType) -> str:
    """The DuckDB column type for an Arrow type of the TraceLake schema."""
    if pa.types.is_list(arrow_type):
        return duckdb_type(arrow_type.value_type) + "[]"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMPTZ" if arrow_type.tz else "TIMESTAMP"
    simple = {
        pa.string(): "VARCHAR",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
    }
    return simple[arrow_type]


# Device-trace kernels as kernel_events rows: the implied columns said.
TRACE_ROWS = (
    "SELECT *, "
    + ", ".join(f"{sql} AS {name}" for name, sql in TRACE_IMPLIED.items())
    + " FROM kernel_events_trace"
)
# kernel_events with every kernel's family: the one given by the source row (ONNX Runtime),
# else the one of its name in kernel_symbols. Readers that need families read this view. Each
# stored table is joined on its own: joined after their union, a query over a device trace's
# kernels took 30 % longer (the join kept its row filter, the sort lost the columns' ranges).
VIEWS = {
    "sessions": "SELECT r.* FROM session_records r SEMI JOIN completed_sessions USING (session_id)",
    "kernel_events": f"SELECT * FROM kernel_events_profile UNION ALL BY NAME {TRACE_ROWS}",
    "kernel_events_with_family": f"""
        SELECT e.* REPLACE (coalesce(e.kernel_family, s.kernel_family) AS kernel_family)
        FROM kernel_events_profile e LEFT JOIN kernel_symbols s
            ON e.kernel_family IS NULL AND s.kernel_name = e.kernel_name
        UNION ALL BY NAME
        SELECT t.*, s.kernel_family
        FROM ({TRACE_ROWS}) t LEFT JOIN kernel_symbols s ON s.kernel_name = t.kernel_name
    """,
}


def schema_ddl() -> list[str]:
    """Statements creating every table (if missing) and view of the TraceLake schema."""
    tables = [create_table_sql(stored(name), schema) for name, schema in TABLES.items()]
    tables += [create_table_sql(name, schema) for name, schema in TRACE_TABLES.values()]
    views = [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]
    return tables + views


def stored(table: str) -> str:
    """The name a table of TABLES is stored under in the TraceLake (where rows with its whole
    schema are inserted)."""
    return STORED_AS.get(table, table)


def stored_tables(table: str) -> list[str]:
    """Every table a table of TABLES keeps rows in: what a delete of its rows must reach."""
    trace = TRACE_TABLES.get(table)
    return [stored(table), trace[0]] if trace else [stored(table)]


def trace_table(table: str, columns) -> tuple[str, pa.Schema]:
    """Where rows of these columns loaded from a device trace file go, and that table's schema:
    the table of device-trace rows when it has every one of the columns (a reader that keeps
    the raw name apart from the kernel name, as rocprof v1's, gives the whole schema)."""
    trace = TRACE_TABLES.get(table)
    if trace is not None and set(columns) <= set(trace[1].names):
        return trace
    return stored(table), TABLES[table]


def create_table_sql(name: str, schema: pa.Schema) -> str:
    columns = ", ".join(f'"{f.name}" {duckdb_type(f.type)}' for f in schema)
    return f"CREATE TABLE IF NOT EXISTS {name} ({columns})"


def sql_projection(schema: pa.Schema, expressions: dict[str, str]) -> str:
    """A DuckDB SELECT list producing exactly `schema`: each column from its SQL expression, cast
    to the schema's type; columns without an expression are typed NULLs. Lets a reader stream a
    file into a schema-conformant Parquet file (`COPY (SELECT ...) TO ...`) without Python rows."""
    unknown = set(expressions) - set(schema.names)
    if unknown:
        raise KeyError(f"not columns of the schema: {sorted(unknown)}")
    return ",\n".join(
        f'CAST({expressions.get(field.name, "NULL")} AS {duckdb_type(field.type)}) AS "{field.name}"'
        for field in schema
    )

"""rocprofv3's JSON output (`<pid>_results.json`, or .json.gz) → table plans.

The file is one object, {"rocprofiler-sdk-tool": [entry, ...]}, one entry per profiled process.
The fields read (serialised by rocprofiler-sdk's cereal `save()` functions; checked against the
TraceLens MI350X sample):

- metadata.pid
- agents[]: id.handle, type (1 CPU, 2 GPU), node_id, logical_node_id, name (gfx target),
  product_name, cu_count, wave_front_size, max_engine_clk_fcompute, ... (the rest → details_json)
- kernel_symbols[]: kernel_id, kernel_name ("foo.kd"), formatted_kernel_name (the name the CSV
  prints), demangled_kernel_name, sgpr_count, arch_vgpr_count, accum_vgpr_count
- strings.buffer_records[i]: {kind: "HIP_RUNTIME_API", operations: [...]}, indexed by a record's
  numeric `kind`; a record's `operation` indexes `operations`
- buffer_records.kernel_dispatch[]: thread_id, correlation_id.internal, start_timestamp,
  end_timestamp, stream_id.handle, dispatch_info {agent_id.handle, queue_id.handle, kernel_id,
  dispatch_id, private_segment_size, group_segment_size, workgroup_size{x,y,z}, grid_size{x,y,z}}
- buffer_records.hip_api / hsa_api / marker_api / rccl_api[]: kind, operation, thread_id,
  correlation_id.internal, start_timestamp, end_timestamp
- buffer_records.memory_copy[]: kind, operation, correlation_id.internal, start/end_timestamp,
  src_agent_id.handle, dst_agent_id.handle, bytes

DuckDB's read_json (gzip included) parses only these fields into typed columns; dispatches are
unnested and joined to their symbol and agent in SQL, never looped over in Python. Agents are
named like the CSV's Agent_Id, "Agent <logical_node_id>" (rocprofv3's default index), and
device_id is that index. Counter collection records are not read yet (no sample to check).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb

from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.foundation.sql import sql_literal, sql_path
from aaco_pipelines.tracelake import engine

SOURCE = "rocprofv3_json"


_ID = "STRUCT(handle UBIGINT)"
_CORRELATION = "STRUCT(internal BIGINT, external BIGINT)"
_XYZ = "STRUCT(x BIGINT, y BIGINT, z BIGINT)"
_API_RECORD = (
    f"STRUCT(kind BIGINT, operation BIGINT, thread_id BIGINT, correlation_id {_CORRELATION}, "
    "start_timestamp BIGINT, end_timestamp BIGINT)[]"
)
_DISPATCH = (
    f"STRUCT(thread_id BIGINT, correlation_id {_CORRELATION}, start_timestamp BIGINT, "
    f"end_timestamp BIGINT, stream_id {_ID}, dispatch_info STRUCT(agent_id {_ID}, "
    f"queue_id {_ID}, kernel_id BIGINT, dispatch_id BIGINT, private_segment_size BIGINT, "
    f"group_segment_size BIGINT, workgroup_size {_XYZ}, grid_size {_XYZ}))[]"
)
_COPY = (
    f"STRUCT(kind BIGINT, operation BIGINT, thread_id BIGINT, correlation_id {_CORRELATION}, "
    f"start_timestamp BIGINT, end_timestamp BIGINT, src_agent_id {_ID}, dst_agent_id {_ID}, "
    "bytes BIGINT)[]"
)
_SYMBOL = (
    "STRUCT(kernel_id BIGINT, kernel_name VARCHAR, formatted_kernel_name VARCHAR, "
    "demangled_kernel_name VARCHAR, sgpr_count BIGINT, arch_vgpr_count BIGINT, "
    "accum_vgpr_count BIGINT)[]"
)
_ENTRY = (
    "STRUCT(metadata STRUCT(pid BIGINT), agents JSON[], kernel_symbols "
    f"{_SYMBOL}, strings STRUCT(buffer_records STRUCT(kind VARCHAR, operations VARCHAR[])[]), "
    f"buffer_records STRUCT(kernel_dispatch {_DISPATCH}, hip_api {_API_RECORD}, "
    f"hsa_api {_API_RECORD}, marker_api {_API_RECORD}, rccl_api {_API_RECORD}, "
    f"memory_copy {_COPY}))[]"
)
_API_LISTS = ("hip_api", "hsa_api", "marker_api", "rccl_api")
_AGENT_FIELDS = (
    "type",
    "node_id",
    "logical_node_id",
    "name",
    "product_name",
    "cu_count",
    "wave_front_size",
    "max_engine_clk_fcompute",
)


def matches(head: str) -> bool:
    """Whether the start of a JSON document is rocprofv3's results object."""
    return head.lstrip().startswith("{") and '"rocprofiler-sdk-tool"' in head


def plans(con: duckdb.DuckDBPyConnection, path: Path) -> dict[str, Plan]:
    """Parse the file once into a temp table and return one plan per non-empty record kind."""
    _load(con, path)
    for name, sql in _VIEWS.items():
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
    return {
        "kernel_events": (_KERNEL_SOURCE, _kernel_events()),
        "api_calls": (_API_SOURCE, _api_calls()),
        "memory_copies": (_COPY_SOURCE, _memory_copies()),
        "agents": ("json_agents", _agents()),
    }


def _load(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """The document's tool entries into a temp table. DuckDB parses one JSON object whole: a
    buffer of twice its `maximum_object_size` (so that is the document's own size: 4 GiB asked
    for 8 GiB) and the parsed tree, about 9 times the text in all (the 37 MB sample needed
    330-400 MiB). The connection's memory limit is raised to that for the read."""
    columns = "{" + sql_literal("rocprofiler-sdk-tool") + ": " + sql_literal(_ENTRY) + "}"
    size = min(document_bytes(path) + 1, MAX_OBJECT_BYTES)
    with engine.memory_at_least(con, PARSE_FACTOR * size + READ_HEADROOM):
        con.execute(
            "CREATE OR REPLACE TEMP TABLE json_tool AS "
            "SELECT row_number() OVER () AS entry, tool FROM ("
            'SELECT unnest("rocprofiler-sdk-tool") AS tool '
            f"FROM read_json({sql_path(path)}, format = 'auto', columns = {columns}, "
            f"maximum_object_size = {size}))"
        ).fetchall()


MAX_OBJECT_BYTES = (1 << 32) - 1  # DuckDB's largest maximum_object_size
PARSE_FACTOR, READ_HEADROOM = 10, 128 << 20


def document_bytes(path: Path) -> int:
    """The JSON text's size: the file's, or a gzip file's inflated (counted by inflating it:
    the gzip trailer holds it only modulo 4 GiB)."""
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    total = 0
    with gzip.open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            total += len(chunk)
    return total


_VIEWS = {
    "json_agents": (
        "SELECT entry, agent, CAST(agent->'id'->>'handle' AS UBIGINT) AS handle, "
        "CAST(agent->>'logical_node_id' AS BIGINT) AS logical_node_id "
        "FROM (SELECT entry, unnest(tool.agents) AS agent FROM json_tool)"
    ),
    "json_symbols": (
        "SELECT entry, s.kernel_id, s.sgpr_count, s.arch_vgpr_count, s.accum_vgpr_count, "
        "coalesce("
        "nullif(s.formatted_kernel_name, ''), nullif(s.demangled_kernel_name, ''), "
        "s.kernel_name) AS name "
        "FROM (SELECT entry, unnest(tool.kernel_symbols) AS s FROM json_tool) "
        "QUALIFY row_number() OVER (PARTITION BY entry, s.kernel_id) = 1"
    ),
    "json_kinds": (
        "SELECT entry, unnest(range(len(tool.strings.buffer_records))) AS kind, "
        "unnest(tool.strings.buffer_records) AS names FROM json_tool"
    ),
    "json_dispatches": (
        "SELECT entry, tool.metadata.pid AS pid, "
        "unnest(tool.buffer_records.kernel_dispatch) AS d FROM json_tool"
    ),
    "json_apis": " UNION ALL ".join(
        f"SELECT entry, tool.metadata.pid AS pid, unnest(tool.buffer_records.{name}) AS r "
        "FROM json_tool"
        for name in _API_LISTS
    ),
    "json_copies": (
        "SELECT entry, tool.metadata.pid AS pid, "
        "unnest(tool.buffer_records.memory_copy) AS m FROM json_tool"
    ),
}

_KERNEL_SOURCE = (
    "json_dispatches k "
    "LEFT JOIN json_symbols s ON s.entry = k.entry AND s.kernel_id = k.d.dispatch_info.kernel_id "
    "LEFT JOIN json_agents a ON a.entry = k.entry AND a.handle = k.d.dispatch_info.agent_id.handle"
)
_API_SOURCE = "json_apis r LEFT JOIN json_kinds n ON n.entry = r.entry AND n.kind = r.r.kind"
_COPY_SOURCE = (
    "json_copies c "
    "LEFT JOIN json_kinds n ON n.entry = c.entry AND n.kind = c.m.kind "
    "LEFT JOIN json_agents src ON src.entry = c.entry AND src.handle = c.m.src_agent_id.handle "
    "LEFT JOIN json_agents dst ON dst.entry = c.entry AND dst.handle = c.m.dst_agent_id.handle"
)


def _xyz(field: str) -> str:
    return f"{field}.x * {field}.y * {field}.z"


def _kernel_events() -> dict[str, str]:
    info = "k.d.dispatch_info"
    return {
        "source": f"'{SOURCE}'",
        "kernel_name": "s.name",
        "start_ns": "k.d.start_timestamp",
        "duration_ns": "k.d.end_timestamp - k.d.start_timestamp",
        "thread_id": "k.d.thread_id",
        "process_id": "k.pid",
        "device_id": "a.logical_node_id",
        "queue_id": f"{info}.queue_id.handle",
        "stream_id": "k.d.stream_id.handle",
        "correlation_id": "k.d.correlation_id.internal",
        "dispatch_id": f"{info}.dispatch_id",
        "grid_size": _xyz(f"{info}.grid_size"),
        "workgroup_size": _xyz(f"{info}.workgroup_size"),
        "lds_bytes": f"{info}.group_segment_size",
        "scratch_bytes": f"{info}.private_segment_size",
        "vgpr_count": "s.arch_vgpr_count",
        "accum_vgpr_count": "s.accum_vgpr_count",
        "sgpr_count": "s.sgpr_count",
    }


def _api_calls() -> dict[str, str]:
    return {
        "source": f"'{SOURCE}'",
        "domain": "n.names.kind",
        "api_name": "n.names.operations[r.r.operation + 1]",
        "start_ns": "r.r.start_timestamp",
        "duration_ns": "r.r.end_timestamp - r.r.start_timestamp",
        "process_id": "r.pid",
        "thread_id": "r.r.thread_id",
        "correlation_id": "r.r.correlation_id.internal",
    }


def _memory_copies() -> dict[str, str]:
    return {
        "source": f"'{SOURCE}'",
        "direction": "n.names.operations[c.m.operation + 1]",
        "src_agent": "'Agent ' || src.logical_node_id",
        "dst_agent": "'Agent ' || dst.logical_node_id",
        "bytes": "c.m.bytes",
        "start_ns": "c.m.start_timestamp",
        "duration_ns": "c.m.end_timestamp - c.m.start_timestamp",
        "correlation_id": "c.m.correlation_id.internal",
    }


def _agents() -> dict[str, str]:
    removed = json.dumps(dict.fromkeys(_AGENT_FIELDS))
    kind = "agent->>'type'"
    return {
        "source": f"'{SOURCE}'",
        "agent_id": "'Agent ' || logical_node_id",
        "node_id": "agent->>'node_id'",
        "agent_type": f"CASE {kind} WHEN '1' THEN 'CPU' WHEN '2' THEN 'GPU' ELSE {kind} END",
        "name": "agent->>'name'",
        "product_name": "agent->>'product_name'",
        "compute_units": "agent->>'cu_count'",
        "wave_front_size": "agent->>'wave_front_size'",
        "max_clock_mhz": "agent->>'max_engine_clk_fcompute'",
        "details_json": f"json_merge_patch(agent, {sql_literal(removed)})",
    }

"""ONNX Runtime's profile JSON → kernel_events rows, parsed by DuckDB (columnar, no Python loop).

The profile is a JSON array of Chrome trace events with `ts`/`dur` in µs relative to the
profiler's start. Categories: `Session` (model_loading, session_initialization, model_run),
`Node` (`<node>_kernel_time`, with op_name, provider, node_index and shapes in `args`; on GPU
providers this is the host launch time) and `Kernel` (device kernels that CUDA/ROCm providers
attach after their parent node, named by the kernel symbol). Timestamps become epoch ns by adding
`profiling_start_ns` (InferenceSession.get_profiling_start_time_ns). Each event is assigned the
index of the `model_run` it falls in, counted from the first run of the profiled pass proper
(the pass's warm-up runs get negative indices).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.schema import KERNEL_EVENTS, conform

SOURCE = "ort_profile"

_COLUMNS = "{cat: 'VARCHAR', name: 'VARCHAR', ph: 'VARCHAR', ts: 'BIGINT', dur: 'BIGINT', tid: 'BIGINT', args: 'JSON'}"

_EVENTS_SQL = f"""
WITH raw AS (
    SELECT * FROM read_json(?, format = 'array', columns = {_COLUMNS})
    WHERE ph = 'X'
),
runs AS (
    SELECT ts AS run_ts, ts + dur AS run_end,
           row_number() OVER (ORDER BY ts) - 1 - ? AS iteration
    FROM raw WHERE cat = 'Session' AND name = 'model_run'
)
SELECT
    ? AS session_id,
    '{SOURCE}' AS source,
    raw.cat AS category,
    runs.iteration::INTEGER AS iteration,
    raw.name AS event_name,
    CASE
        WHEN raw.cat = 'Node' THEN regexp_replace(raw.name, '_kernel_time$|_fence_before$|_fence_after$', '')
        WHEN raw.cat = 'Kernel' THEN coalesce(raw.args->>'parent_name', raw.args->>'node_name')
    END AS node_name,
    raw.args->>'op_name' AS op_type,
    raw.args->>'provider' AS provider,
    TRY_CAST(raw.args->>'node_index' AS INTEGER) AS node_index,
    raw.ts * 1000 + ? AS start_ns,
    raw.dur * 1000 AS duration_ns,
    raw.tid AS thread_id,
    CAST(raw.args->'input_type_shape' AS VARCHAR) AS input_shapes,
    CAST(raw.args->'output_type_shape' AS VARCHAR) AS output_shapes,
    CASE WHEN raw.cat = 'Kernel' THEN raw.name END AS kernel_name,
    TRY_CAST(raw.args->>'device' AS INTEGER) AS device_id,
    TRY_CAST(raw.args->>'stream' AS BIGINT) AS queue_id,
    TRY_CAST(raw.args->>'correlation_id' AS BIGINT) AS correlation_id,
    -- a node run on the intra-op pool lists the pool's other threads; one thread: ""
    CASE WHEN json_type(raw.args->'thread_scheduling_stats') = 'OBJECT'
         THEN 1 + len(json_keys(raw.args->'thread_scheduling_stats', '$.sub_threads'))
    END::INTEGER AS pool_threads
FROM raw
LEFT JOIN runs ON raw.ts >= runs.run_ts AND raw.ts < runs.run_end
WHERE raw.cat IN ('Node', 'Kernel', 'Session')
  AND NOT (raw.cat = 'Node' AND (raw.name LIKE '%_fence_before' OR raw.name LIKE '%_fence_after'))
ORDER BY start_ns, category
"""


def read_ort_profile(
    path: Path, session_id: str, profiling_start_ns: int, warmup_runs: int = 0
) -> pa.Table:
    """Kernel events of one ONNX Runtime profile, in the KERNEL_EVENTS schema.

    Fence events (zero-length sync markers) are dropped; everything else is kept with its raw
    duration. `warmup_runs` model_run events at the start are the profiled pass's own warm-up.
    """
    if not path.is_file():
        raise AacoInputError(
            "ONNX Runtime profile not found",
            path=path,
            fix="re-run the benchmark with profiling on",
        )
    with engine.connect() as con:
        try:
            params = [str(path), warmup_runs, session_id, profiling_start_ns]
            table = con.sql(_EVENTS_SQL, params=params).to_arrow_table()
        except duckdb.OutOfMemoryException as exc:
            raise MemoryError(str(exc)) from exc  # the process's limit, not the file
        except duckdb.Error as exc:
            raise AacoInputError(
                f"ONNX Runtime profile is not a readable JSON event array ({exc})",
                path=path,
                fix="the file is truncated or not an ONNX Runtime profile; re-run the benchmark",
            ) from exc
    return conform(table, KERNEL_EVENTS)

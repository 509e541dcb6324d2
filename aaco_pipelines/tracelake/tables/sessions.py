"""TraceLake tables of sessions and the models they ran: what was measured, where and how.

`models`, `graph_nodes` and `graph_edges` describe a model file (keyed by `model_sha256`), written
once per model by the graph extraction; `sessions` (stored as session_records), `iterations` and
`telemetry` are one measured (or ingested) session, keyed by `session_id`; `completed_sessions`
marks the ones whose analysis is committed.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.columns import BOOL, F64, I32, I64, STR, TS

# One row per model file (by content hash): what the graph extraction found in it.
MODELS = pa.schema(
    [
        ("model_sha256", STR),
        ("model_name", STR),
        ("opset", I64),
        ("ir_version", I64),
        ("producer", STR),
        ("node_count", I64),
        ("edge_count", I64),
        ("parameter_count", I64),
        ("parameter_bytes", I64),
        ("total_flops", I64),
        ("total_bytes_moved", I64),
        ("input_spec", STR),  # JSON: {name: {shape, dtype}} the graph was inferred with
    ]
)

# Every node of a model's graph with its shapes and the cost model's FLOPs and bytes.
GRAPH_NODES = pa.schema(
    [
        ("model_sha256", STR),
        ("node_index", I32),
        ("node_name", STR),
        ("op_type", STR),
        ("domain", STR),
        ("inputs", pa.list_(STR)),
        ("outputs", pa.list_(STR)),
        ("attributes", STR),  # JSON object of the node's key attributes
        ("output_shapes", STR),  # JSON list of shapes; a null dimension is unknown
        ("output_dtypes", pa.list_(STR)),
        ("flops", I64),  # null when the cost model cannot tell
        ("bytes_moved", I64),  # bytes read + written, null when unknown
        ("cost_rule", STR),  # which cost-model rule produced flops/bytes
        # v7: nodes of control-flow subgraphs (If branches, Loop and Scan bodies) are rows too
        ("parent_node", STR),  # the If/Loop/Scan node whose subgraph holds it; null at top level
    ]
)

# Every tensor between two nodes of a model's graph (inputs, initializers, outputs too).
GRAPH_EDGES = pa.schema(
    [
        ("model_sha256", STR),
        ("tensor_name", STR),
        ("src_node", STR),  # null for graph inputs and initializers
        ("dst_node", STR),  # null for graph outputs
        ("dtype", STR),
        ("shape", STR),  # JSON list
        ("bytes", I64),
        ("is_initializer", BOOL),
    ]
)

# One row per measured or ingested session: what ran where, with its headline latencies.
SESSIONS = pa.schema(
    [
        ("session_id", STR),
        ("model_slug", STR),
        ("model_name", STR),
        ("model_sha256", STR),
        ("started_at", TS),
        ("finished_at", TS),
        ("target", STR),
        ("providers_requested", pa.list_(STR)),
        ("providers_used", pa.list_(STR)),
        ("trace_source", STR),
        ("laboratory", BOOL),
        ("warmup_iterations", I64),
        ("measured_iterations", I64),
        ("profiled_iterations", I64),
        ("latency_mean_ns", F64),
        ("latency_std_ns", F64),
        ("latency_p50_ns", I64),
        ("latency_p99_ns", I64),
        ("latency_min_ns", I64),
        ("throughput_per_s", F64),
        ("profiled_latency_p50_ns", I64),
        ("profiling_overhead_pct", F64),
        ("ort_version", STR),
        ("rocm_version", STR),
        ("runtime_fingerprint", STR),
        ("hostname", STR),
        ("bundle_path", STR),
        ("env_json", STR),
        # v9: a generation session's latency figures are its headline scenario's requests
        ("workload", STR),  # forward | generation
        ("scenario", STR),  # the headline scenario of a generation session (single_stream...)
        # v14: the sha256 of the bundle's manifest.json, set when the session is loaded (never
        # in the bundle's own tables/sessions.parquet, which the manifest covers); null for a
        # session loaded before manifests (aaco_pipelines.bundle.manifest)
        ("manifest_sha256", STR),
        # v23: why the session's evidence could not be verified when `aaco restore --unverified`
        # brought it back (no record of its bundle in the lake's journal); null for every other
        ("unverified_reason", STR),
    ]
)

# Every run of a session's warm-up, measured and profiled passes, with its latency.
ITERATIONS = pa.schema(
    [
        ("session_id", STR),
        ("pass", STR),  # warmup | measured | profiled
        ("iteration", I32),
        ("start_ns", I64),
        ("latency_ns", I64),
    ]
)

# The host's (and the GPUs') samples taken while a session ran: CPU, memory, power, clocks.
TELEMETRY = pa.schema(
    [
        ("session_id", STR),
        ("source", STR),  # host | amdsmi
        ("pass", STR),  # which pass the sample fell in (measured | profiled | other)
        ("timestamp_ns", I64),
        ("device", STR),  # cpu0.., process, gpu0..
        ("metric", STR),
        ("value", F64),
        ("unit", STR),
    ]
)

# A session is complete once its analysis is committed: the last write of a session, in the
# transaction of its drift verdicts. Until then its rows are invisible to readers.
COMPLETED_SESSIONS = pa.schema([("session_id", STR), ("completed_at", TS)])

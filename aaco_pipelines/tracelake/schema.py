"""The TraceLake schema: one Arrow schema per table, the single source of the DuckDB DDL.

Every collector returns Arrow tables with exactly these schemas; times are integer nanoseconds
(Unix epoch for timestamps, plain ns for durations); `session_id` ties every row to its run and
`model_sha256` ties graph rows to the exact model file. Bump SCHEMA_VERSION with every change and
add the migration in `tracelake.store`.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 21  # v21: bisections across runtime environments

_str, _i32, _i64, _f64, _bool = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
_ts = pa.timestamp("us", tz="UTC")

MODELS = pa.schema(
    [
        ("model_sha256", _str),
        ("model_name", _str),
        ("opset", _i64),
        ("ir_version", _i64),
        ("producer", _str),
        ("node_count", _i64),
        ("edge_count", _i64),
        ("parameter_count", _i64),
        ("parameter_bytes", _i64),
        ("total_flops", _i64),
        ("total_bytes_moved", _i64),
        ("input_spec", _str),  # JSON: {name: {shape, dtype}} the graph was inferred with
    ]
)

GRAPH_NODES = pa.schema(
    [
        ("model_sha256", _str),
        ("node_index", _i32),
        ("node_name", _str),
        ("op_type", _str),
        ("domain", _str),
        ("inputs", pa.list_(_str)),
        ("outputs", pa.list_(_str)),
        ("attributes", _str),  # JSON object of the node's key attributes
        ("output_shapes", _str),  # JSON list of shapes; a null dimension is unknown
        ("output_dtypes", pa.list_(_str)),
        ("flops", _i64),  # null when the cost model cannot tell
        ("bytes_moved", _i64),  # bytes read + written, null when unknown
        ("cost_rule", _str),  # which cost-model rule produced flops/bytes
        # v7: nodes of control-flow subgraphs (If branches, Loop and Scan bodies) are rows too
        ("parent_node", _str),  # the If/Loop/Scan node whose subgraph holds it; null at top level
    ]
)

GRAPH_EDGES = pa.schema(
    [
        ("model_sha256", _str),
        ("tensor_name", _str),
        ("src_node", _str),  # null for graph inputs and initializers
        ("dst_node", _str),  # null for graph outputs
        ("dtype", _str),
        ("shape", _str),  # JSON list
        ("bytes", _i64),
        ("is_initializer", _bool),
    ]
)

SESSIONS = pa.schema(
    [
        ("session_id", _str),
        ("model_slug", _str),
        ("model_name", _str),
        ("model_sha256", _str),
        ("started_at", _ts),
        ("finished_at", _ts),
        ("target", _str),
        ("providers_requested", pa.list_(_str)),
        ("providers_used", pa.list_(_str)),
        ("trace_source", _str),
        ("laboratory", _bool),
        ("warmup_iterations", _i64),
        ("measured_iterations", _i64),
        ("profiled_iterations", _i64),
        ("latency_mean_ns", _f64),
        ("latency_std_ns", _f64),
        ("latency_p50_ns", _i64),
        ("latency_p99_ns", _i64),
        ("latency_min_ns", _i64),
        ("throughput_per_s", _f64),
        ("profiled_latency_p50_ns", _i64),
        ("profiling_overhead_pct", _f64),
        ("ort_version", _str),
        ("rocm_version", _str),
        ("runtime_fingerprint", _str),
        ("hostname", _str),
        ("bundle_path", _str),
        ("env_json", _str),
        # v9: a generation session's latency figures are its headline scenario's requests
        ("workload", _str),  # forward | generation
        ("scenario", _str),  # the headline scenario of a generation session (single_stream...)
        # v14: the sha256 of the bundle's manifest.json, set when the session is loaded (never
        # in the bundle's own tables/sessions.parquet, which the manifest covers); null for a
        # session loaded before manifests (aaco_pipelines.bundle.manifest)
        ("manifest_sha256", _str),
    ]
)

ITERATIONS = pa.schema(
    [
        ("session_id", _str),
        ("pass", _str),  # warmup | measured | profiled
        ("iteration", _i32),
        ("start_ns", _i64),
        ("latency_ns", _i64),
    ]
)

KERNEL_EVENTS = pa.schema(
    [
        ("session_id", _str),
        ("source", _str),  # ort_profile | rocprofv3 | ...
        ("category", _str),  # Node (host op) | Kernel (device) | Session (runtime phases)
        ("iteration", _i32),  # index within the profiled pass; null outside a run
        ("event_name", _str),
        ("node_name", _str),
        ("op_type", _str),
        ("provider", _str),
        ("node_index", _i32),
        ("start_ns", _i64),
        ("duration_ns", _i64),
        ("thread_id", _i64),
        ("input_shapes", _str),  # JSON
        ("output_shapes", _str),  # JSON
        ("kernel_name", _str),
        ("device_id", _i32),
        ("queue_id", _i64),
        ("correlation_id", _i64),
        # v3: device dispatch details (GPU traces; null on the CPU provider)
        (
            "kernel_family",
            _str,
        ),  # gemm | convolution | attention | ... (collectors.kernel_families)
        ("dispatch_id", _i64),
        ("stream_id", _i64),
        ("process_id", _i64),
        ("grid_size", _i64),  # total work-items (x*y*z)
        ("workgroup_size", _i64),  # work-items per workgroup (x*y*z)
        ("lds_bytes", _i64),
        ("scratch_bytes", _i64),
        ("vgpr_count", _i64),  # architectural VGPRs, as the profiler reports them
        # v15: accumulation VGPRs (AGPRs) as the profiler reports them; null where the format
        # has no such column (analysis.kernels.occupancy reads both)
        ("accum_vgpr_count", _i64),
        ("sgpr_count", _i64),
        # v18: the threads of ONNX Runtime's intra-op pool a profiled node was offered (1 + the
        # sub-threads of its thread_scheduling_stats); null where the profile says none (one
        # thread) and on device traces. What-ifs on pooled nodes carry a caveat
        # (analysis.critical_path.session_path).
        ("pool_threads", _i32),
    ]
)

TELEMETRY = pa.schema(
    [
        ("session_id", _str),
        ("source", _str),  # host | amdsmi
        ("pass", _str),  # which pass the sample fell in (measured | profiled | other)
        ("timestamp_ns", _i64),
        ("device", _str),  # cpu0.., process, gpu0..
        ("metric", _str),
        ("value", _f64),
        ("unit", _str),
    ]
)

# --- Device traces (schema v3): host API calls, copies, counters and agents of GPU profilers -

API_CALLS = pa.schema(
    [
        ("session_id", _str),
        ("source", _str),  # rocprofv3_csv | rocprofv3_json | rocpd | rpd | ...
        ("domain", _str),  # HIP_RUNTIME_API | HSA_CORE_API | ...
        ("api_name", _str),  # hipLaunchKernel, hipMemcpyAsync, ...
        ("start_ns", _i64),
        ("duration_ns", _i64),
        ("process_id", _i64),
        ("thread_id", _i64),
        ("correlation_id", _i64),  # ties a launch to the kernel dispatch it caused
    ]
)

MEMORY_COPIES = pa.schema(
    [
        ("session_id", _str),
        ("source", _str),
        ("direction", _str),  # MEMORY_COPY_HOST_TO_DEVICE, ... as the tool names it
        ("src_agent", _str),
        ("dst_agent", _str),
        ("bytes", _i64),  # null when the format does not record it (rocprofv3 CSV)
        ("start_ns", _i64),
        ("duration_ns", _i64),
        ("queue_id", _i64),
        ("correlation_id", _i64),
    ]
)

COUNTERS = pa.schema(
    [
        ("session_id", _str),
        ("source", _str),
        ("dispatch_id", _i64),
        ("correlation_id", _i64),
        ("kernel_name", _str),
        ("agent", _str),
        ("counter", _str),
        ("value", _f64),
    ]
)

AGENTS = pa.schema(
    [
        ("session_id", _str),
        ("source", _str),
        ("agent_id", _str),  # as the trace names it ("Agent 2", "2", a GPU index)
        ("node_id", _i64),
        ("agent_type", _str),  # GPU | CPU
        ("name", _str),  # gfx target for GPUs (gfx942), model for CPUs
        ("product_name", _str),
        ("compute_units", _i64),
        ("wave_front_size", _i64),
        ("max_clock_mhz", _f64),
        ("details_json", _str),  # every other field the trace had
    ]
)

# --- LLM generation (schema v9): requests, steps and their figures, per scenario run ---------

REQUESTS = pa.schema(
    [
        ("session_id", _str),
        ("run", _str),  # single_stream | server | offline | curve | warmup | profiled
        ("request_id", _i64),  # LoadGen's query id (a counter outside LoadGen)
        ("sample_index", _i64),  # which prompt
        ("batch_id", _i64),  # the batch it was generated in (generation_steps.batch_id)
        ("batch_size", _i32),
        ("prompt_tokens", _i32),
        ("output_tokens", _i32),
        ("arrival_ns", _i64),  # scheduled by LoadGen (its trace)
        ("start_ns", _i64),  # its prefill started
        ("first_token_ns", _i64),  # its first token sampled
        ("end_ns", _i64),  # its last token sampled
        ("queue_ns", _i64),  # start - arrival
        ("ttft_ns", _i64),  # first_token - arrival
        ("tpot_ns", _f64),  # (end - first_token) / (output_tokens - 1); null for one token
        ("e2e_ns", _i64),  # end - arrival
    ]
)

GENERATION_STEPS = pa.schema(
    [
        ("session_id", _str),
        ("run", _str),
        ("batch_id", _i64),
        ("step", _i32),  # 0 is the prefill
        ("phase", _str),  # prefill | decode
        ("batch_size", _i32),
        ("input_tokens", _i32),  # per sequence: the prompt, then 1
        ("kv_length", _i32),  # the KV cache's length after the step
        ("kv_bytes", _i64),  # the whole cache's size after the step
        ("start_ns", _i64),
        ("end_ns", _i64),  # its tokens sampled
        ("iteration", _i32),  # the profiled pass's run index (kernel_events.iteration)
    ]
)

GENERATION_METRICS = pa.schema(
    [
        ("session_id", _str),
        ("run", _str),
        ("batch_size", _i32),  # null: every request of the run (a curve point otherwise)
        ("prompt_tokens", _i32),
        ("metric", _str),  # ttft_p50_ns, tpot_p99_ns, output_tokens_per_s, goodput_per_s, ...
        ("value", _f64),
        ("unit", _str),
        ("source", _str),  # aaco (from the requests) | loadgen (its summary, a cross-check)
    ]
)

# --- Analysis results (schema v2): one row set per session, replaced on re-analysis ---------

NODE_ATTRIBUTION = pa.schema(
    [
        ("session_id", _str),
        ("runtime_node", _str),  # the node ONNX Runtime executed (null: eliminated original node)
        ("runtime_op_type", _str),
        ("onnx_node", _str),  # the original graph node (null: runtime-inserted, unmatched)
        ("onnx_op_type", _str),
        (
            "method",
            _str,
        ),  # exact_name | fused_anchor | fused_absorbed | runtime_inserted | eliminated
        ("confidence", _f64),
        ("share", _f64),  # fraction of the runtime node's time given to this original node
        ("split_rule", _str),  # flop_share | byte_share | equal_share | unmatched | not executed
    ]
)

OP_BREAKDOWN = pa.schema(
    [
        ("session_id", _str),
        (
            "level",
            _str,
        ),  # node | op_type | fused (a fusion group: analysis/attribution/fusion_groups.py)
        # ONNX node name, op type, or a fusion group's anchor node; "(unmatched) <runtime node>"
        ("name", _str),
        ("op_type", _str),
        ("mean_ns", _f64),  # per profiled iteration
        ("p50_ns", _f64),
        # v11: robust: its median time per iteration over the sum of its level's medians, so one
        # preempted iteration reorders nothing (before: the mean-based mean_share)
        ("share", _f64),
        ("kernels_per_iteration", _f64),
        ("flops", _i64),
        ("bytes_moved", _i64),
        ("mean_share", _f64),  # v11: of all attributed kernel time, over every iteration
        # v12: how sure its rank is (analysis/attribution/ranking_stability.py): its share of bootstrap
        # resamples of the profiled iterations that rank it first / among the first three;
        # null for fusion groups, phases, and fewer than 5 profiled iterations
        ("p_top", _f64),
        ("p_top3", _f64),
    ]
)

# v9: a generation session's breakdown per phase (prefill, decode): mean time per step
PHASE_BREAKDOWN = pa.schema([("phase", _str), *((f.name, f.type) for f in OP_BREAKDOWN)])

DERIVED_METRICS = pa.schema(
    [("session_id", _str), ("metric", _str), ("value", _f64), ("unit", _str)]
)

HARDWARE_ENVELOPES = pa.schema(
    [
        ("envelope_id", _str),
        ("target", _str),
        ("runtime_fingerprint", _str),
        ("measured_at", _ts),
        ("providers", pa.list_(_str)),
        ("gemm_flops_per_s", _f64),
        ("gemm_low", _f64),
        ("gemm_high", _f64),
        ("bandwidth_bytes_per_s", _f64),
        ("bandwidth_low", _f64),
        ("bandwidth_high", _f64),
        ("envelope_json", _str),  # the full envelope with every size swept
        # v8: where the peaks come from, the GPU they belong to, and a GEMM peak per data type
        ("source", _str),  # measured | datasheet
        ("device_arch", _str),  # gfx target of the GPU (gfx942); null for a CPU
        ("device_name", _str),  # its product name, when known
        ("compute_units", _i64),
        ("gemm_peaks_json", _str),  # {"fp32": FLOP/s, "fp16": ..., "int8": ...}
        ("reference", _str),  # datasheet: product, specification URL, white paper
    ]
)

ROOFLINE_POINTS = pa.schema(
    [
        ("session_id", _str),
        ("envelope_id", _str),
        ("onnx_node", _str),
        ("op_type", _str),
        ("flops", _i64),
        ("bytes_moved", _i64),
        ("time_ns", _f64),
        ("arithmetic_intensity", _f64),
        ("achieved_flops_per_s", _f64),
        ("achieved_bytes_per_s", _f64),
        ("roof_flops_per_s", _f64),
        ("bound", _str),
        ("utilization", _f64),
        # v8: each node sits under the roof of its own data type
        ("dtype", _str),  # the node's: fp16, bf16, fp32, int8, ... (null: unknown)
        ("roof_dtype", _str),  # whose GEMM peak is its roof (fp32 when its own has none)
        # v11: a hierarchical roofline, and no point above its roof
        ("roof_level", _str),  # GEMM (compute-bound), or the memory level: L2, L3, ..., DRAM
        ("roof_lifted", _bool),  # its roof was lifted to an op that beat the measured peak
    ]
)

# v11: whether a session's latencies can be trusted (analysis/metrics/measurement_quality.py)
MEASUREMENT_QUALITY = pa.schema(
    [
        ("session_id", _str),
        ("verdict", _str),  # ok | suspect | unknown
        ("iterations", _i64),
        ("host_contention", _f64),  # other processes' share of the host's CPU, measured pass
        ("cv", _f64),
        ("p99_over_p50", _f64),
        ("mean_over_p50", _f64),
        ("outlier_share", _f64),  # beyond Q3 + 3 IQR
        ("profiling_overhead_pct", _f64),
        ("reasons_json", _str),  # why suspect
        ("cautions_json", _str),  # read with it (a profiled pass distorted by the profiler)
    ]
)

BOTTLENECK_REPORTS = pa.schema(
    [
        ("session_id", _str),
        ("envelope_id", _str),
        ("bottleneck", _str),
        ("confidence", _f64),
        ("dominant_resource", _str),
        ("hardware_envelope_utilization", _f64),
        ("posterior_json", _str),
        ("evidence_json", _str),
        ("recommendations_json", _str),
        # v8: the envelope the session was judged against, or why there was none
        ("envelope_source", _str),  # measured | datasheet | none
        ("envelope_note", _str),
        # v13: classes that win with the signals moved by their run-to-run spread (JSON list
        # of {bottleneck, signals}; analysis/classification.close_calls); null before v13
        ("close_calls_json", _str),
    ]
)

DRIFT_VERDICTS = pa.schema(
    [
        ("session_id", _str),  # the session judged (the newest point of the series)
        ("model_slug", _str),
        ("metric", _str),
        # regression | improvement | no_change | insufficient_history | unstable_series
        ("verdict", _str),
        ("effect_pct", _f64),
        ("ci_low", _f64),
        ("ci_high", _f64),
        ("z", _f64),
        ("p_value", _f64),  # two-sided, current vs baseline (schema v5); BH-adjusted in fdr
        (
            "decided_by",
            _str,
        ),  # cusum | ewma | z_threshold | bimodal | too_noisy | fdr_controlled ...
        ("history_points", _i64),
        ("baseline_json", _str),
        ("parameters_json", _str),
        ("series_json", _str),  # the points judged, with version / runtime change markers
    ]
)

# v19: each objective (SLO) of the session judged (governance/alerts/objectives.py), in the limit's
# unit (ms, per_s, MB): breached only when the interval lies beyond the limit.
OBJECTIVE_VERDICTS = pa.schema(
    [
        ("session_id", _str),
        ("model_slug", _str),
        ("target", _str),
        ("objective", _str),  # as written: latency_p99_ms, throughput_per_s_min, ...
        ("bound", _str),  # max (a ceiling) | min (a floor)
        ("limit_value", _f64),
        ("unit", _str),  # ms | per_s | MB
        ("value", _f64),  # the session's figure
        ("ci_low", _f64),  # its 95 % interval, widened by the session-to-session spread;
        ("ci_high", _f64),  # null: open (too few samples to bound it)
        ("samples", _i64),
        ("spread_pct", _f64),  # session-to-session log-sd, % (null: fewer than 3 sessions)
        ("spread_sessions", _i64),
        ("verdict", _str),  # met | breached | uncertain | no_data
        ("suspect", _bool),  # breached on a measurement the quality check calls suspect
        ("basis", _str),  # what the interval rests on, in words
    ]
)

# v20: alerts (governance/alerts/lifecycle.py): one per (model, target, metric, kind), its state cycling
# new -> acknowledged / invalid / fixed -> reopened; every change of it is an event.
ALERTS = pa.schema(
    [
        ("alert_id", _str),  # stable: derived from its key
        ("model_slug", _str),
        ("target", _str),
        ("metric", _str),  # a gated drift metric, or an objective (latency_p99_ms)
        ("kind", _str),  # regression | improvement | breach
        ("state", _str),  # new | acknowledged | invalid | fixed | reopened
        ("opened_at", _ts),
        ("updated_at", _ts),
        ("first_session_id", _str),
        ("last_session_id", _str),  # the latest session that showed it
        ("sessions", _i64),  # sessions that showed it
        ("reference", _f64),  # the level before (drift's baseline median) or the limit
        ("tolerance_pct", _f64),  # back within this % of the reference counts as fixed...
        ("change_pct", _f64),  # ...or nearer it than this change, as the alert opened with
        ("value", _f64),  # the latest session's figure
        ("effect_pct", _f64),  # its change from the reference, %
        ("summary", _str),  # one line, for people and notifications
        ("evidence_json", _str),  # the verdict row (and the gate's suspected cause)
        ("clear_sessions", _i64),  # consecutive sessions back at the reference since
        ("invalid_until", _ts),  # marked invalid: not alerted again before this
        ("checked_through", _ts),  # the start of the latest session it was checked against
    ]
)
ALERT_EVENTS = pa.schema(
    [
        ("event_id", _str),  # unique: a notification's delivery key
        ("alert_id", _str),
        ("changed_at", _ts),
        ("event", _str),  # opened | updated | acknowledged | invalid | fixed | reopened
        ("state", _str),  # the alert's state after it
        ("actor", _str),  # aaco (a session's verdict), or who changed it
        ("reason", _str),
        # the session behind it (null for a person's change); not `session_id`: an audit log
        # outlives the session rows that deleting a session removes
        ("from_session", _str),
        ("notify", _bool),  # whether a notification is due (governance/alerts/notifications.py)
    ]
)

# v20: each notification of an alert event to the webhook (governance/alerts/notifications.py):
# delivered at least once, never twice; a dead letter after its last attempt failed. The
# endpoint is kept as scheme://host only: a Slack webhook's path is its secret.
ALERT_DELIVERIES = pa.schema(
    [
        ("event_id", _str),
        ("alert_id", _str),
        ("endpoint", _str),
        ("status", _str),  # pending (to try again) | delivered | dead
        ("attempts", _i64),
        ("last_error", _str),
        ("response_status", _i64),
        ("next_attempt_at", _ts),
        ("delivered_at", _ts),
        ("updated_at", _ts),
    ]
)

# v20: which model version made a model slower (stages/bisect.py, governance/gate/bisection.py);
# v21: or which runtime environment.
BISECTIONS = pa.schema(
    [
        ("bisection_id", _str),
        ("model_slug", _str),
        ("target", _str),
        ("alert_id", _str),  # the alert it was run for (null: asked directly)
        ("good_session", _str),
        ("bad_session", _str),
        ("created_at", _ts),
        ("status", _str),  # pinned | unclear (a step straddled the midpoint) | no_change
        # v21: what was bisected: "version" (the model's, null in rows before v21) or
        # "runtime" (environments with other ONNX Runtimes, one model version)
        ("dimension", _str),
        ("versions", _i64),  # model versions (or runtimes) from the good one to the bad one
        ("steps", _i64),  # side-by-side measurements after the first (good against bad)
        ("last_good_sha256", _str),  # (null for runtimes)
        ("first_bad_sha256", _str),
        ("last_good_runtime", _str),  # v21: "onnxruntime 1.20.1 (/envs/old/bin/python)"
        ("first_bad_runtime", _str),
        ("first_bad_session", _str),  # the session that first measured the first bad version
        ("change_pct", _f64),  # the bad version's p50 against the good one's, side by side
        ("change_ci_low", _f64),
        ("change_ci_high", _f64),
        ("result_json", _str),  # every version, step and comparison
    ]
)

# --- Governance (schema v4): named baselines, keyed by their name -----------------------------

BASELINES = pa.schema(
    [
        ("baseline_name", _str),  # unique across the lake
        ("model_slug", _str),
        ("target", _str),
        ("created_at", _ts),
        ("session_ids", pa.list_(_str)),  # the sessions the reference is made of, oldest first
        ("pinned", _bool),  # at most one pinned baseline per model_slug + target
        ("n_sessions", _i64),
        ("latency_p50_ns", _f64),  # medians over the sessions' own figures
        ("latency_p99_ns", _f64),
        ("throughput_per_s", _f64),
        ("model_sha256", _str),  # the environment of the newest session of the baseline
        ("runtime_fingerprint", _str),
        ("providers_used", pa.list_(_str)),
        ("env_json", _str),
        ("window_json", _str),  # how the sessions were chosen (ids, last N, since / until)
        ("note", _str),
    ]
)

# v16: where each device kernel ran (analysis.attribution.nodes.kernel_places): the attribution's
# kernel -> runtime node assignment, summed per pair, so the kernel diagnosis need not attribute
# ten million kernels a second time.
KERNEL_PLACES = pa.schema(
    [
        ("session_id", _str),
        ("kernel_name", _str),
        ("node_name", _str),  # the runtime node it was attributed to (null: unmatched)
        ("dispatches", _i64),  # in the profiled iterations
        ("ns", _i64),
        ("iterations", _i64),  # profiled iterations it ran in
    ]
)
# v16: why each GPU kernel takes its time (analysis/kernels/diagnosis.py): its occupancy (every
# trace), what the hardware counted (sessions with counters), its roof and its class.
KERNEL_DIAGNOSES = pa.schema(
    [
        ("session_id", _str),
        ("device_id", _i32),
        ("gfx", _str),
        ("kernel_name", _str),
        ("node_name", _str),  # the runtime node with most of its time (null: not attributed)
        ("dispatches", _i64),
        ("total_ns", _i64),
        ("share", _f64),  # of the session's device kernel time
        ("achievable_waves", _i64),  # per SIMD, as its resources allow
        ("max_waves", _i64),
        ("occupancy", _f64),
        ("limiter", _str),  # vgpr | agpr | sgpr | lds | workgroups | grid | none
        ("grid_fill", _f64),
        ("uses_scratch", _bool),
        ("occupancy_text", _str),
        ("dtype", _str),  # the data type with the most counted FLOPs
        ("flops_per_s", _f64),  # counted (null without counters)
        ("bytes_per_s", _f64),  # counted HBM bytes
        ("l2_hit_rate", _f64),
        ("lds_bank_conflict_rate", _f64),
        ("valu_thread_utilization", _f64),  # share of a wave's lanes its VALU work kept busy
        ("roof_flops_per_s", _f64),  # the envelope's peak of its data type
        ("roof_bytes_per_s", _f64),  # the envelope's memory bandwidth
        ("compute_utilization", _f64),  # flops_per_s / roof_flops_per_s
        ("bandwidth_utilization", _f64),  # bytes_per_s / roof_bytes_per_s
        ("kernel_class", _str),  # analysis.kernels.diagnosis.CLASSES
        ("finding", _str),  # one sentence: where, how much, why
    ]
)
# v16: the roofline of what the hardware counted, per runtime node, beside the cost model's.
COUNTER_ROOFLINE = pa.schema(
    [
        ("session_id", _str),
        ("node_name", _str),  # the runtime node its kernels were attributed to
        ("time_ns", _f64),  # its kernels' time per iteration
        ("counted_flops", _f64),  # per iteration (null: a kernel of it was not counted)
        ("counted_bytes", _f64),
        ("arithmetic_intensity", _f64),
        ("achieved_flops_per_s", _f64),
        ("achieved_bytes_per_s", _f64),
        ("roof_flops_per_s", _f64),
        ("roof_bytes_per_s", _f64),
        ("bound", _str),  # compute | memory, by its counted intensity against the ridge
        ("utilization", _f64),  # of the roof it is under
        # The hierarchical roofline: per level (HBM above, L2, LDS) its counted bytes per
        # iteration, FLOPs per byte, achieved B/s, ceiling B/s and achieved share of it
        ("hbm_share", _f64),  # achieved_bytes_per_s / roof_bytes_per_s
        ("counted_l2_bytes", _f64),  # vector L1 -> L2 requests x 64 B
        ("l2_intensity", _f64),
        ("achieved_l2_bytes_per_s", _f64),
        ("roof_l2_bytes_per_s", _f64),  # null: no published L2 peak for the GPU
        ("l2_share", _f64),
        ("counted_lds_bytes", _f64),
        ("lds_intensity", _f64),
        ("achieved_lds_bytes_per_s", _f64),
        ("roof_lds_bytes_per_s", _f64),
        ("lds_share", _f64),
        ("binding_level", _str),  # HBM | L2 | LDS: the level closest to its ceiling
        ("model_flops", _f64),  # the cost model's FLOPs of the ONNX nodes it ran
        ("model_bytes", _f64),
        ("flops_ratio", _f64),  # counted / cost model
        ("disagreement", _str),  # when the two differ by more than 2x, what that means
    ]
)

# The family of every kernel name the lake has seen (collectors.kernel_families): kernels are
# labelled per distinct name after loading, not per row while loading, so a ten-million-kernel
# trace loads in one parallel pass. Read families through the KERNEL_EVENTS_WITH_FAMILY view.
KERNEL_SYMBOLS = pa.schema(
    [
        ("kernel_name", _str),  # unique
        ("kernel_family", _str),
    ]
)

# v17: the critical path of each profiled iteration (analysis/critical_path/session_path.py): one row per
# session, and one per (runtime node, original ONNX node it executes); times are medians over
# the profiled iterations, in ns per iteration.
CRITICAL_PATHS = pa.schema(
    [
        ("session_id", _str),
        ("dag", _str),  # host_threads (node executions on host threads) | device_queues
        ("iterations", _i64),
        ("span_p50_ns", _f64),  # an iteration, from its start to its end
        ("path_p50_ns", _f64),  # its critical path
        ("node_time_on_path_p50_ns", _f64),  # node executions / kernels on the path
        ("host_share", _f64),  # of the path: host launches, scheduling, the executor's own time
        ("parallelism", _f64),  # node (kernel) time over the node time on the path
        ("caveats_json", _str),
    ]
)
CRITICAL_PATH_NODES = pa.schema(
    [
        ("session_id", _str),
        ("runtime_node", _str),
        ("runtime_op_type", _str),
        ("onnx_node", _str),  # "(unmatched) <runtime node>" when the attribution found none
        ("onnx_op_type", _str),
        ("share", _f64),  # of the runtime node's time that the ONNX node holds (attribution)
        ("kernel_ns", _f64),  # of the runtime node, per iteration
        ("critical_ns", _f64),  # of it on the critical path
        ("slack_ns", _f64),  # how much longer it could take without delaying the iteration
        ("overlap_ns", _f64),  # kernel - critical: hidden behind other work
        ("executions_per_iteration", _f64),
        ("gain_2x_ns", _f64),  # end-to-end time saved if it ran 2x faster (re-timed DAG)
    ]
)

# A session is complete once its analysis is committed: the last write of a session, in the
# transaction of its drift verdicts. Until then its rows are invisible to readers.
COMPLETED_SESSIONS = pa.schema([("session_id", _str), ("completed_at", _ts)])

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

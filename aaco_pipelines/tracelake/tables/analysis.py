"""TraceLake tables of analysis results: attribution, breakdowns, quality, bottleneck, critical path.

Computed by aaco_pipelines.analysis, one row set per session, replaced when the session is
analysed again. The hardware's envelope and the rooflines against it are in roofline.py.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.columns import BOOL, F64, I64, STR

# --- Analysis results (schema v2): one row set per session, replaced on re-analysis ---------

# Which original ONNX node(s) each runtime node executes, and its time's share of each.
NODE_ATTRIBUTION = pa.schema(
    [
        ("session_id", STR),
        ("runtime_node", STR),  # the node ONNX Runtime executed (null: eliminated original node)
        ("runtime_op_type", STR),
        ("onnx_node", STR),  # the original graph node (null: runtime-inserted, unmatched)
        ("onnx_op_type", STR),
        (
            "method",
            STR,
        ),  # exact_name | fused_anchor | fused_absorbed | runtime_inserted | eliminated
        ("confidence", F64),
        ("share", F64),  # fraction of the runtime node's time given to this original node
        ("split_rule", STR),  # flop_share | byte_share | equal_share | unmatched | not executed
    ]
)

# Where a session's kernel time goes, by ONNX node, op type and fusion group.
OP_BREAKDOWN = pa.schema(
    [
        ("session_id", STR),
        (
            "level",
            STR,
        ),  # node | op_type | fused (a fusion group: analysis/attribution/fusion_groups.py)
        # ONNX node name, op type, or a fusion group's anchor node; "(unmatched) <runtime node>"
        ("name", STR),
        ("op_type", STR),
        ("mean_ns", F64),  # per profiled iteration
        ("p50_ns", F64),
        # v11: robust: its median time per iteration over the sum of its level's medians, so one
        # preempted iteration reorders nothing (before: the mean-based mean_share)
        ("share", F64),
        ("kernels_per_iteration", F64),
        ("flops", I64),
        ("bytes_moved", I64),
        ("mean_share", F64),  # v11: of all attributed kernel time, over every iteration
        # v12: how sure its rank is (analysis/attribution/ranking_stability.py): its share of bootstrap
        # resamples of the profiled iterations that rank it first / among the first three;
        # null for fusion groups, phases, and fewer than 5 profiled iterations
        ("p_top", F64),
        ("p_top3", F64),
    ]
)

# v9: a generation session's breakdown per phase (prefill, decode): mean time per step
PHASE_BREAKDOWN = pa.schema([("phase", STR), *((f.name, f.type) for f in OP_BREAKDOWN)])

# A session's derived metrics (analysis/metrics/derived.py): launch tax, kernel counts...
DERIVED_METRICS = pa.schema([("session_id", STR), ("metric", STR), ("value", F64), ("unit", STR)])

# v11: whether a session's latencies can be trusted (analysis/metrics/measurement_quality.py)
MEASUREMENT_QUALITY = pa.schema(
    [
        ("session_id", STR),
        ("verdict", STR),  # ok | suspect | unknown
        ("iterations", I64),
        ("host_contention", F64),  # other processes' share of the host's CPU, measured pass
        ("cv", F64),
        ("p99_over_p50", F64),
        ("mean_over_p50", F64),
        ("outlier_share", F64),  # beyond Q3 + 3 IQR
        ("profiling_overhead_pct", F64),
        ("reasons_json", STR),  # why suspect
        ("cautions_json", STR),  # read with it (a profiled pass distorted by the profiler)
    ]
)

# What limits the session: its bottleneck class, confidence, evidence and advice.
BOTTLENECK_REPORTS = pa.schema(
    [
        ("session_id", STR),
        ("envelope_id", STR),
        ("bottleneck", STR),
        ("confidence", F64),
        ("dominant_resource", STR),
        ("hardware_envelope_utilization", F64),
        ("posterior_json", STR),
        ("evidence_json", STR),
        ("recommendations_json", STR),
        # v8: the envelope the session was judged against, or why there was none
        ("envelope_source", STR),  # measured | datasheet | none
        ("envelope_note", STR),
        # v13: classes that win with the signals moved by their run-to-run spread (JSON list
        # of {bottleneck, signals}; analysis/classification.close_calls); null before v13
        ("close_calls_json", STR),
        # v24: false when the evidence could not settle the class (then `bottleneck` is only
        # the leader) and why, in numbers; a report judged before v24 reads decided
        ("decided", BOOL),
        ("undecided_reason", STR),
    ]
)

# v16: where each device kernel ran (analysis.attribution.session.kernel_places): the attribution's
# kernel -> runtime node assignment, summed per pair, so the kernel diagnosis need not attribute
# ten million kernels a second time.
KERNEL_PLACES = pa.schema(
    [
        ("session_id", STR),
        ("kernel_name", STR),
        ("node_name", STR),  # the runtime node it was attributed to (null: unmatched)
        ("dispatches", I64),  # in the profiled iterations
        ("ns", I64),
        ("iterations", I64),  # profiled iterations it ran in
    ]
)

# v17: the critical path of each profiled iteration (analysis/critical_path/session_path.py): one row per
# session, and one per (runtime node, original ONNX node it executes); times are medians over
# the profiled iterations, in ns per iteration.
CRITICAL_PATHS = pa.schema(
    [
        ("session_id", STR),
        ("dag", STR),  # host_threads (node executions on host threads) | device_queues
        ("iterations", I64),
        ("span_p50_ns", F64),  # an iteration, from its start to its end
        ("path_p50_ns", F64),  # its critical path
        ("node_time_on_path_p50_ns", F64),  # node executions / kernels on the path
        ("host_share", F64),  # of the path: host launches, scheduling, the executor's own time
        ("parallelism", F64),  # node (kernel) time over the node time on the path
        ("caveats_json", STR),
    ]
)

# Each node on or off the critical path: critical time, slack, and the gain if 2x faster.
CRITICAL_PATH_NODES = pa.schema(
    [
        ("session_id", STR),
        ("runtime_node", STR),
        ("runtime_op_type", STR),
        ("onnx_node", STR),  # "(unmatched) <runtime node>" when the attribution found none
        ("onnx_op_type", STR),
        ("share", F64),  # of the runtime node's time that the ONNX node holds (attribution)
        ("kernel_ns", F64),  # of the runtime node, per iteration
        ("critical_ns", F64),  # of it on the critical path
        ("slack_ns", F64),  # how much longer it could take without delaying the iteration
        ("overlap_ns", F64),  # kernel - critical: hidden behind other work
        ("executions_per_iteration", F64),
        ("gain_2x_ns", F64),  # end-to-end time saved if it ran 2x faster (re-timed DAG)
    ]
)

# v22: each judged session's structural diff against the model's previous analysed session on
# its target (analysis/comparison/stored_structure.py), computed once by the drift stage and read
# back by the report, the asset pages, root cause and `aaco diff --structure`; diff_json null for
# a model's first session on a target.
STRUCTURAL_DIFFS = pa.schema(
    [
        ("session_id", STR),
        ("previous_session_id", STR),
        ("diff_json", STR),  # StructuralDiff.to_dict(): DuckDB's JSON functions query it
    ]
)

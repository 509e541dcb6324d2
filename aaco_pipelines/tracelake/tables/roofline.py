"""TraceLake tables of the hardware's peaks and how close the work comes to them.

`hardware_envelopes` (one per measured or datasheet envelope, not per session), the cost model's
roofline per ONNX node, and for GPU sessions each kernel's diagnosis (occupancy, counters, roof)
and the roofline of what the hardware counted; computed by analysis.envelope,
analysis.bottleneck and analysis.kernels.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.columns import BOOL, F64, I32, I64, STR, TS

# A target's measured (or datasheet) peaks: GEMM FLOP/s and streaming bandwidth.
HARDWARE_ENVELOPES = pa.schema(
    [
        ("envelope_id", STR),
        ("target", STR),
        ("runtime_fingerprint", STR),
        ("measured_at", TS),
        ("providers", pa.list_(STR)),
        ("gemm_flops_per_s", F64),
        ("gemm_low", F64),
        ("gemm_high", F64),
        ("bandwidth_bytes_per_s", F64),
        ("bandwidth_low", F64),
        ("bandwidth_high", F64),
        ("envelope_json", STR),  # the full envelope with every size swept
        # v8: where the peaks come from, the GPU they belong to, and a GEMM peak per data type
        ("source", STR),  # measured | datasheet
        ("device_arch", STR),  # gfx target of the GPU (gfx942); null for a CPU
        ("device_name", STR),  # its product name, when known
        ("compute_units", I64),
        ("gemm_peaks_json", STR),  # {"fp32": FLOP/s, "fp16": ..., "int8": ...}
        ("reference", STR),  # datasheet: product, specification URL, white paper
    ]
)

# Each ONNX node of a session on the roofline of its target's envelope.
ROOFLINE_POINTS = pa.schema(
    [
        ("session_id", STR),
        ("envelope_id", STR),
        ("onnx_node", STR),
        ("op_type", STR),
        ("flops", I64),
        ("bytes_moved", I64),
        ("time_ns", F64),
        ("arithmetic_intensity", F64),
        ("achieved_flops_per_s", F64),
        ("achieved_bytes_per_s", F64),
        ("roof_flops_per_s", F64),
        ("bound", STR),
        ("utilization", F64),
        # v8: each node sits under the roof of its own data type
        ("dtype", STR),  # the node's: fp16, bf16, fp32, int8, ... (null: unknown)
        ("roof_dtype", STR),  # whose GEMM peak is its roof (fp32 when its own has none)
        # v11: a hierarchical roofline, and no point above its roof
        ("roof_level", STR),  # GEMM (compute-bound), or the memory level: L2, L3, ..., DRAM
        ("roof_lifted", BOOL),  # its roof was lifted to an op that beat the measured peak
    ]
)

# v16: why each GPU kernel takes its time (analysis/kernels/diagnosis.py): its occupancy (every
# trace), what the hardware counted (sessions with counters), its roof and its class.
KERNEL_DIAGNOSES = pa.schema(
    [
        ("session_id", STR),
        ("device_id", I32),
        ("gfx", STR),
        ("kernel_name", STR),
        ("node_name", STR),  # the runtime node with most of its time (null: not attributed)
        ("dispatches", I64),
        ("total_ns", I64),
        ("share", F64),  # of the session's device kernel time
        ("achievable_waves", I64),  # per SIMD, as its resources allow
        ("max_waves", I64),
        ("occupancy", F64),
        ("limiter", STR),  # vgpr | agpr | sgpr | lds | workgroups | grid | none
        ("grid_fill", F64),
        ("uses_scratch", BOOL),
        ("occupancy_text", STR),
        ("dtype", STR),  # the data type with the most counted FLOPs
        ("flops_per_s", F64),  # counted (null without counters)
        ("bytes_per_s", F64),  # counted HBM bytes
        ("l2_hit_rate", F64),
        ("lds_bank_conflict_rate", F64),
        ("valu_thread_utilization", F64),  # share of a wave's lanes its VALU work kept busy
        ("roof_flops_per_s", F64),  # the envelope's peak of its data type
        ("roof_bytes_per_s", F64),  # the envelope's memory bandwidth
        ("compute_utilization", F64),  # flops_per_s / roof_flops_per_s
        ("bandwidth_utilization", F64),  # bytes_per_s / roof_bytes_per_s
        ("kernel_class", STR),  # analysis.kernels.diagnosis.CLASSES
        ("finding", STR),  # one sentence: where, how much, why
    ]
)

# v16: the roofline of what the hardware counted, per runtime node, beside the cost model's.
COUNTER_ROOFLINE = pa.schema(
    [
        ("session_id", STR),
        ("node_name", STR),  # the runtime node its kernels were attributed to
        ("time_ns", F64),  # its kernels' time per iteration
        ("counted_flops", F64),  # per iteration (null: a kernel of it was not counted)
        ("counted_bytes", F64),
        ("arithmetic_intensity", F64),
        ("achieved_flops_per_s", F64),
        ("achieved_bytes_per_s", F64),
        ("roof_flops_per_s", F64),
        ("roof_bytes_per_s", F64),
        ("bound", STR),  # compute | memory, by its counted intensity against the ridge
        ("utilization", F64),  # of the roof it is under
        # The hierarchical roofline: per level (HBM above, L2, LDS) its counted bytes per
        # iteration, FLOPs per byte, achieved B/s, ceiling B/s and achieved share of it
        ("hbm_share", F64),  # achieved_bytes_per_s / roof_bytes_per_s
        ("counted_l2_bytes", F64),  # vector L1 -> L2 requests x 64 B
        ("l2_intensity", F64),
        ("achieved_l2_bytes_per_s", F64),
        ("roof_l2_bytes_per_s", F64),  # null: no published L2 peak for the GPU
        ("l2_share", F64),
        ("counted_lds_bytes", F64),
        ("lds_intensity", F64),
        ("achieved_lds_bytes_per_s", F64),
        ("roof_lds_bytes_per_s", F64),
        ("lds_share", F64),
        ("binding_level", STR),  # HBM | L2 | LDS: the level closest to its ceiling
        ("model_flops", F64),  # the cost model's FLOPs of the ONNX nodes it ran
        ("model_bytes", F64),
        ("flops_ratio", F64),  # counted / cost model
        ("disagreement", STR),  # when the two differ by more than 2x, what that means
    ]
)

"""TraceLake tables of what the profilers recorded: kernel events and the device trace around them.

`kernel_events` holds ONNX Runtime's node events and the GPU kernels of a device trace (stored as
two tables: TRACE_TABLES in aaco_pipelines.tracelake.schema); `api_calls`, `memory_copies`,
`counters` and `agents` are the rest of a device trace (schema v3); `kernel_symbols` names each
kernel's family once per distinct kernel name.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.columns import F64, I32, I64, STR

# Every event the profilers recorded: ONNX Runtime's node and session events, GPU kernels.
KERNEL_EVENTS = pa.schema(
    [
        ("session_id", STR),
        ("source", STR),  # ort_profile | rocprofv3 | ...
        ("category", STR),  # Node (host op) | Kernel (device) | Session (runtime phases)
        ("iteration", I32),  # index within the profiled pass; null outside a run
        ("event_name", STR),
        ("node_name", STR),
        ("op_type", STR),
        ("provider", STR),
        ("node_index", I32),
        ("start_ns", I64),
        ("duration_ns", I64),
        ("thread_id", I64),
        ("input_shapes", STR),  # JSON
        ("output_shapes", STR),  # JSON
        ("kernel_name", STR),
        ("device_id", I32),
        ("queue_id", I64),
        ("correlation_id", I64),
        # v3: device dispatch details (GPU traces; null on the CPU provider)
        (
            "kernel_family",
            STR,
        ),  # gemm | convolution | attention | ... (collectors.kernel_families)
        ("dispatch_id", I64),
        ("stream_id", I64),
        ("process_id", I64),
        ("grid_size", I64),  # total work-items (x*y*z)
        ("workgroup_size", I64),  # work-items per workgroup (x*y*z)
        ("lds_bytes", I64),
        ("scratch_bytes", I64),
        ("vgpr_count", I64),  # architectural VGPRs, as the profiler reports them
        # v15: accumulation VGPRs (AGPRs) as the profiler reports them; null where the format
        # has no such column (analysis.kernels.occupancy reads both)
        ("accum_vgpr_count", I64),
        ("sgpr_count", I64),
        # v18: the threads of ONNX Runtime's intra-op pool a profiled node was offered (1 + the
        # sub-threads of its thread_scheduling_stats); null where the profile says none (one
        # thread) and on device traces. What-ifs on pooled nodes carry a caveat
        # (analysis.critical_path.session_path).
        ("pool_threads", I32),
    ]
)

# --- Device traces (schema v3): host API calls, copies, counters and agents of GPU profilers -

# A device trace's host API calls (HIP, HSA), tied to their kernels by correlation_id.
API_CALLS = pa.schema(
    [
        ("session_id", STR),
        ("source", STR),  # rocprofv3_csv | rocprofv3_json | rocpd | rpd | ...
        ("domain", STR),  # HIP_RUNTIME_API | HSA_CORE_API | ...
        ("api_name", STR),  # hipLaunchKernel, hipMemcpyAsync, ...
        ("start_ns", I64),
        ("duration_ns", I64),
        ("process_id", I64),
        ("thread_id", I64),
        ("correlation_id", I64),  # ties a launch to the kernel dispatch it caused
    ]
)

# A device trace's memory copies between host and device (or between devices).
MEMORY_COPIES = pa.schema(
    [
        ("session_id", STR),
        ("source", STR),
        ("direction", STR),  # MEMORY_COPY_HOST_TO_DEVICE, ... as the tool names it
        ("src_agent", STR),
        ("dst_agent", STR),
        ("bytes", I64),  # null when the format does not record it (rocprofv3 CSV)
        ("start_ns", I64),
        ("duration_ns", I64),
        ("queue_id", I64),
        ("correlation_id", I64),
    ]
)

# The hardware counters read per kernel dispatch (counter passes, or an ingested trace's).
COUNTERS = pa.schema(
    [
        ("session_id", STR),
        ("source", STR),
        ("dispatch_id", I64),
        ("correlation_id", I64),
        ("kernel_name", STR),
        ("agent", STR),
        ("counter", STR),
        ("value", F64),
    ]
)

# The devices (GPUs, CPUs) a device trace names, with their properties.
AGENTS = pa.schema(
    [
        ("session_id", STR),
        ("source", STR),
        ("agent_id", STR),  # as the trace names it ("Agent 2", "2", a GPU index)
        ("node_id", I64),
        ("agent_type", STR),  # GPU | CPU
        ("name", STR),  # gfx target for GPUs (gfx942), model for CPUs
        ("product_name", STR),
        ("compute_units", I64),
        ("wave_front_size", I64),
        ("max_clock_mhz", F64),
        ("details_json", STR),  # every other field the trace had
    ]
)

# The family of every kernel name the lake has seen (collectors.kernel_families): kernels are
# labelled per distinct name after loading, not per row while loading, so a ten-million-kernel
# trace loads in one parallel pass. Read families through the KERNEL_EVENTS_WITH_FAMILY view.
KERNEL_SYMBOLS = pa.schema(
    [
        ("kernel_name", STR),  # unique
        ("kernel_family", STR),
    ]
)

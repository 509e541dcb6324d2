"""rocmProfileData's RPD SQLite trace (rpd_tracer, roctracer-era "rocpd" schema) → table plans.

Not ROCm 7's rocpd (collectors.rocpd): the rocpd_op, rocpd_api, rocpd_api_ops, rocpd_kernelapi,
rocpd_copyapi and rocpd_monitor tables of the rocmProfileData vLLM sample (schema_version 2)
become kernels, copies, host calls with their launch chain, and clock samples as telemetry. An
RPD file numbers GPUs two ways without saying which; kernels keep the op's gpuId and telemetry
is named in that numbering (_FIRST_GPU).

Entry points: `matches` (is a SQLite database RPD), `plans` (its table plans) and
`exported_by_rpd2tracing` (is a JSON document rpd2tracing's picture of one, to refuse).

Concepts: docs/concepts/gpu-traces.md.
"""

from __future__ import annotations

import re
import sqlite3

from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.collectors.rocpd import object_names

SOURCE = "rpd"


# opType: KernelExecution (a launch), Task (a kernel of a graph launch), FillBuffer (hipMemset's
# blit kernel: rocprof v1 and rocpd record the same blit as the kernel
# `__amd_rocclr_fillBufferAligned`), CopyHostToDevice / CopyDeviceToHost / ... A kernel op is named
# by its description, or by its opType when that is empty ('' for fills and copies), as RPD's own
# `top` view and rpd2tracing name them.
_COPY = "t.string LIKE 'Copy%'"
_KERNEL = (
    f"(t.string IN ('KernelExecution', 'Task', 'FillBuffer') OR (NOT {_COPY} AND d.string <> ''))"
)
# The number the tracer gave the first GPU. rocpd_monitor's deviceId is rocm-smi's GPU index (0 =
# the first GPU), while gpuId is the tracer's device id: the ROCm node id, CPU nodes counted first
# (2 on a host with two CPU nodes), in files of rpd_tracer before its June 2024 "Remap device_id
# to gpuid", the GPU index since. The file does not say which, so the lowest gpuId that ran work
# is taken to be the first GPU, as it is for every process not told otherwise. In the vLLM sample
# the kernels ran on gpuId 2 while of rocm-smi's eight GPUs only GPU 0 left the idle clock
# (131-134 MHz, climbing to 1615 MHz); rocmProfileData's matmul example
# (examples/rocm-profile-data/results/matmul_result.rpd) has gpuId-2 kernels and one GPU, 0.
_FIRST_GPU = "coalesce((SELECT min(gpuId) FROM rocpd_op), 0)"
# rpd2tracing's own lines (tools/rpd2tracing.py): an empty first event, then a process per
# GPU ("GPU<gpuId>") and a thread per host thread ("Hip <tid>"), written byte for byte so.
_RPD2TRACING = re.compile(
    r'^(\{"traceEvents":\s*)?\[\s*\{\}\s*,.*?('
    r'\{"name": "process_name", "ph": "M", "pid":"-?\d+","args":\{"name":"GPU-?\d+"\}\}'
    r'|\{"name":"thread_name","ph":"M","pid":"\d+","tid":"\d+","args":\{"name":"Hip \d+"\}\})',
    re.DOTALL,
)


def matches(names: set[str]) -> bool:
    """Whether a SQLite database's table names are rocmProfileData's RPD schema."""
    return {"rocpd_op", "rocpd_api", "rocpd_string"} <= names


def exported_by_rpd2tracing(text: str) -> bool:
    """Whether a JSON document's beginning is rocmProfileData's rpd2tracing export of an RPD
    database (a Chrome trace, in its array or its object form): a picture of the trace for
    chrome://tracing, not the trace."""
    return _RPD2TRACING.match(text) is not None


def plans(db: sqlite3.Connection) -> dict[str, Plan]:
    """Plans for kernels, copies, host calls and monitor samples (those the file has)."""
    names = object_names(db)
    result = {
        "kernel_events": (_ops(names, "rocpd_kernelapi", _KERNEL), _kernel_events(names)),
        "memory_copies": (_ops(names, "rocpd_copyapi", _COPY), _memory_copies(names)),
        "api_calls": (_API_SOURCE, _api_calls()),
    }
    if "rocpd_monitor" in names:
        result["telemetry"] = ("rocpd_monitor", _telemetry())
    return result


def _ops(names: set[str], details: str, where: str) -> str:
    """GPU ops with their names, the call that caused them and that call's arguments."""
    source = (
        "rocpd_op o JOIN rocpd_string d ON d.id = o.description_id "
        "JOIN rocpd_string t ON t.id = o.opType_id "
    )
    if "rocpd_api_ops" in names:
        source += (
            "LEFT JOIN (SELECT op_id, MIN(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) l "
            "ON l.op_id = o.id LEFT JOIN rocpd_api a ON a.id = l.api_id "
        )
        if details in names:
            source += f"LEFT JOIN {details} x ON x.api_ptr_id = l.api_id "
    return source + f"WHERE {where}"


def _linked(names: set[str], expressions: dict[str, str]) -> dict[str, str]:
    """Expressions that need the op → call link, only when the file has it."""
    return expressions if "rocpd_api_ops" in names else {}


def _kernel_events(names: set[str]) -> dict[str, str]:
    """Kernel ops, tied to the call that caused them. grid_size stays null: gridX is in
    workgroups for roctracer's hipLaunchKernel but in work-items for the rocprofiler-sdk back
    end, and the file does not say which."""
    details = "rocpd_kernelapi" in names and "rocpd_api_ops" in names
    return {
        "source": f"'{SOURCE}'",
        "kernel_name": "CASE WHEN d.string = '' THEN t.string ELSE d.string END",
        "start_ns": "o.start",
        "duration_ns": 'o."end" - o.start',
        "device_id": "o.gpuId",
        "queue_id": "o.queueId",
        "dispatch_id": "o.sequenceId",
        **_linked(
            names,
            {"correlation_id": "l.api_id", "process_id": "a.pid", "thread_id": "a.tid"},
        ),
        **({"workgroup_size": "x.workgroupX * x.workgroupY * x.workgroupZ"} if details else {}),
    }


def _memory_copies(names: set[str]) -> dict[str, str]:
    """Copy ops; bytes and devices from the copyapi row (absent for copies inside graph
    launches)."""
    details = "rocpd_copyapi" in names and "rocpd_api_ops" in names
    return {
        "source": f"'{SOURCE}'",
        "direction": "t.string",
        "start_ns": "o.start",
        "duration_ns": 'o."end" - o.start',
        "queue_id": "o.queueId",
        **_linked(names, {"correlation_id": "l.api_id"}),
        **(
            {"bytes": "x.size", "src_agent": "x.srcDevice", "dst_agent": "x.dstDevice"}
            if details
            else {}
        ),
    }


_API_SOURCE = (
    "rocpd_api a JOIN rocpd_string n ON n.id = a.apiName_id "
    "LEFT JOIN rocpd_string g ON g.id = a.args_id"
)


def _api_calls() -> dict[str, str]:
    """Host calls; apiName 'UserMarker' is a roctx range, named by its text (args)."""
    marker = "n.string = 'UserMarker'"
    return {
        "source": f"'{SOURCE}'",
        "domain": (
            f"CASE WHEN {marker} THEN 'MARKER_CORE_API' "
            "WHEN n.string LIKE 'hip%' OR substr(n.string, 1, 5) = '__hip' THEN 'HIP_RUNTIME_API' "
            "WHEN n.string LIKE 'hsa%' THEN 'HSA_API' END"
        ),
        "api_name": f"CASE WHEN {marker} AND g.string <> '' THEN g.string ELSE n.string END",
        "start_ns": "a.start",
        "duration_ns": 'a."end" - a.start',
        "process_id": "a.pid",
        "thread_id": "a.tid",
        "correlation_id": "a.id",
    }


def _telemetry() -> dict[str, str]:
    return {
        "source": "'rpd_monitor'",
        "pass": "'other'",
        "timestamp_ns": "start",
        "device": (
            f"lower(deviceType) || (deviceId + CASE WHEN lower(deviceType) = 'gpu' "
            f"THEN {_FIRST_GPU} ELSE 0 END)"
        ),
        "metric": (
            "CASE monitorType WHEN 'sclk' THEN 'gfx_clock' WHEN 'mclk' THEN 'mem_clock' "
            "ELSE monitorType END"
        ),
        "value": "value",
        "unit": "CASE WHEN monitorType IN ('sclk', 'mclk') THEN 'MHz' END",
    }

"""rocmProfileData's RPD SQLite trace (rpd_tracer, roctracer-era "rocpd" schema) → table plans.

Not ROCm 7's rocpd: tables, as in the rocmProfileData vLLM sample (schema_version 2):

- rocpd_string(id, string): every name, interned
- rocpd_op(id, gpuId, queueId, sequenceId, completionSignal, start, end, description_id,
  opType_id): GPU work. opType is KernelExecution (a launch), Task (a kernel of a graph
  launch), FillBuffer (hipMemset's blit kernel), CopyHostToDevice / CopyDeviceToHost /
  CopyDeviceToDevice / ...; description is the kernel name ('' for fills and copies)
- rocpd_api(id, pid, tid, start, end, apiName_id, args_id): host calls; apiName 'UserMarker'
  is a roctx range whose text is in args
- rocpd_api_ops(api_id, op_id): which call caused which op, the launch chain
- rocpd_kernelapi(api_ptr_id, stream, gridX/Y/Z, workgroupX/Y/Z, groupSegmentSize,
  privateSegmentSize, kernelName_id, ...) and rocpd_copyapi(api_ptr_id, size, kind, srcDevice,
  dstDevice, ...): launch and copy arguments, keyed by the call
- rocpd_monitor(deviceType, deviceId, monitorType, start, end, value): sampled device state;
  monitorType 'sclk' is the graphics clock in MHz (text values)

Kernel ops (FillBuffer among them: rocprof v1 and rocpd record the same blit as the kernel
`__amd_rocclr_fillBufferAligned`) are named by their description, or by their opType when it
is empty, as RPD's own `top` view and rpd2tracing name them. They get correlation_id = the id
of the call that caused them (also api_calls' correlation_id), process/thread of that call,
workgroup size from its kernelapi row. grid_size stays null: gridX is in workgroups for
roctracer's hipLaunchKernel but in work-items for the rocprofiler-sdk back end, and the file
does not say which. Copies take bytes and devices from the copyapi row (absent for copies
inside graph launches). Monitor samples become telemetry (source rpd_monitor, pass 'other'):
sclk → gfx_clock (MHz), mclk → mem_clock (MHz), any other monitorType under its own name.

One device naming rule: kernels keep the op's gpuId as device_id, and a GPU's telemetry is
named `gpu<that number>`. The file numbers GPUs two ways: rocpd_monitor's deviceId is
rocm-smi's GPU index (0 = the first GPU), while gpuId is the tracer's device id: the ROCm node
id, CPU nodes counted first (2 on a host with two CPU nodes), in files of rpd_tracer before its
June 2024 "Remap device_id to gpuid", the GPU index since. The file does not say which, so the
lowest gpuId that ran work is taken to be the first GPU, as it is for a process that uses the
first GPU (every process not told otherwise). rocmProfileData's traces say so: in the vLLM
sample the kernels ran on gpuId 2 while, of the eight GPUs rocm-smi watched, only GPU 0 left
the idle clock (131-134 MHz; it climbed to 1615 MHz), and its matmul example
(examples/rocm-profile-data/results/matmul_result.rpd) has gpuId-2 kernels and one GPU, 0. A
run confined to later GPUs (HIP_VISIBLE_DEVICES=3) has its telemetry named as if it ran on
the first.
"""

from __future__ import annotations

import re
import sqlite3

from aaco_pipelines.collectors.plan import Plan
from aaco_pipelines.collectors.rocpd import object_names

SOURCE = "rpd"


_COPY = "t.string LIKE 'Copy%'"
_KERNEL = (
    f"(t.string IN ('KernelExecution', 'Task', 'FillBuffer') OR (NOT {_COPY} AND d.string <> ''))"
)
# The number the tracer gave the first GPU (see "One device naming rule").
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

"""The measured hardware envelope of an execution target: peak GEMM FLOP/s and streaming bandwidth.

A roofline judged against datasheet peaks blames the model for what the runtime, the clocks or a
shared host cannot deliver. So the peaks are measured here, through ONNX Runtime on the same
execution provider the models use, with the same graph optimizations (session.py), each
micro-benchmark (kernels.py) swept over its sizes until it saturates (sweep.py): a float32 GEMM,
the same GEMM in each other data type the provider runs natively, a streaming Add beyond the
last-level cache and, on CPU, the same Add inside each data cache level. What the envelope
holds is record.py's.

Entry point: `measure_envelope`.

Concepts: docs/concepts/roofline.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from aaco_pipelines.analysis.envelope.datasheets import GpuAgent, local_gpu
from aaco_pipelines.analysis.envelope.host_peak import physical_cores, theoretical_cpu_peak
from aaco_pipelines.analysis.envelope.kernels import ADD, GEMM_KERNELS, MATMUL
from aaco_pipelines.analysis.envelope.record import GEMM_DTYPES, HardwareEnvelope, sweep_peak
from aaco_pipelines.analysis.envelope.session import (
    Runtime,
    check_providers,
    native_gemm_problem,
)
from aaco_pipelines.analysis.envelope.sweep import cache_peaks, sweep_caches, sweep_sizes
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.environment import capture_environment, runtime_fingerprint
from aaco_pipelines.execution.host_sampler import OtherWork

GEMM_BUDGET_SHARE = 0.5  # the rest, plus what GEMM leaves unused, goes to the streaming sweep
CACHE_BUDGET_SHARE = 0.2  # of the streaming budget: the cache ceilings, before the DRAM sweep
FP32_GEMM_SHARE = 0.5  # of the GEMM budget, when other data types are measured too


def measure_envelope(
    target: str = "cpu",
    providers: Sequence[str] | None = None,
    *,
    repeats: int = 5,
    budget_s: float = 20.0,
    threads: int | None = None,
    dtypes: Sequence[str] | None = None,
) -> HardwareEnvelope:
    """Measure peak GEMM FLOP/s (fp32, and each of `dtypes` the provider runs natively; default
    GEMM_DTYPES) and streaming bandwidth of `target` within about `budget_s`.

    GEMM gets GEMM_BUDGET_SHARE of the budget (fp32 half of it when other types are measured,
    they the rest in turn), streaming what is left: on CPU, the cache ceilings CACHE_BUDGET_SHARE
    of it first, then DRAM. A sweep (and each cache level) always measures its first size, so
    even a tiny budget yields an envelope, with short sweeps. The share of the host's CPU time
    that other processes took meanwhile is kept with it (`host_contention`): above
    record.CONTENDED_SHARE the peaks are suspect, and choice.current_envelope measures again later.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    runtime = Runtime(tuple(providers or ["CPUExecutionProvider"]), threads)
    check_providers(ort, runtime.providers)
    measured_at_ns = time.time_ns()
    other_work = OtherWork()
    start = time.perf_counter()
    gemm_deadline = start + budget_s * GEMM_BUDGET_SHARE
    others, notes = [], {}
    for dtype in GEMM_DTYPES if dtypes is None else dtypes:
        if dtype not in GEMM_KERNELS:
            raise AacoInputError(
                f"no GEMM microbenchmark for data type {dtype!r}",
                fix=f"choose among {', '.join(GEMM_KERNELS)}",
            )
        problem = native_gemm_problem(ort, runtime, GEMM_KERNELS[dtype])
        if problem is None:
            others.append(dtype)
        else:
            notes[dtype] = problem
    fp32_share = FP32_GEMM_SHARE if others else 1.0
    fp32_deadline = start + (gemm_deadline - start) * fp32_share
    gemm_sweep, used = sweep_sizes(ort, runtime, MATMUL, repeats, fp32_deadline)
    dtype_gemm = {}
    for position, dtype in enumerate(others):
        now = time.perf_counter()
        deadline = now + max(gemm_deadline - now, 0.0) / (len(others) - position)
        sweep, _ = sweep_sizes(ort, runtime, GEMM_KERNELS[dtype], repeats, deadline)
        dtype_gemm[dtype] = sweep_peak("gemm_flops", "FLOP/s", sweep)
    cache_sweeps = {}
    if runtime.device == "cpu":
        now = time.perf_counter()
        cache_deadline = now + max(start + budget_s - now, 0.0) * CACHE_BUDGET_SHARE
        cache_sweeps = sweep_caches(ort, runtime, _threads_used(runtime), repeats, cache_deadline)
    stream_sweep, _ = sweep_sizes(ort, runtime, ADD, repeats, start + budget_s)
    bandwidth = sweep_peak("memory_bandwidth", "B/s", stream_sweep)
    device = _measured_device(runtime)
    return HardwareEnvelope(
        target=target,
        providers=list(used),
        runtime_fingerprint=runtime_fingerprint(capture_environment()),
        measured_at_ns=measured_at_ns,
        gemm=sweep_peak("gemm_flops", "FLOP/s", gemm_sweep),
        bandwidth=bandwidth,
        source="measured",
        device=device.to_dict() if device else None,
        dtype_gemm=dtype_gemm,
        dtype_notes=notes,
        host_contention=other_work.share(),
        theoretical=_theoretical(runtime),
        cache_bandwidth=cache_peaks(cache_sweeps, bandwidth),
    )


def _threads_used(runtime: Runtime) -> int:
    """Intra-op threads of the sessions: those asked for, else the CPUs this process may use."""
    return runtime.threads or len(os.sched_getaffinity(0))


def _theoretical(runtime: Runtime) -> dict | None:
    """The host's theoretical fp32 peak on the cores the sessions' threads ran on."""
    if runtime.device != "cpu":
        return None
    cores = min(_threads_used(runtime), physical_cores(os.sched_getaffinity(0)))
    peak = theoretical_cpu_peak(cores)
    return peak.to_dict() if peak else None


def _measured_device(runtime: Runtime) -> GpuAgent | None:
    """The GPU a GPU provider ran on: device 0 of those visible (HIP_VISIBLE_DEVICES or
    ROCR_VISIBLE_DEVICES name its index among all GPUs); None on CPU or where KFD says nothing."""
    if runtime.device == "cpu":
        return None
    index = 0
    for variable in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        first = os.environ.get(variable, "").split(",")[0].strip()
        if first.isdigit():
            index = int(first)
            break
    return local_gpu(index)

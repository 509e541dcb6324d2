"""The measured hardware envelope of an execution target: peak GEMM FLOP/s and streaming bandwidth.

A roofline judged against datasheet peaks blames the model for what the runtime, the clocks or a
shared host cannot deliver. So the peaks are measured here, through ONNX Runtime on the same
execution provider the models use, with the same graph optimizations (session.py), each
micro-benchmark (kernels.py) swept over its sizes until it saturates (sweep.py):

  gemm_flops        one MatMul [n, n] x [n, n] (float32, weights an initializer as in real
                    models, activations a runtime input so nothing folds): 2 n^3 FLOP per run;
                    the fp32 roof, and the roof of nodes whose data type has no peak
  dtype_gemm        the same GEMM in every other data type the provider runs natively: fp16
                    and bf16 MatMul, int8 MatMulInteger (uint8 x int8 -> int32, 2 n^3 ops).
                    A type is measured only if the provider runs it as itself: on CPU, ONNX
                    Runtime 1.22 runs a float16 MatMul in float32 between Casts it inserts, and
                    has no bfloat16 MatMul, so this CPU measures fp32 and int8 only; a GPU
                    session must hold every node on the GPU (session.disable_cpu_ep_fallback).
                    Why a type was skipped is kept in dtype_notes
  memory_bandwidth  elementwise Add of two large float32 tensors, every size beyond the
                    last-level cache: 3 x tensor bytes per run (two read, one written; as in
                    STREAM, a CPU's write-allocate read of the output is not counted)
  cache_bandwidth   CPU only: the same Add at working sets inside each data cache level sysfs
                    lists (L2 and up, instruction caches skipped: caches.cpu_cache_levels), half
                    then a quarter of the capacity the sessions' threads fill (a per-core cache:
                    its size x threads, one instance per CPUs sharing it; a shared cache: its
                    size), always above the next smaller level's capacity. Measured before the
                    DRAM sweep, with CACHE_BUDGET_SHARE of the streaming budget

What the envelope holds, and how its cache ceilings make the roofline hierarchical, is
record.py's. A streaming size that fits in the last-level cache (caches.py) does not count
towards memory bandwidth (sweep.CACHE_MARGIN).

On CPU the envelope also keeps the host's theoretical fp32 peak (analysis.envelope.host_peak: cores x
clock x SIMD lanes x 2 FMA units x 2, from /proc/cpuinfo and sysfs; the cores are the sessions'
threads, at most the physical cores they may use), and describe() says what share of it the
measured fp32 GEMM reached.

fp32 gets half the GEMM budget when other types are measured, and they share the rest.

A GPU provider's envelope names the GPU (device: gfx architecture, product name, CUs, clock,
from the KFD topology; analysis.envelope.datasheets.local_gpu), so that a trace ingested from that GPU
model finds it. An envelope can also come from a datasheet (record.datasheet_envelope): source
says which, and reference names the document.
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

"""The parent side of an isolated benchmark: start the measuring process, watch it, keep its
evidence.

The measuring process runs in its own process group. The parent samples host telemetry while it
runs (so the sampling never perturbs the measured process), enforces the timeout and the memory
limit by killing the whole group, and only publishes the bundle under sessions/ when the
measuring process succeeded.
A failed run's folder moves to failed/ with a failure.json, so nothing is lost and nothing
half-written is ever ingested.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import errno
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aaco_pipelines.bundle.session_bundle import (
    SessionBundle,
    copy_folder,
    record_evidence,
    write_json,
)
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError, Interrupted, MeasuringFailure, out_of_space
from aaco_pipelines.execution.counter_passes import (
    COUNTER_PASS_FOLDER,
    COUNTER_PASS_PREFIX,
    counter_command,
    plan_counters,
    trace_output_format,
)
from aaco_pipelines.execution.gpu_sampler import GpuSampler, request_performance_determinism
from aaco_pipelines.execution.host_sampler import HostSampler
from aaco_pipelines.execution.laboratory import LaboratorySettings, place_in_cgroup, remove_cgroup
from aaco_pipelines.execution.lifeline import Lifeline
from aaco_pipelines.execution.profiled_count import MAX_SECONDS as MAX_PROFILED_SECONDS
from aaco_pipelines.execution.providers import amd_gpu_visible
from aaco_pipelines.execution.session_folders import session_folder_held
from aaco_pipelines.foundation.redaction import redact_file
from aaco_pipelines.graph.cost.core import TensorInfo, tensor_bytes
from aaco_pipelines.registry.external_data import total_bytes
from aaco_pipelines.registry.sidecar import InputSpec

Progress = Callable[[str], None]
# Laboratory mode asks GPUs to hold this gfx clock (performance determinism); the clocks really
# observed are in the amdsmi telemetry either way.
LABORATORY_GFX_CLOCK_MHZ = 1900


@dataclass(frozen=True)
class RunnerLimits:
    timeout_s: float = 600.0
    memory_limit_mb: int | None = None  # None: derived from the model and the host (below)
    sample_interval_s: float = 0.05  # 20 Hz host telemetry


# The measuring process's memory limit when none is given: room for ONNX Runtime's copies of the
# weights (the loaded initializers, the optimizer's rewritten ones, prepacked GEMM weights) and of
# the inputs, plus a floor for the runtime, its arenas and the profiler; never above most of the
# host's memory, which is what the limit protects.
WEIGHT_COPIES = 3
MEMORY_FLOOR_MB = 4096  # activations are not known before the run: room for large ones
HOST_MEMORY_SHARE = 0.8


def derived_memory_limit(model_bytes: int, input_bytes: int) -> tuple[int, str]:
    """(limit in MiB, how it was derived) for a model of this size on this host."""
    import psutil

    host_mb = psutil.virtual_memory().total >> 20
    need_mb = WEIGHT_COPIES * ((model_bytes + input_bytes) >> 20) + MEMORY_FLOOR_MB
    cap_mb = int(host_mb * HOST_MEMORY_SHARE)
    rule = (
        f"derived: {WEIGHT_COPIES} x (model {model_bytes >> 20} MiB + inputs "
        f"{input_bytes >> 20} MiB) + {MEMORY_FLOOR_MB} MiB, at most "
        f"{HOST_MEMORY_SHARE:.0%} of the host's {host_mb} MiB"
    )
    return min(need_mb, cap_mb), rule


def with_memory_limit(limits: RunnerLimits, request: BenchmarkRequest) -> tuple[RunnerLimits, str]:
    """The limits with a memory limit: the one given (config), else derived for the model."""
    if limits.memory_limit_mb is not None:
        return limits, "given: memory_limit_mb in the runner config"
    inputs = sum(
        tensor_bytes(TensorInfo(spec.shape, spec.dtype)) or 0 for spec in request.inputs.values()
    )
    limit_mb, rule = derived_memory_limit(total_bytes(Path(request.model_path)), inputs)
    return dataclasses.replace(limits, memory_limit_mb=limit_mb), rule


@dataclass(frozen=True)
class BenchmarkRequest:
    session_id: str
    model_name: str
    model_slug: str
    model_sha256: str
    model_path: str  # the content-addressed snapshot that is measured
    inputs: dict[str, InputSpec]
    warmup_iterations: int = 5
    measured_iterations: int = 50
    min_measured_seconds: float = 1.0
    profiled_iterations: int = 10  # at least; more for a noisy measured pass (profiled_count)
    profiled_iterations_exact: bool = False  # an explicit count: exactly that many
    max_profiled_seconds: float = MAX_PROFILED_SECONDS
    providers: tuple[str, ...] = ()
    graph_optimization_level: str = "all"  # ONNX Runtime's, as the sidecar names it
    disabled_optimizers: tuple[str, ...] = ()
    execution_mode: str = "sequential"  # ONNX Runtime's, as the sidecar names it
    inter_op_threads: int | None = None  # None: the runtime's choice
    intra_op_threads: int | None = None
    streams: tuple[tuple[str, ...], ...] = ()  # parallel mode: runtime nodes per stream
    target: str = "cpu"
    laboratory: LaboratorySettings | None = None
    seed: int = 0
    sidecar_path: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    generation: dict | None = None  # a decoder's generation plan: generation passes, not forward
    counters: bool = False  # hardware counter passes under rocprofv3 --pmc (GPU hosts)
    # the limits this session is judged against, for its target (registry.objectives)
    objectives: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["inputs"] = {n: dataclasses.asdict(s) for n, s in self.inputs.items()}
        return data


def new_session_id(model_slug: str, now: dt.datetime | None = None) -> str:
    """Sortable and unique: UTC time, model, and a random suffix."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{model_slug}-{secrets.token_hex(3)}"


def run_benchmark(
    request: BenchmarkRequest,
    paths: AacoPaths,
    *,
    limits: RunnerLimits = RunnerLimits(),
    graph_dir: Path | None = None,
    on_progress: Progress | None = None,
) -> SessionBundle:
    """Measure one model in an isolated measuring process and return its published bundle."""
    say = on_progress or (lambda message: None)
    limits, memory_rule = with_memory_limit(limits, request)
    staging = paths.sessions / ".staging" / request.session_id
    staging.mkdir(parents=True, exist_ok=False)
    started_at = dt.datetime.now(dt.timezone.utc)
    final = paths.sessions / started_at.strftime("%Y-%m-%d") / request.session_id
    try:
        with session_folder_held(staging, request.session_id):
            calls, tracing = _trace_plan(request, staging, say)
            write_json(
                staging / "request.json",
                {
                    **request.to_json(),
                    "limits": {**dataclasses.asdict(limits), "memory_limit_rule": memory_rule},
                    **tracing,  # its "counters" record holds the request's flag as "asked"
                },
            )
            outcome = _run_plan(request, staging, limits, say, calls, tracing)
            _publish(request, staging, outcome, started_at, graph_dir, final)
    except BaseException as exc:
        # A stop signal can land just after the rename: the published folder is the one kept.
        _keep_failure(staging if staging.exists() else final, paths, request.session_id, exc)
        problem = out_of_space(exc, paths.home) or _measuring_out_of_space(exc, paths)
        if problem is not None:
            raise problem from exc
        raise
    say(f"session {request.session_id} written to {final}")
    return SessionBundle(final)


def _publish(request, staging: Path, outcome: dict, started_at, graph_dir, final: Path) -> None:
    """session.json and the evidence digests written, the folder renamed into sessions/."""
    if graph_dir is not None:
        copy_folder(graph_dir, staging / "graph")
    result = _merge_results(staging, [c.passes for c in outcome["calls"] if not _counts(c)])
    outcome["counters"] = _counter_results(staging, outcome["counters"])
    write_json(
        staging / "session.json",
        {
            "session_id": request.session_id,
            "model_name": request.model_name,
            "model_slug": request.model_slug,
            "model_sha256": request.model_sha256,
            "target": request.target,
            "started_at": started_at.isoformat(),
            "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "trace_source": "rocprofv3" if outcome["device_trace"]["tool"] else "ort_profile",
            **result,
            **outcome,
        },
    )
    record_evidence(staging)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, final)


def _measuring_out_of_space(exc: BaseException, paths: AacoPaths) -> AacoInputError | None:
    """A measuring process that failed while the session folder's file system is full failed
    for that (it may not even have been able to say so in error.json)."""
    if not isinstance(exc, MeasuringFailure):
        return None
    try:
        free = shutil.disk_usage(paths.home).free
    except OSError:
        return None
    if free >= 1 << 20:
        return None
    return out_of_space(OSError(errno.ENOSPC, "no space left", str(paths.home)), paths.home)


@dataclass(frozen=True)
class MeasuringCall:
    passes: str  # all | measured | profiled | counters_<k>
    command: list[str]


def measuring_plan(
    request_path: Path,
    rocprofv3: str | None,
    trace_dir: Path,
    output_format: str = "csv",
    counter_passes: tuple[tuple[str, ...], ...] = (),
) -> list[MeasuringCall]:
    """One measuring process for every pass; or, with rocprofv3 on a GPU host, the measured
    passes in a plain measuring process and the profiled pass in a second one traced by
    rocprofv3 (kernel, HIP runtime API and memory-copy traces in `output_format`), so the device
    trace never slows the latency figures down; then one measuring process per counter pass,
    each under `rocprofv3 --pmc` with that pass's counters, writing to trace_dir/pmc_<k>/
    (execution.counter_passes)."""
    argv = [sys.executable, "-m", "aaco_pipelines.execution.measuring_process", str(request_path)]
    if rocprofv3 is None:
        return [MeasuringCall("all", [*argv, "all"])]
    traced = [
        rocprofv3,
        "--kernel-trace",
        "--hip-runtime-trace",
        "--memory-copy-trace",
        "--output-format",
        output_format,
        "--output-directory",
        str(trace_dir),
        "--output-file",
        "trace",
        "--",
        *argv,
        "profiled",
    ]
    counted = [
        MeasuringCall(
            f"{COUNTER_PASS_PREFIX}{k}",
            counter_command(
                rocprofv3,
                counters,
                output_format,
                trace_dir / COUNTER_PASS_FOLDER.format(k),
                [*argv, f"{COUNTER_PASS_PREFIX}{k}"],
            ),
        )
        for k, counters in enumerate(counter_passes, start=1)
    ]
    measured = MeasuringCall("measured", [*argv, "measured"])
    return [measured, MeasuringCall("profiled", traced), *counted]


def _counts(call: MeasuringCall) -> bool:
    """A counter pass: its latencies are no latency figures."""
    return call.passes.startswith(COUNTER_PASS_PREFIX)


def _trace_plan(
    request: BenchmarkRequest, staging: Path, say: Progress
) -> tuple[list[MeasuringCall], dict]:
    """The measuring calls, and what request.json and session.json record of the device trace
    and the counters: the tool or why none, the output format and why, the counter passes
    with their counters and commands, or why counters asked for are not collected (said on
    the progress output too; the run goes on without them)."""
    tracer, reason = device_tracer()
    output_format, why = trace_output_format() if tracer else (None, reason)
    counters = plan_counters(request.counters, tracer, reason, request.generation is not None)
    calls = measuring_plan(
        staging / "request.json", tracer, staging / "rocprof", output_format or "csv",
        counters.passes,
    )  # fmt: skip
    if counters.reason:
        say(f"counters not collected: {counters.reason}")
    profiled = next((c.command for c in calls if c.passes == "profiled"), None)
    return calls, {
        "device_trace": {
            "tool": "rocprofv3" if tracer else None,
            "reason": reason,
            "command": profiled,
            "output_format": output_format,
            "output_format_reason": why,
        },
        "counters": {**counters.to_json(), "commands": [c.command for c in calls if _counts(c)]},
    }


def device_tracer() -> tuple[str | None, str]:
    """rocprofv3's path when this host can trace an AMD GPU, else None and why not."""
    path = shutil.which("rocprofv3")
    if path is None:
        return None, "rocprofv3 not on PATH: ONNX Runtime's profiler is the kernel-trace source"
    if not amd_gpu_visible():
        return None, "no AMD GPU visible (/dev/kfd): ONNX Runtime's profiler is the source"
    return path, f"rocprofv3 at {path}"


def _run_plan(
    request: BenchmarkRequest,
    staging: Path,
    limits: RunnerLimits,
    say: Progress,
    calls: list[MeasuringCall],
    tracing: dict,
) -> dict:
    """Every measuring call of the plan under the limits, with GPU telemetry around all of them."""
    gpu = GpuSampler(interval_s=limits.sample_interval_s * 2)
    determinism = (
        request_performance_determinism(gpu.amdsmi, LABORATORY_GFX_CLOCK_MHZ)
        if request.laboratory and gpu.available
        else None
    )
    gpu.start()
    host_samples, observed = [], []
    try:
        for call in calls:
            samples, seen = _watch_measuring_process(request, call, staging, limits, say)
            host_samples.append(samples)
            observed.append(seen)
            _check_traced(call, staging, tracing)
    finally:
        gpu_samples = gpu.stop()
        if host_samples:
            pq.write_table(pa.concat_tables(host_samples), staging / "host_samples.parquet")
        if gpu.available:
            pq.write_table(gpu_samples, staging / "gpu_samples.parquet")
    outcome = {
        "calls": calls,
        **tracing,
        "gpu_telemetry": {"source": "amdsmi" if gpu.available else None, "reason": gpu.reason},
        "performance_determinism": determinism,
        "worker_wall_s": round(sum(o["worker_wall_s"] for o in observed), 3),
        "worker_exit_code": observed[-1]["worker_exit_code"],
        "worker_peak_rss_bytes": max(o["worker_peak_rss_bytes"] for o in observed),
        "memory_limit_bytes": limits.memory_limit_mb << 20,
        "command": [c.command for c in calls],
        "cgroup": observed[0]["cgroup"],
    }
    write_json(
        staging / "observed.json", {**outcome, "calls": [dataclasses.asdict(c) for c in calls]}
    )
    return outcome


def _check_traced(call: MeasuringCall, staging: Path, tracing: dict) -> None:
    """A call rocprofv3 wrapped left a trace (the profiled pass in rocprof/, a counter pass in
    rocprof/pmc_<k>/): a rocprofv3 that exits 0 and writes nothing is a failed measurement
    that says so, not a FileNotFoundError when the session is collected."""
    if tracing["device_trace"]["tool"] is None or call.passes == "measured":
        return
    counted = _counts(call)
    folder = staging / "rocprof"
    if counted:
        folder = folder / COUNTER_PASS_FOLDER.format(call.passes.removeprefix(COUNTER_PASS_PREFIX))
    files = [f for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []
    if not counted:  # the counter passes' own folders are not the profiled pass's trace
        files = [f for f in files if not f.relative_to(folder).parts[0].startswith("pmc_")]
    if not files:
        raise MeasuringFailure(
            f"rocprofv3 ran the {'counter' if counted else 'profiled'} pass and wrote no trace "
            f"under {folder.relative_to(staging)}/: see worker.log for what it said (a "
            "rocprofv3 too old for these options, or a GPU it cannot see)"
        )


def _counter_results(staging: Path, counters: dict) -> dict:
    """The counters record with each pass's window and iteration count, from its measuring
    process's files (its latencies stay in latencies.counters_<k>.json, out of the latency
    figures)."""
    passes = []
    for number, planned in enumerate(counters["passes"], start=1):
        which = f"{COUNTER_PASS_PREFIX}{number}"
        timed = json.loads((staging / f"latencies.{which}.json").read_text())[which]
        window = {"start_ns": timed["start_ns"], "end_ns": timed["end_ns"]}
        passes.append({**planned, **window, "iterations": len(timed["latency_ns"])})
    return {**counters, "passes": passes}


def _merge_results(staging: Path, passes: list[str]) -> dict:
    """One worker_result.json and latencies.json from the measuring calls of the plan."""
    result: dict = {"passes": {}}
    latencies: dict = {}
    for which in passes:
        part = json.loads((staging / f"worker_result.{which}.json").read_text())
        result["passes"].update(part.pop("passes"))
        result.update(part)
        latencies.update(json.loads((staging / f"latencies.{which}.json").read_text()))
    write_json(staging / "worker_result.json", result)
    write_json(staging / "latencies.json", latencies)
    return result


def _watch_measuring_process(
    request: BenchmarkRequest,
    call: MeasuringCall,
    staging: Path,
    limits: RunnerLimits,
    say: Progress,
) -> tuple[pa.Table, dict]:
    """Run one measuring call to completion under the limits; its host samples and what the
    parent observed."""
    log = open(staging / "worker.log", "a")  # noqa: SIM115 - closed below, also on failure
    lifeline = Lifeline()
    try:
        process = subprocess.Popen(
            call.command,
            stdout=log,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own group: killed whole at a limit or an interruption
            env={**os.environ, **lifeline.env},
            pass_fds=lifeline.pass_fds,
        )
    except BaseException:
        lifeline.started()
        lifeline.close()
        log.close()
        raise
    lifeline.started()
    forwarder = threading.Thread(
        target=_forward_progress, args=(process.stderr, log, say), daemon=True
    )
    forwarder.start()
    sampler = HostSampler(process.pid, interval_s=limits.sample_interval_s)
    sampler.start()
    cgroup = (
        place_in_cgroup(
            process.pid, request.session_id, limits.memory_limit_mb << 20, request.laboratory.cores
        )
        if request.laboratory
        else None
    )
    started = time.monotonic()
    try:
        killed_for = _wait_within_limits(process, sampler, limits, started)
    finally:
        if process.poll() is None:
            _kill_group(process)
        lifeline.close()
        raw_samples = sampler.stop()
        forwarder.join(timeout=5)
        log.close()
        with contextlib.suppress(OSError):  # a library's error may quote a connection string
            redact_file(staging / "worker.log")
        if cgroup:
            remove_cgroup(cgroup)
    observed = {
        "worker_wall_s": round(time.monotonic() - started, 3),
        "worker_exit_code": process.returncode,
        "worker_peak_rss_bytes": sampler.peak_rss_bytes,
        "cgroup": cgroup,
    }
    if killed_for or process.returncode != 0:
        pq.write_table(raw_samples, staging / f"host_samples.{call.passes}.parquet")
        _raise_measuring_failure(request, staging, process.returncode, killed_for, limits, sampler)
    return raw_samples, observed


def _wait_within_limits(
    process, sampler: HostSampler, limits: RunnerLimits, started: float
) -> str | None:
    limit_bytes = limits.memory_limit_mb << 20
    while process.poll() is None:
        if time.monotonic() - started > limits.timeout_s:
            _kill_group(process)
            return "timeout"
        rss = sampler.latest_rss_bytes
        if rss is not None and rss > limit_bytes:
            _kill_group(process)
            return "memory"
        time.sleep(0.02)
    return None


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _forward_progress(stream, log, say: Progress) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        if line.startswith("aaco: "):
            say(line[6:].rstrip())


def _raise_measuring_failure(request, staging, returncode, killed_for, limits, sampler) -> None:
    model = request.model_name
    if killed_for == "timeout":
        raise MeasuringFailure(
            f"benchmark of {model} timed out after {limits.timeout_s:g} s and was killed; "
            "raise its time limit (the sidecar's timeout_s, aaco run --timeout, or timeout_s in "
            "the runner config) or reduce the sidecar's iteration counts"
        )
    if killed_for == "memory":
        raise MeasuringFailure(
            f"benchmark of {model} exceeded the memory limit of {limits.memory_limit_mb} MiB "
            f"(RSS reached {sampler.peak_rss_bytes >> 20} MiB) and was killed; set "
            "memory_limit_mb in the runner config (aaco run --memory-limit-mb) or use smaller "
            "inputs in the sidecar"
        )
    error_file = staging / "error.json"
    if error_file.is_file():
        error = json.loads(error_file.read_text())
        if error["type"] == "AacoInputError":
            raise AacoInputError(error["problem"], path=error.get("path"), fix=error.get("fix"))
        raise MeasuringFailure(
            f"benchmark of {model} failed in the measuring process: {error['type']}: "
            f"{error['problem']}"
        )
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        raise MeasuringFailure(
            f"the measuring process for {model} crashed (killed by {name}); this is a crash "
            "inside ONNX Runtime or a provider library: see its log, worker.log, try the CPU "
            "provider"
        )
    raise MeasuringFailure(
        f"the measuring process for {model} exited with code {returncode}; see its log, worker.log"
    )


def _keep_failure(staging: Path, paths: AacoPaths, session_id: str, exc: BaseException) -> None:
    """Move a failed run's folder to failed/ with the reason: evidence kept, never ingested.
    Where even that cannot be written (the disk is full) the folder goes, so a failure never
    leaves a half-written session behind."""
    target = paths.failed_sessions / dt.date.today().isoformat() / session_id
    try:
        write_json(staging / "failure.json", {"type": type(exc).__name__, "message": str(exc)})
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return
    if isinstance(exc, (MeasuringFailure, Interrupted)):
        exc.evidence_dir = str(target)
    if isinstance(exc, MeasuringFailure):
        exc.args = (f"{exc.args[0]} (its output kept in {target})",)

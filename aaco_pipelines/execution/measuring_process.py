"""The measuring process: runs one model in ONNX Runtime, in a process of its own (not to be
confused with `aaco worker`, a device's Celery worker that runs whole Dagster runs).

Started by `execution.runner` as `python -m aaco_pipelines.execution.measuring_process REQUEST.json [PASSES]`
(PASSES: all | measured | profiled | counters_<k>; the runner splits them when the profiled pass
runs under rocprofv3, and runs each counter pass under `rocprofv3 --pmc`). It owns
nothing but its output folder, so a crash, hang or out-of-memory here cannot take the caller down.

Passes, in order, each recorded with its start and end (epoch ns):
  warmup    the model runs `warmup_iterations` times (caches, allocators, thread pools)
  measured  at least `measured_iterations` timed runs and `min_measured_seconds`, profiling
            OFF: the latency figures
  profiled  a fresh session with ONNX Runtime's profiler ON, a short warm-up, then at least
            `profiled_iterations` runs, more when the measured pass was noisy, within a time
            cap (execution.profiled_count): the kernel trace, and the profiling overhead
  counters_<k>  (with --counters on a GPU host) a fresh session, profiler off, a short warm-up
            and `profiled_iterations` runs while rocprofv3 counts one pass of hardware counters:
            its latencies are kept apart and never become latency figures
            (execution.counter_passes)

Progress lines go to stderr prefixed "aaco:"; a user error is written to error.json so the parent
can re-raise it with the model path and the fix.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from aaco_pipelines.bundle.session_bundle import write_json
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.counter_passes import COUNTER_PASS_PREFIX
from aaco_pipelines.execution.environment import capture_environment
from aaco_pipelines.execution.laboratory import LaboratorySettings, pin_current_process
from aaco_pipelines.execution.lifeline import watch_parent
from aaco_pipelines.execution.ort_session import create_session, resolve_providers, session_options
from aaco_pipelines.execution.profiled_count import request_count
from aaco_pipelines.graph.inputs import make_inputs
from aaco_pipelines.registry.sidecar import input_specs_from_json

PROFILED_WARMUP_ITERATIONS = 2


def progress(message: str) -> None:
    print(f"aaco: {message}", file=sys.stderr, flush=True)


def timed_pass(
    session,
    feeds: dict,
    count: int,
    min_seconds: float = 0.0,
    *,
    up_to: int = 0,
    max_seconds: float | None = None,
) -> dict:
    """Run at least `count` times and for at least `min_seconds`; then on, up to `up_to` runs,
    while the pass has lasted under `max_seconds`.

    Per iteration: epoch start (to place it among telemetry and trace events) and the
    perf_counter latency, both in ns. The minimum duration gives the host sampler enough ticks
    inside the pass even for sub-millisecond models.
    """
    starts, latencies = [], []
    run, clock = session.run, time.perf_counter_ns
    pass_start_ns = time.time_ns()
    deadline = clock() + int(min_seconds * 1e9)
    cap = clock() + int(max_seconds * 1e9) if max_seconds is not None else deadline
    while (
        len(latencies) < count or clock() < deadline or (len(latencies) < up_to and clock() < cap)
    ):
        starts.append(time.time_ns())
        t0 = clock()
        run(None, feeds)
        latencies.append(clock() - t0)
    return {
        "start_ns": pass_start_ns,
        "end_ns": time.time_ns(),
        "iteration_start_ns": starts,
        "latency_ns": latencies,
    }


def run_passes(request: dict, out: Path, which: str = "all") -> dict:
    """Run the passes `which` names: "all", "measured" (warm-up + measured) or "profiled"."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    request = {**request, "resolved_providers": resolve_providers(ort, request)}
    result: dict = {"providers_requested": request["resolved_providers"]}
    passes: dict[str, dict] = {}
    if request.get("generation"):
        from aaco_pipelines.execution.generation_passes import run_generation_passes

        done, passes = run_generation_passes(ort, request, out, which, progress)
        result.update(done)
    else:
        result.update(_forward_passes(ort, request, out, which, passes))
    write_json(out / f"latencies.{which}.json", passes)
    result["passes"] = {name: [p["start_ns"], p["end_ns"]] for name, p in passes.items()}
    return result


def _forward_passes(ort, request: dict, out: Path, which: str, passes: dict) -> dict:
    """The passes of a forward-pass workload: the same inputs, run after run."""
    feeds = make_inputs(input_specs_from_json(request["inputs"]), seed=request["seed"])
    result: dict = {}
    if which in ("all", "measured"):
        result.update(_measured_passes(ort, request, feeds, passes))
    if which in ("all", "profiled"):
        result.update(_profiled_pass(ort, request, feeds, passes, out))
    if which.startswith(COUNTER_PASS_PREFIX):
        _counter_pass(ort, request, feeds, passes, which)
    return result


def _measured_passes(ort, request: dict, feeds: dict, passes: dict) -> dict:
    progress(f"creating session with {', '.join(request['resolved_providers'])}")
    session = create_session(ort, request, session_options(ort, request))
    progress(f"warmup pass: {request['warmup_iterations']} iterations")
    passes["warmup"] = timed_pass(session, feeds, request["warmup_iterations"])
    progress(
        f"measured pass: {request['measured_iterations']} iterations, "
        f"at least {request['min_measured_seconds']} s"
    )
    passes["measured"] = timed_pass(
        session, feeds, request["measured_iterations"], request["min_measured_seconds"]
    )
    return {
        "providers_used": session.get_providers(),
        "measured_median_ns": int(np.median(passes["measured"]["latency_ns"])),
    }


def _profiled_pass(ort, request: dict, feeds: dict, passes: dict, out: Path) -> dict:
    """A fresh session with ONNX Runtime's profiler on (and, when the runner wraps this process
    in rocprofv3, the device trace): never the session the latency figures came from."""
    count = request_count(request, _measured_latencies(passes, out))
    progress(f"profiled pass: {count.rule}")
    options = session_options(ort, request, profile_prefix=out / "ort_profile")
    profiled = create_session(ort, request, options, out / "optimized_model.onnx")
    profiling_start_ns = profiled.get_profiling_start_time_ns()
    timed_pass(profiled, feeds, PROFILED_WARMUP_ITERATIONS)
    passes["profiled"] = timed_pass(
        profiled, feeds, count.minimum, up_to=count.target, max_seconds=count.max_seconds
    )
    os.replace(profiled.end_profiling(), out / "ort_profile.json")
    return {
        "profiled_providers_used": profiled.get_providers(),
        "profiling_start_ns": profiling_start_ns,
        "profiled_warmup_iterations": PROFILED_WARMUP_ITERATIONS,
        "profiled_iterations_rule": count.rule,
    }


def _counter_pass(ort, request: dict, feeds: dict, passes: dict, which: str) -> None:
    """The profiled pass's workload in a fresh session with no profiler of ONNX Runtime's, while
    rocprofv3 counts the dispatches (each pass in a process of its own): the sidecar's
    profiled_iterations, never grown for noise, since counters sum every dispatch anyway."""
    count = request["profiled_iterations"]
    progress(f"counter pass {which.removeprefix(COUNTER_PASS_PREFIX)}: {count} iterations")
    session = create_session(ort, request, session_options(ort, request))
    timed_pass(session, feeds, PROFILED_WARMUP_ITERATIONS)
    passes[which] = timed_pass(session, feeds, count)


def _measured_latencies(passes: dict, out: Path) -> list[int] | None:
    """The measured pass's latencies: this process's, or those a measured-only process left in
    the folder (a profiled pass traced by rocprofv3 runs in a process of its own)."""
    if "measured" in passes:
        return passes["measured"]["latency_ns"]
    path = out / "latencies.measured.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get("measured", {}).get("latency_ns")


def main(argv: list[str]) -> int:
    watch_parent()  # die with the runner, however it ends
    request_path = Path(argv[1])
    which = argv[2] if len(argv) > 2 else "all"
    out = request_path.parent
    request = json.loads(request_path.read_text())
    try:
        lab_record = None
        if request.get("laboratory"):
            lab_record = pin_current_process(
                LaboratorySettings(
                    cores=tuple(request["laboratory"]["cores"]),
                    intra_op_threads=request["laboratory"]["intra_op_threads"],
                    inter_op_threads=request["laboratory"]["inter_op_threads"],
                )
            )
        if not (out / "env.json").exists():
            write_json(out / "env.json", capture_environment())
        result = run_passes(request, out, which)
        result["laboratory_affinity"] = lab_record
        write_json(out / f"worker_result.{which}.json", result)
        progress(f"measuring process finished ({which} passes)")  # the run goes on: not "done"
        return 0
    except AacoInputError as exc:
        write_json(
            out / "error.json",
            {"type": "AacoInputError", "problem": exc.problem, "path": exc.path, "fix": exc.fix},
        )
        progress(f"error: {exc}")
        return 2
    except Exception as exc:  # noqa: BLE001 - everything else is reported, with its traceback
        write_json(
            out / "error.json",
            {"type": type(exc).__name__, "problem": str(exc), "traceback": traceback.format_exc()},
        )
        progress(f"error: {type(exc).__name__}: {exc}")
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The measuring process's passes for a generation workload (the forward-pass passes' counterpart).

  warmup    `warmup_iterations` requests at batch 1 and one batch at the largest batch size
  measured  every scenario of the workload under LoadGen, in order, then the curves; the
            headline scenario's end-to-end request latencies are the pass's latencies
  profiled  a fresh session with ONNX Runtime's profiler on: one request of warm-up, then
            `profiled_iterations` requests at batch 1; each prefill and decode step is one run
            of the profile, so kernel events carry the step (and its phase) they belong to

Requests and steps go to generation_requests.<passes>.parquet and generation_steps.<passes>.parquet
(one row per request / step, with the `run` they belong to: warmup, a scenario, curve, profiled).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aaco_pipelines.llm.decoder_io import DecoderIO
from aaco_pipelines.llm.engine import Generator, StepLog
from aaco_pipelines.llm.engine import now_ns as _now
from aaco_pipelines.llm.scenarios import (
    RequestLog,
    make_prompts,
    run_batch,
    run_curves,
    run_scenario,
)
from aaco_pipelines.registry.sidecar import parse_sidecar


def workload_of(request: dict):
    """The request's generation workload, as the sidecar parser reads it."""
    source = Path(request.get("sidecar_path") or request["model_path"])
    return parse_sidecar({"generation": request["generation"]["workload"]}, source).generation


def run_generation_passes(ort, request: dict, out: Path, which: str, progress) -> tuple[dict, dict]:
    """(measuring result, latencies by pass) of the generation passes `which` names."""
    from aaco_pipelines.execution.ort_session import create_session, session_options

    workload = workload_of(request)
    decoder = DecoderIO(**request["generation"]["decoder"])
    vocab, seed = request["generation"]["vocab"], request["seed"]
    result: dict = {}
    passes: dict[str, dict] = {}
    requests: dict[str, RequestLog] = {}
    steps: dict[str, StepLog] = {}
    if which in ("all", "measured"):
        progress(f"creating session with {', '.join(request['resolved_providers'])}")
        session = create_session(ort, request, session_options(ort, request))
        generator = Generator(session, decoder)
        result["providers_used"] = session.get_providers()
        _warm_up(generator, workload, request, vocab, seed, requests, steps, passes, progress)
        _measure(generator, workload, vocab, seed, out, requests, steps, passes, progress)
    if which in ("all", "profiled"):
        result.update(
            _profile(
                ort, request, workload, decoder, vocab, seed, out, requests, steps, passes, progress
            )
        )
    _write(out, which, requests, steps)
    return result, passes


def _warm_up(generator, workload, request, vocab, seed, requests, steps, passes, progress) -> None:
    count = request["warmup_iterations"]
    progress(f"warmup: {count} requests at batch 1, one batch of {workload.batch_size}")
    generator.steps = steps.setdefault("warmup", StepLog())
    log = requests.setdefault("warmup", RequestLog())
    prompts = make_prompts(max(count, workload.batch_size), workload.prompt_tokens, vocab, seed)
    for i in range(count):
        run_batch(generator, log, prompts[i : i + 1], workload.output_tokens, [(i, i, _now())])
    batch = [(count + i, i, _now()) for i in range(workload.batch_size)]
    run_batch(generator, log, prompts[: workload.batch_size], workload.output_tokens, batch)
    passes["warmup"] = _pass_latencies(log)


def _measure(generator, workload, vocab, seed, out, requests, steps, passes, progress) -> None:
    start = _now()
    for scenario in workload.scenarios:
        progress(f"{scenario} scenario under LoadGen: at least {workload.requests} requests")
        generator.steps = steps.setdefault(scenario, StepLog())
        requests[scenario] = run_scenario(
            generator, workload, scenario, vocab, seed, out / "loadgen" / scenario
        )
    if workload.curves.batch_sizes or workload.curves.prompt_lengths:
        progress("curves: latency and throughput against batch size and prompt length")
        generator.steps = steps.setdefault("curve", StepLog())
        requests["curve"] = run_curves(generator, workload, vocab, seed)
    headline = _pass_latencies(requests[workload.headline])
    passes["measured"] = {**headline, "start_ns": start, "end_ns": _now()}


def _profile(ort, request, workload, decoder, vocab, seed, out, requests, steps, passes, progress):
    from aaco_pipelines.execution.ort_session import create_session, session_options

    count = request["profiled_iterations"]
    progress(f"profiled pass: {count} requests at batch 1 ({workload.output_tokens} runs each)")
    options = session_options(ort, request, profile_prefix=out / "ort_profile")
    session = create_session(ort, request, options, out / "optimized_model.onnx")
    profiling_start_ns = session.get_profiling_start_time_ns()
    generator = Generator(session, decoder, steps.setdefault("profiled", StepLog()))
    log = requests.setdefault("profiled", RequestLog())
    prompts = make_prompts(count + 1, workload.prompt_tokens, vocab, seed)
    generator.generate(prompts[:1], workload.output_tokens)  # warm-up: not logged as a request
    warmup_runs = len(generator.steps.step)
    for i in range(count):
        run_batch(
            generator, log, prompts[i + 1 : i + 2], workload.output_tokens, [(i, i + 1, _now())]
        )
    os.replace(session.end_profiling(), out / "ort_profile.json")
    profiled = generator.steps
    passes["profiled"] = {
        "start_ns": profiled.start_ns[warmup_runs],
        "end_ns": profiled.end_ns[-1],
        "iteration_start_ns": profiled.start_ns[warmup_runs:],
        "latency_ns": [e - s for s, e in zip(profiled.start_ns, profiled.end_ns, strict=True)][
            warmup_runs:
        ],
    }
    return {
        "profiled_providers_used": session.get_providers(),
        "profiling_start_ns": profiling_start_ns,
        "profiled_warmup_iterations": warmup_runs,
    }


def _pass_latencies(log: RequestLog) -> dict:
    """A pass's latencies: one iteration per request, its end-to-end latency."""
    return {
        "start_ns": min(log.arrival_ns),
        "end_ns": max(log.end_ns),
        "iteration_start_ns": list(log.arrival_ns),
        "latency_ns": [e - a for a, e in zip(log.arrival_ns, log.end_ns, strict=True)],
    }


def _write(out: Path, which: str, requests: dict, steps: dict) -> None:
    for name, logs in (("requests", requests), ("steps", steps)):
        tables = [
            pa.table(log.to_dict()).add_column(0, "run", pa.array([run] * len(log), pa.string()))
            for run, log in logs.items()
            if len(log)
        ]
        if tables:
            pq.write_table(pa.concat_tables(tables), out / f"generation_{name}.{which}.parquet")

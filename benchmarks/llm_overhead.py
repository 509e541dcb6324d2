"""The tool's own cost in LLM timings: `.venv/bin/python benchmarks/llm_overhead.py [--requests N]`.

The zoo's Llama decoder, greedy, prompt 32 and 32 output tokens, one intra-op thread: each
decode step's time by a plain ONNX Runtime loop (session.run with numpy past, as a user would
write it) and by aaco's Generator (aaco_pipelines/llm/engine.py), alternated request by
request, with their medians, the ratio (goal: within 5 %, issue 24) and whether both sampled
the same tokens. Then LoadGen's server scenario at half and at twice the decoder's capacity
(batches of 4): TTFT p50 / p90 ours (arrivals at LoadGen's scheduled issue, from its trace)
against LoadGen's own summary (goal: within 5 % below capacity), as LoadGen reads them (rank
int(n q)) and as we report them (linear), the same with arrivals stamped in the issue callback
(as before issue 24), and the share of arrival gaps under 50 us each way. Not a timed test: a
busy host moves both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

PROMPT_TOKENS, OUTPUT_TOKENS = 32, 32


def plain_loop(session, io, prompt: np.ndarray) -> tuple[list[int], list[int]]:
    """(tokens, each step's ns) of a hand-written loop."""
    names = [o.name for o in session.get_outputs()]
    batch = prompt.shape[0]
    past = {
        n: np.zeros((batch, io.kv_heads, 0, io.head_dim), np.float32)
        for layer in range(io.layers)
        for n in io.past_names(layer)
    }
    ids, length, tokens, times = prompt.astype(np.int64), 0, [], []
    for _ in range(OUTPUT_TOKENS):
        start = time.perf_counter_ns()
        new = ids.shape[1]
        feeds = {"input_ids": ids, **past}
        if io.has_attention_mask:
            feeds["attention_mask"] = np.ones((batch, length + new), np.int64)
        if io.has_position_ids:
            feeds["position_ids"] = np.arange(length, length + new, dtype=np.int64)[None]
        outputs = dict(zip(names, session.run(None, feeds), strict=True))
        token = outputs["logits"][:, -1, :].argmax(-1)
        times.append(time.perf_counter_ns() - start)
        past = {
            p: outputs[q]
            for layer in range(io.layers)
            for p, q in zip(io.past_names(layer), io.present_names(layer), strict=True)
        }
        ids, length = token[:, None].astype(np.int64), length + new
        tokens.append(int(token[0]))
    return tokens, times


def generator_loop(session, io, prompt: np.ndarray) -> tuple[list[int], list[int]]:
    """(tokens, each step's ns) as aaco's Generator measures them."""
    from aaco_pipelines.llm.engine import Generator, StepLog

    generator = Generator(session, io, StepLog())
    tokens = generator.generate(prompt, OUTPUT_TOKENS).tokens[0].tolist()
    steps = generator.steps
    return tokens, [end - start for start, end in zip(steps.start_ns, steps.end_ns, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=40, help="requests each way")
    parser.add_argument("--server-requests", type=int, default=400, help="server queries a load")
    args = parser.parse_args()
    import onnxruntime as ort

    from aaco_pipelines.llm.decoder_io import detect_decoder_io
    from aaco_pipelines.registry.zoo import llama_decoder

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama.onnx"
        model = llama_decoder()
        onnx.save(model, path)
        io = detect_decoder_io(model, path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        prompts = [rng.integers(0, 512, (1, PROMPT_TOKENS)) for _ in range(args.requests)]
        loops = {"plain ONNX Runtime loop": plain_loop, "aaco Generator": generator_loop}
        for loop in loops.values():
            loop(session, io, prompts[0])  # warm
        decode: dict[str, list[int]] = {name: [] for name in loops}
        same = True
        for prompt in prompts:  # alternated: a busy moment hits both
            tokens = {}
            for name, loop in loops.items():
                tokens[name], times = loop(session, io, prompt)
                decode[name] += times[1:]  # the prefill is step 0
            same &= len({tuple(t) for t in tokens.values()}) == 1
        medians = {name: statistics.median(times) / 1e3 for name, times in decode.items()}
        for name, value in medians.items():
            print(f"{name:24} decode step p50 {value:8.1f} us  ({len(decode[name])} steps)")
        plain, ours = medians.values()
        print(f"ratio {ours / plain:.3f} (goal <= 1.05); same tokens: {same}")
        server_ttft(path, io, Path(tmp), args.server_requests)
    return 0


def server_ttft(path: Path, io, out: Path, requests: int) -> None:
    """Server TTFT ours against LoadGen's, below and above the decoder's capacity."""
    import onnxruntime as ort

    from aaco_pipelines.llm.engine import Generator
    from aaco_pipelines.registry.workload import GenerationWorkload

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the worker
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    generator = Generator(session, io)
    prompts = np.random.default_rng(1).integers(0, 512, (4, PROMPT_TOKENS))
    generator.generate(prompts, OUTPUT_TOKENS)  # warm
    start = time.perf_counter()
    for _ in range(5):
        generator.generate(prompts, OUTPUT_TOKENS)
    capacity = 4 * 5 / (time.perf_counter() - start)  # requests/s in full batches of 4
    print(f"\nserver, batches of 4: capacity about {capacity:.0f} requests/s")
    print(f"{'load':>6} {'TTFT':5} {'ours, rank':>11} {'ours, linear':>13} {'LoadGen':>9} "
          f"{'ratio':>6} {'callback-stamped':>17}   gaps < 50 us (scheduled, callback)")  # fmt: skip
    for load in (0.5, 2.0):
        workload = GenerationWorkload(
            prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS, scenarios=("server",),
            requests=requests, min_duration_s=0.0, batch_size=4, target_qps=load * capacity,
        )  # fmt: skip
        _server_line(generator, workload, out / f"server_{load}", load)


def _server_line(generator, workload, folder: Path, load: float) -> None:
    from aaco_pipelines.collectors.llm_generation import parse_loadgen_summary
    from aaco_pipelines.llm import scenarios

    issued: list[np.ndarray] = []  # the issue callback's stamps: the arrivals before issue 24
    scheduled_arrivals = scenarios.scheduled_arrivals
    scenarios.scheduled_arrivals = lambda trace, stamps, *rest: (
        issued.append(stamps) or scheduled_arrivals(trace, stamps, *rest)
    )
    try:
        log = scenarios.run_scenario(generator, workload, "server", 512, 0, folder)
    finally:
        scenarios.scheduled_arrivals = scheduled_arrivals
    theirs = parse_loadgen_summary(folder / "mlperf_log_summary.txt")
    first = np.array(log.first_token_ns)
    arrivals = {"scheduled": np.array(log.arrival_ns), "callback": issued[0]}
    ttft = {way: np.sort(first - a) for way, a in arrivals.items()}
    gaps = {way: np.mean(np.diff(np.sort(a)) < 50_000) for way, a in arrivals.items()}
    for q in (50, 90):
        rank = int(len(first) * q / 100)
        ours, loadgen = ttft["scheduled"][rank], theirs[f"ttft_p{q}_ns"]
        print(f"{load:5.1f}x p{q:<3} {ours / 1e6:8.3f} ms {np.percentile(ttft['scheduled'], q) / 1e6:10.3f} ms "
              f"{loadgen / 1e6:6.3f} ms {ours / loadgen:6.3f} {ttft['callback'][rank] / 1e6:14.3f} ms"
              f"   {gaps['scheduled']:.1%}, {gaps['callback']:.1%} of {len(first) - 1}")  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())

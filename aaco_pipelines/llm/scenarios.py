"""Load scenarios, driven by MLPerf LoadGen: single stream, server and offline.

LoadGen decides when each query arrives (single stream: when the previous one is done; server:
Poisson arrivals at the target QPS; offline: all at once) and keeps its own log and summary of
the run in the folder given. The system under test here is one serving thread: it takes up to
`batch_size` waiting queries (only one in single stream), runs their prefill together, answers
LoadGen's first-token callback, decodes the batch to the end and answers the query. A query that
arrives while a batch runs waits: that wait is its queueing time.

Every query becomes a request row (arrival, prefill start, first token, last token) and every
step of every batch a step row, on the engine's clock. A query arrives when LoadGen scheduled
it, as LoadGen's own figures count it: read from its trace after the run (loadgen_trace), not
when the issue callback got the GIL.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aaco_pipelines.llm.engine import ColumnLog, Generator, StepLog, now_ns
from aaco_pipelines.llm.loadgen_trace import TRACE_FILE, scheduled_arrivals
from aaco_pipelines.registry.workload import GenerationWorkload

# LoadGen's scenario for each of ours.
LOADGEN_SCENARIOS = {"single_stream": "SingleStream", "server": "Server", "offline": "Offline"}
MAX_DISTINCT_PROMPTS = 64  # LoadGen's performance sample set: prompts it draws queries from


@dataclass
class RequestLog(ColumnLog):
    """Every request of a run."""

    request_id: list[int] = field(default_factory=list)
    sample_index: list[int] = field(default_factory=list)
    batch_id: list[int] = field(default_factory=list)
    batch_size: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    arrival_ns: list[int] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    first_token_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)


def make_prompts(count: int, length: int, vocab: int, seed: int) -> np.ndarray:
    """[count, length] token ids, the same for the same seed."""
    return np.random.default_rng(seed).integers(0, vocab, size=(count, length), dtype=np.int64)


def run_batch(
    generator: Generator, log: RequestLog, prompts: np.ndarray, output_tokens: int,
    queries: list[tuple[int, int, int]], on_first_token=None,
) -> np.ndarray:  # fmt: skip
    """Generate for one batch of queries (id, sample index, arrival) and log them; the tokens."""
    batch_id = generator.batches_run
    result = generator.generate(prompts, output_tokens, on_first_token)
    for request_id, sample_index, arrival in queries:
        log.add(
            request_id=request_id, sample_index=sample_index, batch_id=batch_id,
            batch_size=len(queries), prompt_tokens=prompts.shape[1], output_tokens=output_tokens,
            arrival_ns=arrival, start_ns=result.start_ns, first_token_ns=result.first_token_ns,
            end_ns=result.end_ns,
        )  # fmt: skip
    return result.tokens


class _ServingThread:
    """The system under test: LoadGen's queries in, batches through the generator, answers out."""

    def __init__(self, generator, prompts, workload: GenerationWorkload, max_batch: int, lg):
        self.generator, self.prompts, self.workload, self.lg = generator, prompts, workload, lg
        self.max_batch = max_batch
        # LoadGen reads each answer's tokens (int32) from here, during the call that answers
        self.answers = np.zeros((max_batch, max(workload.output_tokens, 1)), np.int32)
        self.address = self.answers.ctypes.data
        self.log = RequestLog()
        self.answered_ns: list[int] = []  # each logged request's answer, stamped as LoadGen does
        self.pending: deque[tuple[int, int, int]] = deque()
        self.wake = threading.Condition()
        self.stopping = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, name="aaco-serving", daemon=True)

    def issue(self, samples) -> None:  # called on LoadGen's issuing thread
        arrival = now_ns()  # issue order only: the scheduled arrival replaces it after the run
        with self.wake:
            self.pending.extend((s.id, s.index, arrival) for s in samples)
            self.wake.notify()

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.thread.join()
        if self.error is not None:
            raise self.error

    def _serve(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._answer(batch)
            except BaseException as exc:  # noqa: BLE001 - reported by stop(); LoadGen is told
                self.error = self.error or exc
                self._complete(batch, np.zeros((len(batch), 0), np.int64))

    def _next_batch(self) -> list[tuple[int, int, int]] | None:
        with self.wake:
            while not self.pending and not self.stopping:
                self.wake.wait()
            if not self.pending:
                return None
            return [self.pending.popleft() for _ in range(min(self.max_batch, len(self.pending)))]

    def _answer(self, batch: list[tuple[int, int, int]]) -> None:
        if self.error is not None:  # a failed run answers the rest at once, so LoadGen ends
            self._complete(batch, np.zeros((len(batch), 0), np.int64))
            return
        prompts = self.prompts[[index for _, index, _ in batch]]
        first = self._responses(batch, 1)  # ready before the batch runs: TTFT is not theirs
        tokens = run_batch(
            self.generator, self.log, prompts, self.workload.output_tokens, batch,
            on_first_token=lambda sampled: self._first_tokens(first, sampled),
        )  # fmt: skip
        self.answered_ns += [self._complete(batch, tokens)] * len(batch)

    def _first_tokens(self, responses: list, tokens: np.ndarray) -> None:
        self.answers[: len(tokens), 0] = tokens
        self.lg.FirstTokenComplete(responses)

    def _complete(self, batch, tokens: np.ndarray) -> int:
        """Answers the batch; when, on our clock, just before LoadGen stamps it on its own."""
        self.answers[: len(batch), : tokens.shape[1]] = tokens
        responses = self._responses(batch, tokens.shape[1])
        answered = now_ns()
        self.lg.QuerySamplesComplete(responses)
        return answered

    def _responses(self, batch, count: int) -> list:
        """One response a query: the first `count` tokens of its row of `answers`, whose
        address was taken once. Built at each first token from a fresh array's address (numpy's
        ctypes), they took about 15 of the 30 us between our stamp of a first token and
        LoadGen's (12 us now): time that LoadGen's TTFT counts and ours does not."""
        row, response = self.answers.strides[0], self.lg.QuerySampleResponse
        return [
            response(qid, self.address + i * row, count * 4, count)
            for i, (qid, _, _) in enumerate(batch)
        ]


def loadgen_settings(lg, scenario: str, workload: GenerationWorkload, seed: int):
    """LoadGen's TestSettings for one scenario of the workload (performance mode)."""
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, LOADGEN_SCENARIOS[scenario])
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_query_count = workload.requests
    settings.min_duration_ms = int(workload.min_duration_s * 1000)
    settings.use_token_latencies = True
    settings.ttft_latency = int(workload.slo.ttft_ms * 1e6)
    settings.tpot_latency = int(workload.slo.tpot_ms * 1e6)
    settings.server_target_qps = workload.target_qps
    # Offline issues max(min_query_count, expected QPS x min duration) queries at once.
    settings.offline_expected_qps = workload.requests / max(workload.min_duration_s, 1.0)
    settings.performance_sample_count_override = min(workload.requests, MAX_DISTINCT_PROMPTS)
    settings.schedule_rng_seed = settings.schedule_rng_seed + seed
    return settings


def run_scenario(
    generator: Generator, workload: GenerationWorkload, scenario: str, vocab: int, seed: int,
    log_dir: Path,
) -> RequestLog:  # fmt: skip
    """One LoadGen scenario run to the end; its requests (LoadGen's logs go to `log_dir`)."""
    import mlperf_loadgen as lg

    samples = min(workload.requests, MAX_DISTINCT_PROMPTS)
    prompts = make_prompts(samples, workload.prompt_tokens, vocab, seed)
    max_batch = 1 if scenario == "single_stream" else workload.batch_size
    serving = _ServingThread(generator, prompts, workload, max_batch, lg)
    log_dir.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir = str(log_dir)
    output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = output
    log_settings.enable_trace = True  # each query's scheduled time: its arrival
    sut = lg.ConstructSUT(serving.issue, serving.flush)
    qsl = lg.ConstructQSL(samples, samples, lambda indices: None, lambda indices: None)
    serving.thread.start()
    try:
        lg.StartTestWithLogSettings(
            sut, qsl, loadgen_settings(lg, scenario, workload, seed), log_settings, ""
        )
    finally:
        serving.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    log = serving.log
    log.arrival_ns = scheduled_arrivals(
        log_dir / TRACE_FILE, np.array(log.arrival_ns), np.array(log.sample_index),
        np.array(serving.answered_ns),
    ).tolist()  # fmt: skip
    return log


def run_curves(
    generator: Generator, workload: GenerationWorkload, vocab: int, seed: int
) -> RequestLog:
    """Batches straight through the generator (no queueing): at every batch size of the curve
    with prompt_tokens, and at every prompt length with batch 1, `repeats` times each after one
    batch of warm-up (a new shape's first run allocates)."""
    log = RequestLog()
    points = [(b, workload.prompt_tokens) for b in workload.curves.batch_sizes]
    points += [(1, p) for p in workload.curves.prompt_lengths]
    next_id = 0
    for batch, length in points:
        prompts = make_prompts(batch, length, vocab, seed + length)
        kept = generator.steps
        generator.steps = StepLog()  # the warm-up batch is not a point of the curve
        generator.generate(prompts, workload.output_tokens)
        generator.steps = kept
        for _ in range(workload.curves.repeats):
            arrival = now_ns()
            queries = [(next_id + i, i, arrival) for i in range(batch)]
            next_id += batch
            run_batch(generator, log, prompts, workload.output_tokens, queries)
    return log

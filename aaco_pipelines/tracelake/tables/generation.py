"""TraceLake tables of LLM generation sessions: their requests, batched steps and figures.

Computed from a generation session's evidence by collectors.llm_generation, per scenario run;
the breakdown per phase (prefill, decode) is an analysis result, phase_breakdown in analysis.py.
"""

from __future__ import annotations

import pyarrow as pa

from aaco_pipelines.tracelake.tables.columns import F64, I32, I64, STR

# --- LLM generation (schema v9): requests, steps and their figures, per scenario run ---------

# Every request of a generation session's runs: its arrival, first token and end.
REQUESTS = pa.schema(
    [
        ("session_id", STR),
        ("run", STR),  # single_stream | server | offline | curve | warmup | profiled
        ("request_id", I64),  # LoadGen's query id (a counter outside LoadGen)
        ("sample_index", I64),  # which prompt
        ("batch_id", I64),  # the batch it was generated in (generation_steps.batch_id)
        ("batch_size", I32),
        ("prompt_tokens", I32),
        ("output_tokens", I32),
        ("arrival_ns", I64),  # scheduled by LoadGen (its trace)
        ("start_ns", I64),  # its prefill started
        ("first_token_ns", I64),  # its first token sampled
        ("end_ns", I64),  # its last token sampled
        ("queue_ns", I64),  # start - arrival
        ("ttft_ns", I64),  # first_token - arrival
        ("tpot_ns", F64),  # (end - first_token) / (output_tokens - 1); null for one token
        ("e2e_ns", I64),  # end - arrival
    ]
)

# Every batched step of a generation session: its prefill, then one decode per token.
GENERATION_STEPS = pa.schema(
    [
        ("session_id", STR),
        ("run", STR),
        ("batch_id", I64),
        ("step", I32),  # 0 is the prefill
        ("phase", STR),  # prefill | decode
        ("batch_size", I32),
        ("input_tokens", I32),  # per sequence: the prompt, then 1
        ("kv_length", I32),  # the KV cache's length after the step
        ("kv_bytes", I64),  # the whole cache's size after the step
        ("start_ns", I64),
        ("end_ns", I64),  # its tokens sampled
        ("iteration", I32),  # the profiled pass's run index (kernel_events.iteration)
    ]
)

# A generation session's figures per run (and per curve point): TTFT, TPOT, goodput...
GENERATION_METRICS = pa.schema(
    [
        ("session_id", STR),
        ("run", STR),
        ("batch_size", I32),  # null: every request of the run (a curve point otherwise)
        ("prompt_tokens", I32),
        ("metric", STR),  # ttft_p50_ns, tpot_p99_ns, output_tokens_per_s, goodput_per_s, ...
        ("value", F64),
        ("unit", STR),
        ("source", STR),  # aaco (from the requests) | loadgen (its summary, a cross-check)
    ]
)

"""The generation loop: prefill, then one decode step per token, the KV cache kept on the device.

Each step is one `run_with_iobinding`: the previous step's `present` OrtValues are bound as this
step's `past` without a copy (on a GPU they never leave it); only the logits come back to the
host, for greedy sampling (argmax of the last position). Every step is timed on one clock, epoch
nanoseconds from a monotonic counter, so steps line up with telemetry and the kernel trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aaco_pipelines.llm.decoder_io import DecoderIO

# ONNX Runtime's device name for OrtValues of each provider (ROCm and MIGraphX builds allocate
# GPU memory under the "cuda" device name, as the CUDA build does).
PROVIDER_DEVICES = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
    "ROCMExecutionProvider": "cuda",
    "MIGraphXExecutionProvider": "cuda",
}

_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


def now_ns() -> int:
    """Epoch nanoseconds that never go backwards (a monotonic counter, offset once)."""
    return time.perf_counter_ns() + _EPOCH_OFFSET_NS


class ColumnLog:
    """Rows appended as columns (one list per field of the dataclass), read as a dict of lists:
    what a Parquet table of a run is written from."""

    def add(self, **row) -> None:
        for key, value in row.items():
            getattr(self, key).append(value)

    def to_dict(self) -> dict:
        return dict(vars(self))

    def __len__(self) -> int:
        return len(next(iter(vars(self).values())))


@dataclass
class StepLog(ColumnLog):
    """Every step of every batch: appended to by `Generator.generate`."""

    batch_id: list[int] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)  # prefill | decode
    batch_size: list[int] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)  # per sequence, this step
    kv_length: list[int] = field(default_factory=list)  # the presents' length after the step
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)  # the step's tokens sampled


@dataclass(frozen=True)
class Generated:
    tokens: np.ndarray  # [batch, output_tokens] int64
    start_ns: int  # prefill started
    first_token_ns: int  # prefill done and its token sampled
    end_ns: int  # last token sampled


class Generator:
    """Greedy generation with one ONNX Runtime session: on a GPU its KV cache stays bound on
    the device (one IOBinding a batch); on the CPU, where the host is the device, plain
    session.run, as a plain ONNX Runtime loop does (binding cost a third of a small decoder's
    decode step there)."""

    def __init__(self, session, io: DecoderIO, steps: StepLog | None = None):
        self.session = session
        self.io = io
        self.steps = steps if steps is not None else StepLog()
        provider = session.get_providers()[0]
        self.device = PROVIDER_DEVICES.get(provider, "cpu")
        self.output_names = [o.name for o in session.get_outputs()]
        # (past input, present output) of every layer, named once: not again at every step
        self.cache_names = [
            pair
            for layer in range(io.layers)
            for pair in zip(io.past_names(layer), io.present_names(layer), strict=True)
        ]
        self.batches_run = 0  # the next batch's id

    def generate(
        self,
        prompts: np.ndarray,
        output_tokens: int,
        on_first_token: Callable[[np.ndarray], None] | None = None,
    ) -> Generated:
        """`output_tokens` tokens for each row of `prompts` [batch, prompt_tokens]: the prefill
        samples the first, each decode step one more (no early stop: every request produces
        exactly `output_tokens`). `on_first_token` gets the first tokens as soon as they exist
        (a server answers them before decoding on)."""
        batch_id, self.batches_run = self.batches_run, self.batches_run + 1
        batch, prompt_len = prompts.shape
        tokens = np.empty((batch, output_tokens), dtype=np.int64)
        empty = np.zeros((batch, self.io.kv_heads, 0, self.io.head_dim), self.io.kv_dtype)
        past = {
            name: empty for layer in range(self.io.layers) for name in self.io.past_names(layer)
        }
        ids, length = prompts.astype(np.int64), 0
        # On a device, one binding a batch keeps the KV cache there; on the host, binding cost
        # a third of a small decoder's step (0.1-0.15 ms a token) that a plain loop never pays.
        binding = None if self.device == "cpu" else self.session.io_binding()
        for step in range(output_tokens):
            start = now_ns()
            logits, past = self._run(binding, ids, length, past)
            tokens[:, step] = logits[:, -1, :].argmax(axis=-1)
            end = now_ns()
            if step == 0 and on_first_token is not None:
                on_first_token(tokens[:, 0])  # before the bookkeeping: LoadGen's TTFT ends here
            length += ids.shape[1]
            self.steps.add(
                batch_id=batch_id, step=step, phase="prefill" if step == 0 else "decode",
                batch_size=batch, input_tokens=ids.shape[1], kv_length=self._kv_length(past),
                start_ns=start, end_ns=end,
            )  # fmt: skip
            if step == 0:
                first_start, first_end = start, end
            ids = tokens[:, step : step + 1]
        return Generated(tokens, first_start, first_end, end)

    def _run(self, binding, ids: np.ndarray, past_length: int, past: dict):
        """One step: (logits as numpy, the presents as the next step's past). On the host a
        plain session.run; on a device the batch's binding, the past bound as the previous
        step's OrtValues (kept alive by `past`), the outputs left there but the logits."""
        feeds = self._feeds(ids, past_length, past)
        if binding is None:
            values = dict(zip(self.output_names, self.session.run(None, feeds), strict=True))
            logits = values["logits"]
        else:
            for name, value in feeds.items():
                if isinstance(
                    value, np.ndarray
                ):  # the step's ids, mask, positions; a prefill's past
                    binding.bind_cpu_input(name, value)
                else:
                    binding.bind_ortvalue_input(name, value)
            # Bound again each step: a bound output keeps the last run's tensor, which ONNX
            # Runtime would write into, and the KV cache grows a position a step.
            binding.clear_binding_outputs()
            for name in self.output_names:
                binding.bind_output(name, "cpu" if name == "logits" else self.device)
            self.session.run_with_iobinding(binding)
            values = dict(zip(self.output_names, binding.get_outputs(), strict=True))
            logits = values["logits"].numpy()
        return logits, {past: values[present] for past, present in self.cache_names}

    def _feeds(self, ids: np.ndarray, past_length: int, past: dict) -> dict:
        batch, new = ids.shape
        feeds = {"input_ids": ids, **past}
        if self.io.has_attention_mask:
            feeds["attention_mask"] = np.ones((batch, past_length + new), np.int64)
        if self.io.has_position_ids:
            positions = np.arange(past_length, past_length + new, dtype=np.int64)
            feeds["position_ids"] = np.tile(positions, (batch, 1))  # 4x cheaper than broadcast
        return feeds

    def _kv_length(self, past: dict) -> int:
        value = past[self.io.past_names(0)[0]]
        return (value.shape if isinstance(value, np.ndarray) else value.shape())[2]

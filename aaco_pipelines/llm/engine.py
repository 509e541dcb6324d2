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
    """Greedy generation with one ONNX Runtime session and its KV cache bound on the device."""

    def __init__(self, session, io: DecoderIO, steps: StepLog | None = None):
        self.session = session
        self.io = io
        self.steps = steps if steps is not None else StepLog()
        provider = session.get_providers()[0]
        self.device = PROVIDER_DEVICES.get(provider, "cpu")
        self.output_names = [o.name for o in session.get_outputs()]
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
        for step in range(output_tokens):
            start = now_ns()
            logits, past = self._run(ids, length, past)
            tokens[:, step] = logits[:, -1, :].argmax(axis=-1)
            end = now_ns()
            length += ids.shape[1]
            self.steps.add(
                batch_id=batch_id, step=step, phase="prefill" if step == 0 else "decode",
                batch_size=batch, input_tokens=ids.shape[1], kv_length=self._kv_length(past),
                start_ns=start, end_ns=end,
            )  # fmt: skip
            if step == 0:
                first_start, first_end = start, end
                if on_first_token is not None:
                    on_first_token(tokens[:, 0])
            ids = tokens[:, step : step + 1]
        return Generated(tokens, first_start, first_end, end)

    def _run(self, ids: np.ndarray, past_length: int, past: dict) -> tuple[np.ndarray, dict]:
        """One step: the inputs bound (past as the previous OrtValues), the outputs left on the
        device except the logits."""
        batch, new = ids.shape
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        if self.io.has_attention_mask:
            binding.bind_cpu_input("attention_mask", np.ones((batch, past_length + new), np.int64))
        if self.io.has_position_ids:
            positions = np.arange(past_length, past_length + new, dtype=np.int64)
            binding.bind_cpu_input("position_ids", np.broadcast_to(positions, (batch, new)).copy())
        for name, value in past.items():
            if isinstance(value, np.ndarray):  # the empty past of a prefill
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in self.output_names:
            binding.bind_output(name, "cpu" if name == "logits" else self.device)
        self.session.run_with_iobinding(binding)
        values = dict(zip(self.output_names, binding.get_outputs(), strict=True))
        present = {
            past_name: values[present_name]
            for layer in range(self.io.layers)
            for past_name, present_name in zip(
                self.io.past_names(layer), self.io.present_names(layer), strict=True
            )
        }
        return values["logits"].numpy(), present

    def _kv_length(self, past: dict) -> int:
        return past[self.io.past_names(0)[0]].shape()[2]

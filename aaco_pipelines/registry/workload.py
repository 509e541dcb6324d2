"""A generation workload: what an LLM benchmark asks of a decoder, as the sidecar declares it.

    generation:
      prompt_tokens: 32            # tokens per prompt
      output_tokens: 16            # tokens generated per request (greedy, no early stop)
      scenarios: [single_stream, server, offline]   # MLPerf LoadGen's, run in this order
      requests: 32                 # queries per scenario (LoadGen's minimum query count)
      min_duration_s: 1.0          # and for at least this long (server, single stream)
      batch_size: 4                # most requests one batch may hold (server, offline)
      target_qps: 4.0              # server: Poisson arrivals at this rate
      slo: {ttft_ms: 500, tpot_ms: 100}   # goodput counts requests within both
      curves: {batch_sizes: [1, 2, 4], prompt_lengths: [16, 32, 64], repeats: 2}
      kv_cache: {layout: bnsh}     # past/present as [batch, kv_heads, sequence, head_dim]

Every key is optional: a decoder found in the graph (see `generation.decoder_io`) gets these
defaults. The first scenario is the session's headline (its drift series and gate). The sidecar
module parses and checks the section.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SCENARIOS = ("single_stream", "server", "offline")
KV_LAYOUTS = ("bnsh",)  # Optimum / ONNX Runtime GenAI: [batch, kv_heads, sequence, head_dim]


@dataclass(frozen=True)
class ServiceLevel:
    """The latency limits a request must meet to count towards goodput."""

    ttft_ms: float = 1000.0
    tpot_ms: float = 200.0


@dataclass(frozen=True)
class Curves:
    """Latency and throughput against batch size (at prompt_tokens) and against prompt length
    (at batch 1): `repeats` batches at each point."""

    batch_sizes: tuple[int, ...] = ()
    prompt_lengths: tuple[int, ...] = ()
    repeats: int = 2


@dataclass(frozen=True)
class GenerationWorkload:
    prompt_tokens: int = 32
    output_tokens: int = 16
    scenarios: tuple[str, ...] = ("single_stream",)
    requests: int = 32
    min_duration_s: float = 1.0
    batch_size: int = 4
    target_qps: float = 4.0
    slo: ServiceLevel = field(default_factory=ServiceLevel)
    curves: Curves = field(default_factory=Curves)
    kv_layout: str = "bnsh"

    @property
    def headline(self) -> str:
        """The scenario whose figures are the session's latency and drift series."""
        return self.scenarios[0]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["scenarios"] = list(self.scenarios)
        data["curves"] = {
            k: list(v) if isinstance(v, tuple) else v for k, v in data["curves"].items()
        }
        data["kv_cache"] = {"layout": data.pop("kv_layout")}
        return data

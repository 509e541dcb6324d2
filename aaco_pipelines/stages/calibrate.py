"""Calibrate (hardware_envelope): the target's measured peak GEMM FLOP/s and bandwidth.

Microbenchmarks through ONNX Runtime on the target's execution provider (analysis.envelope),
stored with the runtime fingerprint and the host's contention meanwhile; sessions are judged
against it (analysis.envelope_choice).
"""

from __future__ import annotations

from aaco_pipelines.analysis.envelope import HardwareEnvelope, measure_envelope
from aaco_pipelines.analysis.envelope_choice import save_envelope
from aaco_pipelines.execution.providers import host_default_providers
from aaco_pipelines.tracelake.store import TraceLake


def calibrate(lake: TraceLake, target: str) -> tuple[str, HardwareEnvelope]:
    """Measure the target's envelope now and store it; its id and the envelope."""
    envelope = measure_envelope(target, host_default_providers())
    return save_envelope(lake, envelope), envelope

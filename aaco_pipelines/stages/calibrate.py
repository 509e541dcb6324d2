"""Calibrate (hardware_envelope): the target's measured peak GEMM FLOP/s and bandwidth.

Microbenchmarks through ONNX Runtime on the target's execution provider (analysis.envelope),
stored with the runtime fingerprint and the host's contention meanwhile; sessions are judged
against it (analysis.envelope_choice).
"""

from __future__ import annotations

from aaco_pipelines.analysis.envelope import HardwareEnvelope
from aaco_pipelines.analysis.envelope_choice import measure_and_save
from aaco_pipelines.tracelake.store import TraceLake


def calibrate(lake: TraceLake, target: str) -> tuple[str, HardwareEnvelope]:
    """Measure the target's envelope now and store it; its id and the envelope."""
    return measure_and_save(lake, target)

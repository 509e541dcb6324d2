"""Which ONNX Runtime execution providers a session asks for.

A sidecar may name providers; otherwise the best one this host can really run is chosen:
MIGraphX (AMD's path forward, `onnxruntime-migraphx`), then ROCm (`onnxruntime-rocm`, removed
upstream after 1.22), then the CPU. `onnxruntime-rocm` lists ROCMExecutionProvider as available
even on a host without a GPU and then silently falls back to the CPU, so a GPU provider is only
chosen automatically when an AMD GPU is visible (/dev/kfd). The provider a session actually used
is always recorded from `InferenceSession.get_providers()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

GPU_PREFERENCE = ("MIGraphXExecutionProvider", "ROCMExecutionProvider")
CPU = "CPUExecutionProvider"


def amd_gpu_visible(kfd: Path = Path("/dev/kfd")) -> bool:
    """An AMD GPU is usable by ROCm here: the kernel fusion driver device exists."""
    return kfd.exists()


def choose_providers(
    requested: Sequence[str], available: Sequence[str], gpu_visible: bool
) -> list[str]:
    """The sidecar's providers when given (validated by the caller), else the best automatic
    choice, always ending with the CPU provider as ONNX Runtime's fallback."""
    if requested:
        return list(requested)
    if gpu_visible:
        for provider in GPU_PREFERENCE:
            if provider in available:
                return [provider, CPU]
    return [CPU]


def is_gpu_provider(provider: str) -> bool:
    return provider in GPU_PREFERENCE


def host_default_providers() -> list[str]:
    """The automatic choice on this host (what a model without a sidecar preference gets):
    the hardware envelope is measured with the same providers."""
    import onnxruntime as ort

    return choose_providers([], ort.get_available_providers(), amd_gpu_visible())

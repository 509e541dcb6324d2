"""The ONNX Runtime session each micro-benchmark runs in, its inputs and output bound once.

Every session is made alike (Runtime: the models' providers and thread count, all graph
optimizations). Inputs and outputs are bound once on the provider's device (IOBinding), so host
copies and output allocation are not timed. native_gemm_problem says whether a provider runs a
GEMM in its own data type: on CPU, ONNX Runtime 1.22 runs a float16 MatMul in float32 between
Casts it inserts, and has no bfloat16 MatMul; a GPU session must hold every node on the GPU
(session.disable_cpu_ep_fallback).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from aaco_pipelines.analysis.envelope.kernels import Kernel
from aaco_pipelines.errors import AacoInputError

# Providers whose tensors live on a GPU: IOBinding names that device "cuda" for CUDA and ROCm.
GPU_PROVIDERS = frozenset(
    {"ROCMExecutionProvider", "MIGraphXExecutionProvider", "CUDAExecutionProvider"}
)


@dataclass(frozen=True)
class Runtime:
    """How every microbenchmark session is made: the models' providers and thread count."""

    providers: tuple[str, ...]
    threads: int | None

    @property
    def device(self) -> str:
        return "cuda" if self.providers[0] in GPU_PROVIDERS else "cpu"


def check_providers(ort, providers: Sequence[str]) -> None:
    available = ort.get_available_providers()
    unknown = [p for p in providers if p not in available]
    if unknown:
        raise AacoInputError(
            f"execution providers {unknown} are not available in this ONNX Runtime "
            f"(available: {available})",
            fix="measure the envelope only on available providers",
        )


@dataclass(frozen=True)
class BoundSession:
    """A session with its inputs and output resident on the device, ready to run repeatedly.

    `values` keeps the bound OrtValues alive: a CPU OrtValue borrows its numpy buffer, and the
    binding alone does not keep that buffer from being freed.
    """

    session: object
    binding: object
    values: tuple

    def run(self) -> None:
        self.session.run_with_iobinding(self.binding)


def bound_session(ort, runtime: Runtime, model: onnx.ModelProto, feeds: dict) -> BoundSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if runtime.threads is not None:
        options.intra_op_num_threads = runtime.threads
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=list(runtime.providers)
    )
    binding = session.io_binding()
    values = []
    for name, array in feeds.items():
        values.append(_device_value(ort, array, model, name, runtime.device))
        binding.bind_ortvalue_input(name, values[-1])
    output = model.graph.output[0]
    shape = [d.dim_value for d in output.type.tensor_type.shape.dim]
    element = output.type.tensor_type.elem_type
    values.append(ort.OrtValue.ortvalue_from_shape_and_type(shape, element, runtime.device, 0))
    binding.bind_ortvalue_output(output.name, values[-1])
    binding.synchronize_inputs()
    return BoundSession(session, binding, tuple(values))


def _device_value(ort, array: np.ndarray, model: onnx.ModelProto, name: str, device: str):
    """An input on the device. bfloat16 has no numpy type: its bit patterns (uint16) are copied
    into a bfloat16 value allocated there."""
    declared = next(i for i in model.graph.input if i.name == name).type.tensor_type.elem_type
    if declared != TensorProto.BFLOAT16:
        return ort.OrtValue.ortvalue_from_numpy(array, device, 0)
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), declared, device, 0)
    value.update_inplace(array)
    return value


def native_gemm_problem(ort, runtime: Runtime, kernel: Kernel) -> str | None:
    """None when the provider runs the kernel's GEMM in its own data type; else why not (no
    kernel for it, a node falling back to the CPU provider, or Casts ONNX Runtime inserts to
    run it in float32). Checked on the smallest size."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    model = kernel.build(kernel.sizes[0]).SerializeToString()
    with tempfile.TemporaryDirectory(prefix="aaco-envelope-") as folder:
        optimized = Path(folder) / "optimized.onnx"
        if runtime.device == "cpu":
            options.optimized_model_filepath = str(optimized)
        else:
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            ort.InferenceSession(model, options, providers=list(runtime.providers))
        except Exception as exc:  # ONNX Runtime's NOT_IMPLEMENTED / Fail: no such kernel
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc)
            return f"{runtime.providers[0]} cannot run it ({reason})"
        if runtime.device == "cpu" and optimized.is_file():
            ops = {node.op_type for node in onnx.load(str(optimized)).graph.node}
            if "Cast" in ops:
                return (
                    f"{runtime.providers[0]} runs it in float32 between Casts ONNX Runtime "
                    "inserts: its nodes are judged against the fp32 peak"
                )
    return None

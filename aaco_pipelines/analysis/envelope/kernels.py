"""The micro-benchmark models an envelope is measured with, one Kernel each.

  MATMUL        one MatMul [n, n] x [n, n] (float32, weights an initializer as in real models,
                activations a runtime input so nothing folds): 2 n^3 FLOP per run
  GEMM_KERNELS  the same GEMM in the other data types: fp16 and bf16 MatMul, int8
                MatMulInteger (uint8 x int8 -> int32, 2 n^3 ops)
  ADD           elementwise Add of two float32 tensors: 3 x tensor bytes per run (two read, one
                written; as in STREAM, a CPU's write-allocate read of the output is not counted)

A Mul by a runtime-fed scalar was tried as a second streaming kernel and dropped: ONNX Runtime's
scalar-broadcast path ran at under half the Add rate on CPU, so it only spent budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GEMM_SIZES = (128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
# 16M float32 elements = 64 MiB per tensor: beyond the CPU's last-level cache; the larger sizes
# also clear a GPU's Infinity Cache (256 MiB on MI300X).
STREAM_SIZES = (1 << 24, 1 << 25, 1 << 26, 1 << 27)
OPSET = [helper.make_opsetid("", 17)]
IR_VERSION = 9  # ONNX Runtime 1.22 reads IR <= 10


@dataclass(frozen=True)
class Kernel:
    """One microbenchmark: its model and feeds per size, and what one run is worth."""

    name: str
    sizes: tuple[int, ...]
    build: Callable[[int], onnx.ModelProto]
    feeds: Callable[[int], dict[str, np.ndarray]]
    work: Callable[[int], float]  # FLOP or bytes per run
    feed_bytes: Callable[[int], int]  # host memory for inputs and output
    work_exponent: int  # run time grows as size ** work_exponent
    streams_memory: bool = False  # must not be cache-resident to count (sweep.CACHE_MARGIN)
    input_type: int = TensorProto.FLOAT  # ONNX element type of the fed inputs
    output_type: int = TensorProto.FLOAT
    dtype: str = "fp32"  # the roof data type it measures


def _model(
    nodes: list,
    inputs: list,
    output: tuple,
    initializers: list | None = None,
    output_type: int = TensorProto.FLOAT,
):
    name, shape = output
    graph = helper.make_graph(
        nodes,
        "aaco_envelope",
        inputs,
        [helper.make_tensor_value_info(name, output_type, shape)],
        initializers or [],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=IR_VERSION)


def _matmul_model(n: int) -> onnx.ModelProto:
    weights = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    return _model(
        [helper.make_node("MatMul", ["a", "w"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
        ("y", [n, n]),
        [numpy_helper.from_array(weights, "w")],
    )


def _add_model(n: int) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n]) for x in ("a", "b")]
    return _model([helper.make_node("Add", ["a", "b"], ["y"])], inputs, ("y", [n]))


def _filled(n: int, value: float) -> np.ndarray:
    """Touched memory: np.zeros would map the shared zero page and the reads would hit cache."""
    return np.full(n, value, dtype=np.float32)


MATMUL = Kernel(
    name="matmul",
    sizes=GEMM_SIZES,
    build=_matmul_model,
    feeds=lambda n: {"a": np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)},
    work=lambda n: 2.0 * n**3,
    feed_bytes=lambda n: 3 * 4 * n * n,
    work_exponent=3,
)


def _bfloat16_bits(array: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (truncated), the form ONNX and OrtValue take."""
    return (array.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _typed_matmul(dtype: str, onnx_type: int, values: Callable[[np.ndarray], np.ndarray]):
    """A MatMul kernel of another floating type: the fp32 one's shapes and work."""

    def build(n: int) -> onnx.ModelProto:
        weights = values(np.random.default_rng(1).standard_normal((n, n), dtype=np.float32))
        if onnx_type == TensorProto.BFLOAT16:
            tensor = helper.make_tensor("w", onnx_type, [n, n], weights.tobytes(), raw=True)
        else:
            tensor = numpy_helper.from_array(weights, "w")
        return _model(
            [helper.make_node("MatMul", ["a", "w"], ["y"])],
            [helper.make_tensor_value_info("a", onnx_type, [n, n])],
            ("y", [n, n]),
            [tensor],
            output_type=onnx_type,
        )

    return Kernel(
        name=f"matmul_{dtype}",
        sizes=GEMM_SIZES,
        build=build,
        feeds=lambda n: {
            "a": values(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32))
        },
        work=lambda n: 2.0 * n**3,
        feed_bytes=lambda n: 3 * 2 * n * n,
        work_exponent=3,
        input_type=onnx_type,
        output_type=onnx_type,
        dtype=dtype,
    )


def _matmul_integer_model(n: int) -> onnx.ModelProto:
    weights = np.random.default_rng(1).integers(-127, 128, (n, n), dtype=np.int8)
    return _model(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n])],
        ("y", [n, n]),
        [numpy_helper.from_array(weights, "w")],
        output_type=TensorProto.INT32,
    )


GEMM_KERNELS = {
    "fp16": _typed_matmul("fp16", TensorProto.FLOAT16, lambda x: x.astype(np.float16)),
    "bf16": _typed_matmul("bf16", TensorProto.BFLOAT16, _bfloat16_bits),
    "int8": Kernel(
        name="matmul_integer_int8",
        sizes=GEMM_SIZES,
        build=_matmul_integer_model,
        feeds=lambda n: {"a": np.random.default_rng(0).integers(0, 256, (n, n), dtype=np.uint8)},
        work=lambda n: 2.0 * n**3,  # multiply-adds as two operations, like FLOP
        feed_bytes=lambda n: (1 + 1 + 4) * n * n,
        work_exponent=3,
        input_type=TensorProto.UINT8,
        output_type=TensorProto.INT32,
        dtype="int8",
    ),
}
ADD = Kernel(
    name="add",
    sizes=STREAM_SIZES,
    build=_add_model,
    feeds=lambda n: {"a": _filled(n, 1.0), "b": _filled(n, 2.0)},
    work=lambda n: 3.0 * 4 * n,
    feed_bytes=lambda n: 3 * 4 * n,
    work_exponent=1,
    streams_memory=True,
)

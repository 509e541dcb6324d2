"""The measured hardware envelope of an execution target: peak GEMM FLOP/s and streaming bandwidth.

A roofline judged against datasheet peaks blames the model for what the runtime, the clocks or a
shared host cannot deliver. So the peaks are measured here, through ONNX Runtime on the same
execution provider the models use, with the same graph optimizations:

  gemm_flops        one MatMul [n, n] x [n, n] (float32, weights an initializer as in real
                    models, activations a runtime input so nothing folds): 2 n^3 FLOP per run;
                    the fp32 roof, and the roof of nodes whose data type has no peak
  dtype_gemm        the same GEMM in every other data type the provider runs natively: fp16
                    and bf16 MatMul, int8 MatMulInteger (uint8 x int8 -> int32, 2 n^3 ops).
                    A type is measured only if the provider runs it as itself: on CPU, ONNX
                    Runtime 1.22 runs a float16 MatMul in float32 between Casts it inserts, and
                    has no bfloat16 MatMul, so this CPU measures fp32 and int8 only; a GPU
                    session must hold every node on the GPU (session.disable_cpu_ep_fallback).
                    Why a type was skipped is kept in dtype_notes
  memory_bandwidth  elementwise Add of two large float32 tensors, every size beyond the
                    last-level cache: 3 x tensor bytes per run (two read, one written; as in
                    STREAM, a CPU's write-allocate read of the output is not counted)
  cache_bandwidth   CPU only: the same Add at working sets inside each data cache level sysfs
                    lists (L2 and up, instruction caches skipped: cpu_cache_levels), half then a
                    quarter of the capacity the sessions' threads fill (a per-core cache: its
                    size x threads, one instance per CPUs sharing it; a shared cache: its
                    size), always above the next smaller level's capacity. Measured before the
                    DRAM sweep, with CACHE_BUDGET_SHARE of the streaming budget

An elementwise op whose tensors sit in L2 or the last-level cache legitimately moves bytes
faster than DRAM; judged against the DRAM slope it would sit above its roof. So the roofline is
hierarchical: memory_ceilings() lists (level, capacity, B/s) from the smallest cache to DRAM,
and ceiling_for(bytes_moved) is the ceiling of the smallest level whose capacity holds an op's
bytes (DRAM when they are unknown or larger than every cache). A cache ceiling measured below a
larger level's or DRAM's is noise: it is raised to that one, and its sweep entries say which
(clamped_to).

On CPU the envelope also keeps the host's theoretical fp32 peak (analysis.envelope.host_peak: cores x
clock x SIMD lanes x 2 FMA units x 2, from /proc/cpuinfo and sysfs; the cores are the sessions'
threads, at most the physical cores they may use), and describe() says what share of it the
measured fp32 GEMM reached.

A streaming size whose working set (two inputs and the output) is under CACHE_MARGIN times the
last-level cache is marked cache_resident: it measures the cache, not memory, so it neither ends
the sweep nor sets the peak (unless no size cleared the cache; then the largest one does). The
CPU's cache size comes from sysfs; on a GPU the largest AMD Instinct cache (MI300X's 256 MiB
Infinity Cache) is assumed.

A Mul by a runtime-fed scalar was tried as a second streaming kernel and dropped: ONNX Runtime's
scalar-broadcast path ran at under half the Add rate on CPU, so it only spent budget.

fp32 gets half the GEMM budget when other types are measured, and they share the rest.

A GPU provider's envelope names the GPU (device: gfx architecture, product name, CUs, clock,
from the KFD topology; analysis.envelope.datasheets.local_gpu), so that a trace ingested from that GPU
model finds it. An envelope can also come from a datasheet (datasheet_envelope): source says
which, and reference names the document.

Each size is swept upward until the median stops improving by SATURATION_GAIN for PATIENCE
sizes in a row (one noisy size on a shared host must not end the sweep early) or the time
budget is spent. Per size: WARMUP_RUNS runs, then `repeats` measurements, each timing enough
runs to last MIN_MEASUREMENT_S. Inputs and outputs are bound once on the provider's device
(IOBinding), so host copies and output allocation are not timed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aaco_pipelines.analysis.envelope.datasheets import (
    FALLBACK_DTYPE,
    GpuAgent,
    local_gpu,
    match_datasheet,
)
from aaco_pipelines.analysis.envelope.host_peak import (
    TheoreticalPeak,
    physical_cores,
    theoretical_cpu_peak,
)
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.environment import capture_environment, runtime_fingerprint
from aaco_pipelines.execution.host_sampler import OtherWork
from aaco_pipelines.foundation.address_space import address_space_left

GEMM_SIZES = (128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
# 16M float32 elements = 64 MiB per tensor: beyond the CPU's last-level cache; the larger sizes
# also clear a GPU's Infinity Cache (256 MiB on MI300X).
STREAM_SIZES = (1 << 24, 1 << 25, 1 << 26, 1 << 27)
CACHE_MARGIN = 2  # a working set this many times the last-level cache streams from memory
GPU_LAST_LEVEL_CACHE_BYTES = 256 << 20  # MI300X Infinity Cache, the largest on AMD Instinct
_CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
SATURATION_GAIN = 0.05
PATIENCE = 2
WARMUP_RUNS = 2
MIN_MEASUREMENT_S = 0.05
GEMM_BUDGET_SHARE = 0.5  # the rest, plus what GEMM leaves unused, goes to the streaming sweep
CACHE_BUDGET_SHARE = 0.2  # of the streaming budget: the cache ceilings, before the DRAM sweep
# Working sets measured per cache level, as shares of its capacity, the first always: half
# leaves room for the code, the stack and whatever else the cores touch meanwhile.
CACHE_FILL = (0.5, 0.25)
FP32_GEMM_SHARE = 0.5  # of the GEMM budget, when other data types are measured too
GEMM_DTYPES = ("fp16", "bf16", "int8")  # measured besides fp32 where the provider runs them
HOST_MEMORY_SHARE = 0.5  # never build feeds larger than this share of available host memory
# An envelope measured while other processes took more of the host's CPU time than this is
# contended: a quiet 2-core host measured 0-3 %, two busy loops 68 %.
CONTENDED_SHARE = 0.2
OPSET = [helper.make_opsetid("", 17)]
IR_VERSION = 9  # ONNX Runtime 1.22 reads IR <= 10
# Providers whose tensors live on a GPU: IOBinding names that device "cuda" for CUDA and ROCm.
GPU_PROVIDERS = frozenset(
    {"ROCMExecutionProvider", "MIGraphXExecutionProvider", "CUDAExecutionProvider"}
)


@dataclass(frozen=True)
class ResourcePeak:
    resource: str  # "gemm_flops" | "memory_bandwidth" | "cache_bandwidth"
    peak: float  # median of the repeats at the best size
    spread_low: float  # min of those repeats
    spread_high: float  # max of those repeats
    unit: str  # "FLOP/s" | "B/s"
    sweep: list[dict]  # every size tried, in order: kernel, size, median, low, high, repeats, ...

    def peak_entry(self) -> dict:
        """The sweep entry the peak came from (its kernel and size: where it saturated)."""
        return _best_entry(self.sweep)


@dataclass(frozen=True)
class HardwareEnvelope:
    target: str
    providers: list[str]  # what the microbenchmark sessions actually ran on
    runtime_fingerprint: str
    measured_at_ns: int
    gemm: ResourcePeak  # fp32: the roof of fp32 nodes and of nodes whose type has no peak
    bandwidth: ResourcePeak
    source: str = "measured"  # "measured" | "datasheet"
    device: dict | None = None  # the GPU: arch, product_name, compute_units, max_clock_mhz
    dtype_gemm: dict[str, ResourcePeak] = field(default_factory=dict)  # fp16, bf16, int8, ...
    dtype_notes: dict[str, str] = field(default_factory=dict)  # why a data type has no peak
    reference: dict | None = None  # datasheet: product, url, white paper, how matched, notes
    # Share of the host's CPU time other processes took while this was measured (None: not
    # known, a datasheet or an envelope stored before it was recorded).
    host_contention: float | None = None
    # The host CPU's theoretical fp32 peak (host_peak.TheoreticalPeak as a dict): None on a GPU,
    # from a datasheet, where cpuinfo does not say, or stored before it was recorded.
    theoretical: dict | None = None
    # Bandwidth of the CPU's data caches ("L2", "L3"): the same Add at a working set inside each
    # level; each sweep entry has working_set_bytes and capacity_bytes. Empty on a measured GPU.
    # From a GPU datasheet: the published "L2" and "LDS" peaks (datasheets.LEVEL_SOURCES),
    # without a sweep, so without a capacity: memory_ceilings (which places an op by the bytes
    # it moves) leaves them out, and the counted roofline judges each level's counted bytes
    # against them (analysis.kernels.diagnosis).
    cache_bandwidth: dict[str, ResourcePeak] = field(default_factory=dict)

    @property
    def contended(self) -> bool:
        """Measured while other work held the host's CPUs: its peaks may be too low."""
        return self.host_contention is not None and self.host_contention > CONTENDED_SHARE

    def ridge_point(self) -> float:
        """FLOP per byte where the roofline bends: gemm.peak / bandwidth.peak."""
        return self.gemm.peak / self.bandwidth.peak

    def gemm_peaks(self) -> dict[str, float]:
        """GEMM peak per data type, fp32 first."""
        return {FALLBACK_DTYPE: self.gemm.peak, **{d: p.peak for d, p in self.dtype_gemm.items()}}

    def roof_dtype(self, dtype: str | None) -> str:
        """The data type whose peak is a node's roof: its own, else fp32."""
        return dtype if dtype in self.dtype_gemm else FALLBACK_DTYPE

    def for_dtype(self, dtype: str | None) -> HardwareEnvelope:
        """This envelope with the GEMM roof of `dtype` (fp32 when it has none)."""
        roof = self.roof_dtype(dtype)
        if roof == FALLBACK_DTYPE:
            return self
        return dataclasses.replace(self, gemm=self.dtype_gemm[roof])

    def theoretical_share(self) -> float | None:
        """The measured fp32 GEMM peak as a share of the host's theoretical fp32 peak; None where
        that is not known (or on the envelope for_dtype made for another type's roof)."""
        flops = (self.theoretical or {}).get("flops_per_s")
        if not flops or flops <= 0 or self.gemm in self.dtype_gemm.values():
            return None
        return self.gemm.peak / flops

    def memory_ceilings(self) -> list[tuple[str, float | None, float]]:
        """(level, capacity in bytes, peak B/s) of each bandwidth ceiling, the smallest (fastest)
        cache first and ("DRAM", None, bandwidth.peak) last. A level's ceiling is never below
        a larger level's or DRAM's (data that fits a cache also fits every larger one, so a
        lower measurement is noise): it is raised to theirs."""
        levels = []
        for name, peak in self.cache_bandwidth.items():
            capacity = peak.peak_entry().get("capacity_bytes") if peak.sweep else None
            if capacity:
                levels.append((name, float(capacity), peak.peak))
        ceilings = [("DRAM", None, self.bandwidth.peak)]
        floor = self.bandwidth.peak
        for name, capacity, peak in sorted(levels, key=lambda level: -level[1]):
            floor = max(floor, peak)
            ceilings.insert(0, (name, capacity, floor))
        return ceilings

    def ceiling_for(self, bytes_moved: float | None) -> tuple[str, float]:
        """(level, peak B/s) an op moving `bytes_moved` is judged against: the smallest level
        whose capacity holds them; DRAM when unknown or larger than every cache."""
        for name, capacity, peak in self.memory_ceilings():
            if capacity is not None and bytes_moved is not None and bytes_moved <= capacity:
                return name, peak
        return "DRAM", self.bandwidth.peak

    def describe(self) -> str:
        """Where the peaks come from, in a few words."""
        device = self.device or {}
        name = device.get("product_name") or device.get("arch")
        if self.source == "datasheet":
            ref = self.reference or {}
            return f"datasheet of the {ref.get('product', name)} ({device.get('arch')})"
        on = ", ".join(self.providers) or self.target
        described = f"measured on {on}" + (f" ({name}, {device.get('arch')})" if name else "")
        share = self.theoretical_share()
        if share is not None:
            theoretical = self.theoretical
            flops = f"{theoretical['flops_per_s']:.2g}".replace("e+", "e")
            try:
                formula = f" ({TheoreticalPeak.from_dict(theoretical).formula()})"
            except (TypeError, ValueError):  # stored by another version: the number only
                formula = ""
            described += f", fp32 GEMM at {share:.0%} of the host's theoretical {flops} FLOP/s"
            described += formula
        if self.contended:
            described += (
                f", while other processes took {self.host_contention:.0%} of the host's CPU "
                "time: its peaks may be low"
            )
        return described

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> HardwareEnvelope:
        return cls(
            target=d["target"],
            providers=list(d["providers"]),
            runtime_fingerprint=d["runtime_fingerprint"],
            measured_at_ns=int(d["measured_at_ns"]),
            gemm=ResourcePeak(**d["gemm"]),
            bandwidth=ResourcePeak(**d["bandwidth"]),
            source=d.get("source", "measured"),
            device=d.get("device"),
            dtype_gemm={k: ResourcePeak(**v) for k, v in (d.get("dtype_gemm") or {}).items()},
            dtype_notes=dict(d.get("dtype_notes") or {}),
            reference=d.get("reference"),
            host_contention=d.get("host_contention"),
            theoretical=d.get("theoretical"),
            cache_bandwidth={
                k: ResourcePeak(**v) for k, v in (d.get("cache_bandwidth") or {}).items()
            },
        )


def datasheet_envelope(agent: GpuAgent, now_ns: int | None = None) -> HardwareEnvelope | None:
    """The published peaks of the GPU an agent is (analysis.envelope.datasheets), scaled to the agent's
    share of the product; None when its architecture has no datasheet."""
    match = match_datasheet(agent)
    if match is None:
        return None
    sheet = match.sheet
    peaks = {d: p * match.compute_scale for d, p in sheet.peaks().items()}
    bandwidth = sheet.memory_bandwidth_bytes_per_s * match.bandwidth_scale

    def published(resource: str, value: float, unit: str) -> ResourcePeak:
        return ResourcePeak(resource, value, value, value, unit, [])

    missing = [d for d in GEMM_DTYPES + ("fp64", "tf32", "fp8") if d not in peaks]
    levels = {
        level: published("cache_bandwidth", peak * match.compute_scale, "B/s")
        for level, peak in sheet.level_bandwidths().items()
    }
    return HardwareEnvelope(
        target=agent.arch or "unknown",
        providers=[],
        runtime_fingerprint="datasheet",
        measured_at_ns=time.time_ns() if now_ns is None else now_ns,
        gemm=published("gemm_flops", peaks["fp32"], "FLOP/s"),
        bandwidth=published("memory_bandwidth", bandwidth, "B/s"),
        source="datasheet",
        device=agent.to_dict(),
        dtype_gemm={
            d: published("gemm_flops", p, "FLOP/s")
            for d, p in peaks.items()
            if d not in (FALLBACK_DTYPE, "fp32_vector")
        },
        dtype_notes={d: f"the {sheet.product} has no {d} peak" for d in missing},
        cache_bandwidth=levels,
        reference={
            "product": sheet.product,
            "url": sheet.url,
            "rates": sheet.white_paper[0],
            "rates_url": sheet.white_paper[1] or None,
            "matched_by": match.how,
            "compute_scale": match.compute_scale,
            "bandwidth_scale": match.bandwidth_scale,
            "peak_clock_mhz": sheet.peak_clock_mhz,
            "compute_units": sheet.compute_units,
            "memory": sheet.memory,
            "fp32_vector_flops_per_s": peaks.get("fp32_vector"),
            "notes": list(match.notes),
            "basis": "dense peaks (no sparsity) at the peak engine clock: FLOP/clock/CU x CUs x "
            "clock; matrix rates where the GPU has matrix cores",
        },
    )


# --- Kernels ---------------------------------------------------------------------------------


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
    streams_memory: bool = False  # must not be cache-resident to count (see CACHE_MARGIN)
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

# --- Sessions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    """How every microbenchmark session is made: the models' providers and thread count."""

    providers: tuple[str, ...]
    threads: int | None

    @property
    def device(self) -> str:
        return "cuda" if self.providers[0] in GPU_PROVIDERS else "cpu"


def _check_providers(ort, providers: Sequence[str]) -> None:
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


def _bound_session(ort, runtime: Runtime, model: onnx.ModelProto, feeds: dict) -> BoundSession:
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


# --- Timing ----------------------------------------------------------------------------------


def _seconds_per_run(run: Callable[[], None], iterations: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(iterations):
        run()
    return (time.perf_counter_ns() - start) * 1e-9 / iterations


def _measure_size(ort, runtime: Runtime, kernel: Kernel, size: int, repeats: int):
    """One sweep entry (rates in work per second over `repeats` measurements) and the providers.

    `setup_s` is everything but the runs (model, feeds, session): it predicts the next size's cost.
    """
    started = time.perf_counter()
    bound = _bound_session(ort, runtime, kernel.build(size), kernel.feeds(size))
    setup_s = time.perf_counter() - started
    run_s = min(_seconds_per_run(bound.run, 1) for _ in range(WARMUP_RUNS))
    iterations = max(1, math.ceil(MIN_MEASUREMENT_S / run_s))
    rates = np.array(
        [kernel.work(size) / _seconds_per_run(bound.run, iterations) for _ in range(repeats)]
    )
    entry = {
        "kernel": kernel.name,
        "size": size,
        "median": float(np.median(rates)),
        "low": float(rates.min()),
        "high": float(rates.max()),
        "repeats": repeats,
        "iterations": iterations,
        "seconds_per_run": run_s,
        "setup_s": setup_s,
        "wall_s": time.perf_counter() - started,
    }
    return entry, bound.session.get_providers()


def _predicted_seconds(kernel: Kernel, last: dict, size: int, repeats: int) -> float:
    """Wall time of the next size, scaled from the last: set-up, warm-up, timed repeats."""
    data_ratio = kernel.feed_bytes(size) / kernel.feed_bytes(last["size"])
    run_s = last["seconds_per_run"] * (size / last["size"]) ** kernel.work_exponent
    return (
        last["setup_s"] * data_ratio + WARMUP_RUNS * run_s + repeats * max(MIN_MEASUREMENT_S, run_s)
    )


def _stalled(medians: list[float]) -> bool:
    """True when each of the last PATIENCE sizes failed to beat every earlier one by the gain."""
    if len(medians) <= PATIENCE:
        return False
    best_before = max(medians[:-PATIENCE])
    return all(m < best_before * (1 + SATURATION_GAIN) for m in medians[-PATIENCE:])


def _sweep(ort, runtime: Runtime, kernel: Kernel, repeats: int, deadline: float):
    """Sizes upward until saturated, out of budget or out of host memory; always one size."""
    sweep: list[dict] = []
    providers: list[str] = []
    memory_cap = _available_host_bytes() * HOST_MEMORY_SHARE
    cache = last_level_cache_bytes(runtime.device) if kernel.streams_memory else None
    for size in kernel.sizes:
        if sweep and (
            _stalled([entry["median"] for entry in sweep if not entry["cache_resident"]])
            or kernel.feed_bytes(size) > memory_cap
            or time.perf_counter() + _predicted_seconds(kernel, sweep[-1], size, repeats) > deadline
        ):
            break
        entry, providers = _measure_size(ort, runtime, kernel, size, repeats)
        entry["cache_resident"] = (
            cache is not None and kernel.feed_bytes(size) < CACHE_MARGIN * cache
        )
        sweep.append(entry)
    return sweep, providers


def last_level_cache_bytes(device: str) -> int | None:
    """The largest cache a streaming kernel could sit in: the CPU's highest-level cache from
    sysfs (None where sysfs does not say), or GPU_LAST_LEVEL_CACHE_BYTES on a GPU."""
    if device != "cpu":
        return GPU_LAST_LEVEL_CACHE_BYTES
    caches = []
    for index in _CPU_CACHES.glob("index*"):
        try:
            level = int((index / "level").read_text())
            size = _cache_size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        caches.append((level, size))
    return max(caches)[1] if caches else None


def _cache_size_bytes(text: str) -> int:
    """sysfs cache sizes: "49152K", "48M", or plain bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@dataclass(frozen=True)
class CacheLevel:
    """One CPU data cache level, as cpu0's sysfs describes it."""

    name: str  # "L2", "L3"
    size_bytes: int  # one instance
    shared_cpus: int  # logical CPUs sharing one instance (shared_cpu_list)

    def capacity_bytes(self, threads: int) -> int:
        """What the data of `threads` threads can fill: one instance per shared_cpus threads
        (a per-core cache holds one thread's share, a cache shared by all of them its size)."""
        return self.size_bytes * math.ceil(max(threads, 1) / self.shared_cpus)


def cpu_cache_levels() -> list[CacheLevel]:
    """The CPU data caches an elementwise kernel's working set can sit in, smallest level
    first: level 2 and above (L1 holds too little to time one session run in), instruction
    caches skipped, and any level whose size or sharing sysfs does not say."""
    levels: dict[int, CacheLevel] = {}
    for index in _CPU_CACHES.glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _cache_size_bytes((index / "size").read_text())
            shared = len(_cpu_list((index / "shared_cpu_list").read_text()))
        except (OSError, ValueError):
            continue
        if level < 2 or kind == "Instruction" or size <= 0 or shared <= 0:
            continue
        if level not in levels or size > levels[level].size_bytes:
            levels[level] = CacheLevel(f"L{level}", size, shared)
    return [levels[level] for level in sorted(levels)]


def _cpu_list(text: str) -> set[int]:
    """A sysfs CPU list ("0-3,8,10-11") as CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _cache_sizes(capacity: int, smaller_capacity: int) -> tuple[int, ...]:
    """ADD sizes (elements) whose working sets fill CACHE_FILL of `capacity` but exceed the next
    smaller level's capacity (else they would measure that level); midway between when none
    does. Whole 64-byte lines of float32."""
    sets = [capacity * f for f in CACHE_FILL if capacity * f > smaller_capacity]
    sets = sets or [(capacity + smaller_capacity) / 2]
    sizes = (max(16, int(s // ADD.feed_bytes(1)) // 16 * 16) for s in sets)
    return tuple(dict.fromkeys(sizes))


def _cache_sweeps(
    ort, runtime: Runtime, threads: int, repeats: int, deadline: float
) -> dict[str, list[dict]]:
    """The Add at working sets inside each CPU cache level, largest first (half its capacity);
    each level's first size always, the others while the deadline allows."""
    sweeps: dict[str, list[dict]] = {}
    smaller = 0
    for level in cpu_cache_levels():
        capacity = level.capacity_bytes(threads)
        sweep: list[dict] = []
        for size in _cache_sizes(capacity, smaller):
            if sweep and (
                time.perf_counter() + _predicted_seconds(ADD, sweep[-1], size, repeats) > deadline
            ):
                break
            entry, _ = _measure_size(ort, runtime, ADD, size, repeats)
            entry.update(
                working_set_bytes=ADD.feed_bytes(size),
                capacity_bytes=capacity,
                level_bytes=level.size_bytes,
                shared_cpus=level.shared_cpus,
                threads=threads,
            )
            sweep.append(entry)
        sweeps[level.name] = sweep
        smaller = capacity
    return sweeps


def _cache_peaks(sweeps: dict[str, list[dict]], dram: ResourcePeak) -> dict[str, ResourcePeak]:
    """Each level's peak. An entry slower than a larger level's ceiling or DRAM's records which
    one it fell below (clamped_to): memory_ceilings raises such a level's ceiling to it."""
    floor_name, floor = "DRAM", dram.peak
    peaks = {}
    for name in reversed(list(sweeps)):  # the largest level first
        if not sweeps[name]:
            continue
        for entry in sweeps[name]:
            entry["clamped_to"] = floor_name if entry["median"] < floor else None
        peaks[name] = _peak("cache_bandwidth", "B/s", sweeps[name])
        if peaks[name].peak > floor:
            floor_name, floor = name, peaks[name].peak
    return {name: peaks[name] for name in sweeps if name in peaks}


def _threads_used(runtime: Runtime) -> int:
    """Intra-op threads of the sessions: those asked for, else the CPUs this process may use."""
    return runtime.threads or len(os.sched_getaffinity(0))


def _theoretical(runtime: Runtime) -> dict | None:
    """The host's theoretical fp32 peak on the cores the sessions' threads ran on."""
    if runtime.device != "cpu":
        return None
    cores = min(_threads_used(runtime), physical_cores(os.sched_getaffinity(0)))
    peak = theoretical_cpu_peak(cores)
    return peak.to_dict() if peak else None


def _available_host_bytes() -> int:
    """Available host memory, or what this process may still map under `ulimit -v` if less."""
    import psutil

    available = int(psutil.virtual_memory().available)
    left = address_space_left()
    return available if left is None else min(available, left)


def _peak(resource: str, unit: str, sweep: list[dict]) -> ResourcePeak:
    best = _best_entry(sweep)
    return ResourcePeak(resource, best["median"], best["low"], best["high"], unit, sweep)


def _best_entry(sweep: list[dict]) -> dict:
    """The fastest size that measured the resource itself; the largest size when every one was
    cache-resident (then the peak is an upper bound on memory bandwidth)."""
    counted = [entry for entry in sweep if not entry.get("cache_resident")] or sweep[-1:]
    return max(counted, key=lambda entry: entry["median"])


def measure_envelope(
    target: str = "cpu",
    providers: Sequence[str] | None = None,
    *,
    repeats: int = 5,
    budget_s: float = 20.0,
    threads: int | None = None,
    dtypes: Sequence[str] | None = None,
) -> HardwareEnvelope:
    """Measure peak GEMM FLOP/s (fp32, and each of `dtypes` the provider runs natively; default
    GEMM_DTYPES) and streaming bandwidth of `target` within about `budget_s`.

    GEMM gets GEMM_BUDGET_SHARE of the budget (fp32 half of it when other types are measured,
    they the rest in turn), streaming what is left: on CPU, the cache ceilings CACHE_BUDGET_SHARE
    of it first, then DRAM. A sweep (and each cache level) always measures its first size, so
    even a tiny budget yields an envelope, with short sweeps. The share of the host's CPU time
    that other processes took meanwhile is kept with it (`host_contention`): above
    CONTENDED_SHARE the peaks are suspect, and envelope_choice.current_envelope measures again later.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    runtime = Runtime(tuple(providers or ["CPUExecutionProvider"]), threads)
    _check_providers(ort, runtime.providers)
    measured_at_ns = time.time_ns()
    other_work = OtherWork()
    start = time.perf_counter()
    gemm_deadline = start + budget_s * GEMM_BUDGET_SHARE
    others, notes = [], {}
    for dtype in GEMM_DTYPES if dtypes is None else dtypes:
        if dtype not in GEMM_KERNELS:
            raise AacoInputError(
                f"no GEMM microbenchmark for data type {dtype!r}",
                fix=f"choose among {', '.join(GEMM_KERNELS)}",
            )
        problem = native_gemm_problem(ort, runtime, GEMM_KERNELS[dtype])
        if problem is None:
            others.append(dtype)
        else:
            notes[dtype] = problem
    fp32_share = FP32_GEMM_SHARE if others else 1.0
    fp32_deadline = start + (gemm_deadline - start) * fp32_share
    gemm_sweep, used = _sweep(ort, runtime, MATMUL, repeats, fp32_deadline)
    dtype_gemm = {}
    for position, dtype in enumerate(others):
        now = time.perf_counter()
        deadline = now + max(gemm_deadline - now, 0.0) / (len(others) - position)
        sweep, _ = _sweep(ort, runtime, GEMM_KERNELS[dtype], repeats, deadline)
        dtype_gemm[dtype] = _peak("gemm_flops", "FLOP/s", sweep)
    cache_sweeps = {}
    if runtime.device == "cpu":
        now = time.perf_counter()
        cache_deadline = now + max(start + budget_s - now, 0.0) * CACHE_BUDGET_SHARE
        cache_sweeps = _cache_sweeps(ort, runtime, _threads_used(runtime), repeats, cache_deadline)
    stream_sweep, _ = _sweep(ort, runtime, ADD, repeats, start + budget_s)
    bandwidth = _peak("memory_bandwidth", "B/s", stream_sweep)
    device = _measured_device(runtime)
    return HardwareEnvelope(
        target=target,
        providers=list(used),
        runtime_fingerprint=runtime_fingerprint(capture_environment()),
        measured_at_ns=measured_at_ns,
        gemm=_peak("gemm_flops", "FLOP/s", gemm_sweep),
        bandwidth=bandwidth,
        source="measured",
        device=device.to_dict() if device else None,
        dtype_gemm=dtype_gemm,
        dtype_notes=notes,
        host_contention=other_work.share(),
        theoretical=_theoretical(runtime),
        cache_bandwidth=_cache_peaks(cache_sweeps, bandwidth),
    )


def _measured_device(runtime: Runtime) -> GpuAgent | None:
    """The GPU a GPU provider ran on: device 0 of those visible (HIP_VISIBLE_DEVICES or
    ROCR_VISIBLE_DEVICES name its index among all GPUs); None on CPU or where KFD says nothing."""
    if runtime.device == "cpu":
        return None
    index = 0
    for variable in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        first = os.environ.get(variable, "").split(",")[0].strip()
        if first.isdigit():
            index = int(first)
            break
    return local_gpu(index)

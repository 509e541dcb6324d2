"""The measured hardware envelope of an execution target: peak GEMM FLOP/s and streaming bandwidth.

A roofline judged against datasheet peaks blames the model for what the runtime, the clocks or a
shared host cannot deliver. So the peaks are measured here, through ONNX Runtime on the same
execution provider the models use, with the same graph optimizations:

  gemm_flops        one MatMul [n, n] x [n, n] (float32, weights an initializer as in real
                    models, activations a runtime input so nothing folds): 2 n^3 FLOP per run
  memory_bandwidth  elementwise Add of two large float32 tensors, every size beyond the
                    last-level cache: 3 x tensor bytes per run (two read, one written; as in
                    STREAM, a CPU's write-allocate read of the output is not counted)

A streaming size whose working set (two inputs and the output) is under CACHE_MARGIN times the
last-level cache is marked cache_resident: it measures the cache, not memory, so it neither ends
the sweep nor sets the peak (unless no size cleared the cache; then the largest one does). The
CPU's cache size comes from sysfs; on a GPU the largest AMD Instinct cache (MI300X's 256 MiB
Infinity Cache) is assumed.

A Mul by a runtime-fed scalar was tried as a second streaming kernel and dropped: ONNX Runtime's
scalar-broadcast path ran at under half the Add rate on CPU, so it only spent budget.

Each size is swept upward until the median stops improving by SATURATION_GAIN for PATIENCE
sizes in a row (one noisy size on a shared host must not end the sweep early) or the time
budget is spent. Per size: WARMUP_RUNS runs, then `repeats` measurements, each timing enough
runs to last MIN_MEASUREMENT_S. Inputs and outputs are bound once on the provider's device
(IOBinding), so host copies and output allocation are not timed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aaco_pipelines.address_space import address_space_left
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.environment import capture_environment, runtime_fingerprint

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
HOST_MEMORY_SHARE = 0.5  # never build feeds larger than this share of available host memory
OPSET = [helper.make_opsetid("", 17)]
IR_VERSION = 9  # ONNX Runtime 1.22 reads IR <= 10
# Providers whose tensors live on a GPU: IOBinding names that device "cuda" for CUDA and ROCm.
GPU_PROVIDERS = frozenset(
    {"ROCMExecutionProvider", "MIGraphXExecutionProvider", "CUDAExecutionProvider"}
)


@dataclass(frozen=True)
class ResourcePeak:
    resource: str  # "gemm_flops" | "memory_bandwidth"
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
    gemm: ResourcePeak
    bandwidth: ResourcePeak

    def ridge_point(self) -> float:
        """FLOP per byte where the roofline bends: gemm.peak / bandwidth.peak."""
        return self.gemm.peak / self.bandwidth.peak

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


def _model(nodes: list, inputs: list, output: tuple, initializers: list | None = None):
    name, shape = output
    graph = helper.make_graph(
        nodes,
        "aaco_envelope",
        inputs,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)],
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
        values.append(ort.OrtValue.ortvalue_from_numpy(array, runtime.device, 0))
        binding.bind_ortvalue_input(name, values[-1])
    output = model.graph.output[0]
    shape = [d.dim_value for d in output.type.tensor_type.shape.dim]
    values.append(ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, runtime.device, 0))
    binding.bind_ortvalue_output(output.name, values[-1])
    binding.synchronize_inputs()
    return BoundSession(session, binding, tuple(values))


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
) -> HardwareEnvelope:
    """Measure peak GEMM FLOP/s and streaming bandwidth of `target` within about `budget_s`.

    GEMM gets GEMM_BUDGET_SHARE of the budget, streaming what is left. A sweep always measures
    its first size, so even a tiny budget yields an envelope, with a short sweep.
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    runtime = Runtime(tuple(providers or ["CPUExecutionProvider"]), threads)
    _check_providers(ort, runtime.providers)
    measured_at_ns = time.time_ns()
    start = time.perf_counter()
    gemm_sweep, used = _sweep(ort, runtime, MATMUL, repeats, start + budget_s * GEMM_BUDGET_SHARE)
    stream_sweep, _ = _sweep(ort, runtime, ADD, repeats, start + budget_s)
    return HardwareEnvelope(
        target=target,
        providers=list(used),
        runtime_fingerprint=runtime_fingerprint(capture_environment()),
        measured_at_ns=measured_at_ns,
        gemm=_peak("gemm_flops", "FLOP/s", gemm_sweep),
        bandwidth=_peak("memory_bandwidth", "B/s", stream_sweep),
    )

"""A rocprofv3 trace simulator: GPU kernel and HIP API traces for a real ONNX Runtime profile.

GPU attribution cannot be validated on a host without a GPU, and a real GPU trace has no ground
truth. So this writes what rocprofv3 would have written had each node window of a real
(CPU) ONNX Runtime profile launched GPU kernels, and keeps the truth:

- every node window launches 1..n kernels (hipLaunchKernel, or hipExtModuleLaunchKernel for
  Tensile/MIOpen code objects), the launch calls one after another inside the window, on the
  node's thread; a node keeps its kernel count, names and stream in every iteration, as a
  compiled model does;
- the profiler's host clock is the profile's clock minus `clock_offset_ns`, each launch
  timestamp off by up to ±`jitter_ns` more;
- a kernel becomes ready a launch latency after its launch and runs in submission order on its
  node's stream (one of `streams` queues), so it can run long after its node's window ended;
- with probability `fused_fraction` a node and the next one on its thread are ONE kernel,
  launched from the first (truth: both nodes, time split by their windows);
- kernel time is the node's window time x U(0.3, 1), split across its kernels.

Output files follow rocprofv3's CSV format (ROCm 6.4+/7.x): `<pid>_kernel_trace.csv` with the
22-column header of a real trace and `<pid>_hip_api_trace.csv` with the documented 7-column
header. Both timestamps use the profiler's host clock, as rocprofiler-sdk writes them. Kernels
are generated with numpy a chunk at a time and written with Arrow's CSV writer, so ten million
kernels take bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.schema import KERNEL_EVENTS, conform

KERNEL_TRACE_HEADER = (
    "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id",
    "Kernel_Name", "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size",
    "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X",
    "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
)  # fmt: skip
HIP_API_TRACE_HEADER = (
    "Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id", "Start_Timestamp",
    "End_Timestamp",
)  # fmt: skip

CHUNK_KERNELS = 1_000_000  # kernels generated and written at a time
AGENT = "Agent 2"  # rocprofv3 numbers CPU agents first; the first GPU of a 2-socket host


@dataclass(frozen=True)
class SimulationSettings:
    """The simulated GPU host: clock offset (profiler host clock = profile clock - offset),
    launch-to-start latency range, ± timestamp jitter, queues, share of node pairs fused into
    one kernel, kernels per unfused node (range), random seed."""

    clock_offset_ns: int = 3_217_000_000_123
    launch_latency_ns: tuple[int, int] = (4_000, 30_000)
    jitter_ns: int = 2_000
    streams: int = 2
    fused_fraction: float = 0.2
    kernels_per_node: tuple[int, int] = (1, 3)
    seed: int = 0


@dataclass(frozen=True)
class SimulatedTruth:
    """Where the simulated traces are, and the truth per kernel (`truth`: Parquet with
    correlation_id, node, fused_node, node_share, iteration, duration_ns)."""

    kernel_trace: Path
    hip_api_trace: Path
    truth: Path
    node_events: Path  # the Node (and model_run) rows the traces belong to, KERNEL_EVENTS
    clock_offset_ns: int
    kernels: int

    def table(self) -> pa.Table:
        return pq.read_table(self.truth)


# --- Kernel catalogue -----------------------------------------------------------------------

_GEMM = (
    "Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_GRVW4_K1",
    "Cijk_Ailk_Bljk_SB_MT128x128x16_MI32x32x2x1_SN_1LDSB1_GRVW4_K1",
    "Cijk_Alik_Bljk_SB_MT32x32x32_MI16x16x4x1_SN_1LDSB0_GRVW2_K1",
)
_CONV = (
    "naive_conv_fwd_nchw_float_double_float",
    "igemm_fwd_gtcx3_nhwc_fp32_bx0_ex1_bt64x64x16_wt32x32x2_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64",
    "MIOpenBatchNormFwdInferSpatialEst",
)
_BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Sum", "Where"}
_POOL = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
_COPY = {"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost", "Identity"}
_MODULE_LAUNCH = "hipExtModuleLaunchKernel"  # Tensile, hipBLASLt and MIOpen code objects


def kernel_choices(op_type: str) -> tuple[tuple[str, ...], str]:
    """Plausible kernel symbols for an op type, and the HIP function that launches them."""
    if op_type in {"MatMul", "Gemm", "FusedGemm", "FusedMatMul", "MatMulInteger"}:
        return _GEMM, _MODULE_LAUNCH
    if "Conv" in op_type:
        return _CONV, _MODULE_LAUNCH
    if op_type in _POOL:
        return ("MIOpenPoolingFwdNCHW", "naive_pooling_fwd_nchw_float"), _MODULE_LAUNCH
    if op_type in _COPY:
        return ("__amd_rocclr_copyBuffer",), "hipMemcpyAsync"
    if op_type in _BINARY:
        return (
            f"onnxruntime::rocm::_BinaryElementWiseSimple<float, OP_{op_type}, 256, 4>",
            f"onnxruntime::rocm::_BinaryElementWiseRhsPerChannelBatchN<float, OP_{op_type}>",
        ), "hipLaunchKernel"
    if op_type.startswith("Reduce") or op_type in {"Softmax", "LayerNormalization"}:
        return (
            f"onnxruntime::rocm::reduce_matrix_columns_kernel<float, {op_type}, 256>",
            "onnxruntime::rocm::softmax_warp_forward<float, float, float, 8, false>",
        ), "hipLaunchKernel"
    return (
        f"onnxruntime::rocm::_UnaryElementWise<float, OP_{op_type}, 256, 4>",
    ), "hipLaunchKernel"


# --- The per-node plan: what each node launches, identical in every iteration ---------------


@dataclass(frozen=True)
class _Plan:
    """Per distinct node: what it launches (index = the node's name code)."""

    names: list[str]
    counts: np.ndarray  # kernels per node when not fused
    stream: np.ndarray
    kernel: np.ndarray  # (node, slot) -> catalogue index
    fused_kernel: np.ndarray  # catalogue index of the node's fused kernel (-1: not a head)
    catalogue: list[str]  # kernel symbols
    functions: list[str]  # per catalogue entry, the HIP function launching it
    resources: np.ndarray  # per catalogue entry: LDS, VGPRs, accum VGPRs, SGPRs, workgroup
    blocks: np.ndarray  # (node, slot) -> workgroups in the grid


def _plan(names: list[str], op_of_name: list[str], successor: np.ndarray, settings, rng) -> _Plan:
    n = len(op_of_name)
    lo, hi = settings.kernels_per_node
    width = max(hi, 1)
    catalogue: dict[str, int] = {}
    functions: list[str] = []

    def entry(symbol: str, function: str) -> int:
        if symbol not in catalogue:
            catalogue[symbol] = len(catalogue)
            functions.append(function)
        return catalogue[symbol]

    kernel = np.zeros((n, width), dtype=np.int64)
    for i, op in enumerate(op_of_name):  # per distinct node, not per kernel
        symbols, function = kernel_choices(op)
        picks = rng.integers(0, len(symbols), width)
        kernel[i] = [entry(symbols[p], function) for p in picks]
    head = _fusion_heads(successor, settings.fused_fraction, rng)
    fused_kernel = np.full(n, -1, dtype=np.int64)
    for i in np.flatnonzero(head):
        symbols, function = kernel_choices(op_of_name[i])
        tail = op_of_name[successor[i]]
        fused_kernel[i] = entry(f"{symbols[0]}_fused_{tail.lower()}", function)
    resources = np.column_stack(
        [
            rng.choice([0, 4096, 16384, 65536], len(catalogue)),  # LDS bytes
            rng.choice([16, 32, 64, 128, 256], len(catalogue)),  # VGPRs
            rng.choice([0, 0, 64], len(catalogue)),  # accumulation VGPRs
            rng.choice([16, 32, 64, 96, 112], len(catalogue)),  # SGPRs
            rng.choice([64, 128, 256], len(catalogue)),  # workgroup size
        ]
    )
    return _Plan(
        names=names,
        counts=rng.integers(lo, hi + 1, n),
        stream=rng.integers(0, max(settings.streams, 1), n),
        kernel=kernel,
        fused_kernel=fused_kernel,
        catalogue=list(catalogue),
        functions=functions,
        resources=resources,
        blocks=rng.integers(1, 4096, (n, width)),
    )


def _fusion_heads(successor: np.ndarray, fraction: float, rng) -> np.ndarray:
    """Nodes fused with their successor: drawn with `fraction`, never two pairs sharing a node
    (a node drawn right after a drawn head is dropped)."""
    drawn = (rng.random(len(successor)) < fraction) & (successor >= 0)
    follows_head = np.zeros(len(successor), dtype=bool)
    follows_head[successor[drawn]] = True
    return drawn & ~follows_head


# --- The node block: the windows that repeat ------------------------------------------------


@dataclass
class _Block:
    start: np.ndarray  # int64, ORT clock
    duration: np.ndarray
    thread: np.ndarray
    iteration: np.ndarray  # 0.. within the block
    name: np.ndarray  # index into names
    next: np.ndarray  # the next window on the same thread in the same iteration (-1: none)
    fused: np.ndarray  # the window launches one kernel for itself and the next window
    absorbed: np.ndarray  # the window's work is in the previous window's fused kernel
    names: list[str]
    ops: list[str]
    runs: np.ndarray  # (iteration, start, duration) of model_run spans
    span: int


def _block(node_events: pa.Table, settings: SimulationSettings, rng) -> tuple[_Block, _Plan]:
    nodes = node_events.filter(pc.equal(node_events["category"], "Node"))
    nodes = nodes.sort_by([("start_ns", "ascending")])
    encoded = pc.dictionary_encode(nodes["node_name"].combine_chunks())
    names = encoded.dictionary.to_pylist()
    name = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    start = nodes["start_ns"].to_numpy().astype(np.int64)
    duration = nodes["duration_ns"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    thread = nodes["thread_id"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    raw_iteration = nodes["iteration"].fill_null(-(2**31)).to_numpy(zero_copy_only=False)
    iteration = np.unique(raw_iteration, return_inverse=True)[1].astype(np.int64)
    first = np.unique(name, return_index=True)[1]
    ops = [op or "Unknown" for op in pc.take(nodes["op_type"], first).to_pylist()]

    # The next window on the same thread in the same iteration.
    order = np.lexsort((start, iteration, thread))
    same = np.r_[
        (thread[order][1:] == thread[order][:-1]) & (iteration[order][1:] == iteration[order][:-1]),
        False,
    ]
    next_window = np.full(len(start), -1, dtype=np.int64)
    next_window[order[:-1][same[:-1]]] = order[1:][same[:-1]]
    successor = np.full(len(names), -1, dtype=np.int64)
    has_next = next_window[first] >= 0
    successor[has_next] = name[next_window[first][has_next]]

    plan = _plan(names, ops, successor, settings, rng)
    head = plan.fused_kernel[name] >= 0
    nxt = np.maximum(next_window, 0)
    fused = head & (next_window >= 0) & (name[nxt] == successor[name])
    absorbed = np.zeros(len(start), dtype=bool)
    absorbed[next_window[fused]] = True
    runs = _runs(node_events, raw_iteration, iteration, start, duration)
    span = int(max((start + duration).max(), (runs[:, 1] + runs[:, 2]).max()) - start.min())
    block = _Block(
        start, duration, thread, iteration, name, next_window, fused, absorbed, names, ops, runs,
        span,
    )  # fmt: skip
    return block, plan


def _runs(node_events, raw_iteration, iteration, start, duration) -> np.ndarray:
    """(iteration, start, duration) of each block iteration: its model_run span when the
    profile has one, else the extent of its windows."""
    ends = start + duration
    count = int(iteration.max()) + 1
    lo = np.full(count, np.iinfo(np.int64).max)
    hi = np.full(count, np.iinfo(np.int64).min)
    np.minimum.at(lo, iteration, start)
    np.maximum.at(hi, iteration, ends)
    runs = node_events.filter(pc.equal(node_events["event_name"], "model_run"))
    if runs.num_rows:
        known = dict(zip(runs["iteration"].to_pylist(), runs["start_ns"].to_pylist(), strict=True))
        ends_of = dict(
            zip(runs["iteration"].to_pylist(), runs["duration_ns"].to_pylist(), strict=True)
        )
        for raw, it in zip(*np.unique(raw_iteration, return_index=True), strict=True):
            if int(raw) in known:
                lo[iteration[it]] = known[int(raw)]
                hi[iteration[it]] = known[int(raw)] + ends_of[int(raw)]
    return np.column_stack([np.arange(count), lo, hi - lo])


# --- Generation -----------------------------------------------------------------------------


@dataclass
class _State:
    next_correlation: int
    next_dispatch: int = 1
    stream_free: np.ndarray | None = None  # host-clock time each stream's queue drains


def _kernels(block: _Block, plan: _Plan, repeats: np.ndarray, shifts: np.ndarray, settings,
             state: _State, rng) -> dict[str, np.ndarray]:  # fmt: skip
    """All launches and kernels of `repeats` copies of the block, in submission order."""
    n_block = len(block.start)
    event = np.tile(np.arange(n_block), len(repeats))
    shift = np.repeat(shifts, n_block)
    name = block.name[event]
    fused = block.fused[event]
    counts = np.tile(_kernel_counts(block, plan), len(repeats))
    window = np.repeat(np.arange(len(event)), counts)
    slot = np.arange(len(window)) - np.repeat(np.cumsum(counts) - counts, counts)
    ev, nm = event[window], name[window]
    k = len(window)

    # Launch calls, one after another inside the window (ORT clock), then onto the host clock.
    per = counts[window]
    slot_ns = block.duration[ev] / per
    api_ns = np.minimum(slot_ns * 0.4, rng.uniform(1_500, 6_000, k))
    within = np.round(slot_ns * slot + rng.random(k) * (slot_ns - api_ns)).astype(np.int64)
    launch = block.start[ev] + shift[window] + within  # integer ns: floats lose them at 1e18
    true_host = launch - settings.clock_offset_ns
    jitter = rng.integers(-settings.jitter_ns, settings.jitter_ns + 1, k)
    host = true_host + jitter

    # Kernel durations: the node's (pair's) window time x U(0.3, 1), split over its kernels.
    partner = np.maximum(block.next[ev], 0)
    pair_ns = block.duration[ev] + np.where(fused[window], block.duration[partner], 0)
    weight = rng.uniform(0.5, 1.5, k)
    weight_sum = np.bincount(window, weights=weight, minlength=len(event))[window]
    gpu_ns = pair_ns * rng.uniform(0.3, 1.0, len(event))[window] * weight / weight_sum
    duration = np.maximum(np.round(gpu_ns), 1_000).astype(np.int64)

    order = np.argsort(launch, kind="stable")  # submission order
    lat_lo, lat_hi = settings.launch_latency_ns
    ready = (true_host + rng.integers(lat_lo, lat_hi + 1, k))[order]
    stream = plan.stream[nm][order]
    start = _queue(ready, duration[order], stream, state)
    catalogue = np.where(fused[window], plan.fused_kernel[nm], plan.kernel[nm, slot])[order]
    share = np.where(
        fused[window], block.duration[ev] / np.maximum(pair_ns, 1), 1.0
    )  # the head's part of a fused kernel
    n_iterations = int(block.iteration.max()) + 1
    return {
        "correlation_id": state.next_correlation + np.arange(k, dtype=np.int64),
        "dispatch_id": state.next_dispatch + np.arange(k, dtype=np.int64),
        "catalogue": catalogue,
        "stream": stream,
        "thread": block.thread[ev][order],
        "api_start": host[order],
        "api_end": (host + np.round(api_ns).astype(np.int64))[order],
        "start": start,
        "end": start + duration[order],
        "blocks": plan.blocks[nm, np.minimum(slot, plan.blocks.shape[1] - 1)][order],
        "node": nm[order],
        "fused_node": np.where(fused[window], block.name[partner], -1)[order],
        "node_share": share[order],
        "iteration": (np.repeat(repeats, n_block)[window] * n_iterations + block.iteration[ev])[
            order
        ],
    }


def _kernel_counts(block: _Block, plan: _Plan) -> np.ndarray:
    """Kernels each block window launches: none when absorbed, one fused kernel for a head."""
    return np.where(block.absorbed, 0, np.where(block.fused, 1, plan.counts[block.name]))


def _queue(ready: np.ndarray, duration: np.ndarray, stream: np.ndarray, state: _State):
    """Kernel start times on in-order queues: a kernel starts when it is ready and its stream's
    previous kernel has ended. end_k = C_k + max(free, max_{j<=k}(ready_j - C_{j-1})) with C the
    running sum of durations: one running maximum per stream, no loop over kernels."""
    start = np.empty_like(ready)
    for s in np.unique(stream):
        idx = np.flatnonzero(stream == s)
        total = np.cumsum(duration[idx])
        slack = np.maximum.accumulate(ready[idx] - (total - duration[idx]))
        end = total + np.maximum(slack, state.stream_free[s])
        start[idx] = end - duration[idx]
        state.stream_free[s] = end[-1]
    return start


# --- Writing --------------------------------------------------------------------------------


def _dictionary(codes: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(values))


def _kernel_rows(g: dict, plan: _Plan, pid: int) -> pa.Table:
    k = len(g["correlation_id"])
    res = plan.resources[g["catalogue"]]
    zeros, ones = np.zeros(k, np.int64), np.ones(k, np.int64)
    queue = g["stream"] + 1
    columns = [
        _dictionary(np.zeros(k), ["KERNEL_DISPATCH"]),
        _dictionary(np.zeros(k), [AGENT]),
        queue,
        queue,
        g["thread"],
        g["dispatch_id"],
        g["catalogue"] + 1,
        _dictionary(g["catalogue"], plan.catalogue),
        g["correlation_id"],
        g["start"],
        g["end"],
        res[:, 0],
        zeros,
        res[:, 1],
        res[:, 2],
        res[:, 3],
        res[:, 4],
        ones,
        ones,
        res[:, 4] * g["blocks"],
        ones,
        ones,
    ]
    return pa.Table.from_arrays([pa.array(c) for c in columns], names=list(KERNEL_TRACE_HEADER))


def _api_rows(g: dict, plan: _Plan, pid: int) -> pa.Table:
    k = len(g["correlation_id"])
    functions = sorted(set(plan.functions))
    function = np.searchsorted(functions, np.asarray(plan.functions))[g["catalogue"]]
    columns = [
        _dictionary(np.zeros(k), ["HIP_RUNTIME_API"]),
        _dictionary(function, functions),
        np.full(k, pid, np.int64),
        g["thread"],
        g["correlation_id"],
        g["api_start"],
        g["api_end"],
    ]
    return pa.Table.from_arrays([pa.array(c) for c in columns], names=list(HIP_API_TRACE_HEADER))


def _init_calls(first_launch_ns: int, thread: int, pid: int) -> pa.Table:
    """The API calls before the first launch (device query, allocations): no kernels of theirs."""
    functions = ["hipGetDevicePropertiesR0600", "hipGetDeviceCount", *["hipMalloc"] * 6]
    t0 = first_launch_ns - 2_000_000
    starts = t0 + 20_000 * np.arange(len(functions))
    return pa.table(
        {
            "Domain": ["HIP_RUNTIME_API"] * len(functions),
            "Function": functions,
            "Process_Id": [pid] * len(functions),
            "Thread_Id": [thread] * len(functions),
            "Correlation_Id": np.arange(1, len(functions) + 1),
            "Start_Timestamp": starts,
            "End_Timestamp": starts + 8_000,
        }
    )


_TRUTH = pa.schema(
    [
        ("correlation_id", pa.int64()),
        ("node", pa.dictionary(pa.int32(), pa.string())),
        ("fused_node", pa.dictionary(pa.int32(), pa.string())),  # null unless fused
        ("node_share", pa.float64()),  # of the kernel's time that is `node`'s
        ("iteration", pa.int32()),
        ("duration_ns", pa.int64()),
    ]
)


def _truth_rows(g: dict, plan: _Plan) -> pa.Table:
    fused = g["fused_node"]
    names = pa.array(plan.names)
    return pa.Table.from_arrays(
        [
            pa.array(g["correlation_id"]),
            _dictionary(g["node"], plan.names),
            pa.DictionaryArray.from_arrays(
                pa.array(np.maximum(fused, 0).astype(np.int32), mask=fused < 0), names
            ),
            pa.array(g["node_share"]),
            pa.array(g["iteration"].astype(np.int32)),
            pa.array(g["end"] - g["start"]),
        ],
        schema=_TRUTH,
    )


def _node_rows(block: _Block, plan: _Plan, repeats, shifts) -> pa.Table:
    """The repeated windows (and model_run spans) as KERNEL_EVENTS rows."""
    n_it = int(block.iteration.max()) + 1
    event = np.tile(np.arange(len(block.start)), len(repeats))
    run = np.tile(np.arange(len(block.runs)), len(repeats))
    name = block.name[event]
    nodes = pa.table(
        {
            "source": pa.repeat("simulated", len(event)),
            "category": pa.repeat("Node", len(event)),
            "iteration": np.repeat(repeats, len(block.start)) * n_it + block.iteration[event],
            "event_name": _dictionary(name, [f"{n}_kernel_time" for n in plan.names]),
            "node_name": _dictionary(name, plan.names),
            "op_type": _dictionary(name, block.ops),
            "start_ns": block.start[event] + np.repeat(shifts, len(block.start)),
            "duration_ns": block.duration[event],
            "thread_id": block.thread[event],
        }
    )
    runs = pa.table(
        {
            "source": pa.repeat("simulated", len(run)),
            "category": pa.repeat("Session", len(run)),
            "iteration": np.repeat(repeats, len(block.runs)) * n_it + block.runs[run, 0],
            "event_name": pa.repeat("model_run", len(run)),
            "start_ns": block.runs[run, 1] + np.repeat(shifts, len(block.runs)),
            "duration_ns": block.runs[run, 2],
        }
    )
    return pa.concat_tables([conform(nodes, KERNEL_EVENTS), conform(runs, KERNEL_EVENTS)])


class _Writers:
    """The four output files, appended to a chunk at a time."""

    def __init__(self, out_dir: Path, pid: int):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.kernel_trace = out_dir / f"{pid}_kernel_trace.csv"
        self.hip_api_trace = out_dir / f"{pid}_hip_api_trace.csv"
        self.truth = out_dir / "truth.parquet"
        self.node_events = out_dir / "node_events.parquet"
        self._open: dict[str, object] = {}

    def write(self, kind: str, table: pa.Table) -> None:
        if kind not in self._open:
            path = getattr(self, kind)
            if path.suffix == ".csv":
                self._open[kind] = pacsv.CSVWriter(path, _plain(table.schema))
            else:
                self._open[kind] = pq.ParquetWriter(path, table.schema)
        writer = self._open[kind]
        writer.write_table(table.cast(_plain(table.schema)) if kind.endswith("trace") else table)

    def close(self) -> None:
        for writer in self._open.values():
            writer.close()


def _plain(schema: pa.Schema) -> pa.Schema:
    """The CSV schema: dictionary columns written as their strings."""
    return pa.schema(
        [pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
         for f in schema]
    )  # fmt: skip


def _simulate(
    block: _Block, plan: _Plan, chunks: Iterator[tuple[np.ndarray, np.ndarray]], limit: int,
    out_dir: Path, settings: SimulationSettings, pid: int, rng,
) -> SimulatedTruth:  # fmt: skip
    writers = _Writers(out_dir, pid)
    state = _State(next_correlation=9, stream_free=np.full(max(settings.streams, 1), -(2**62)))
    written = 0
    try:
        for repeats, shifts in chunks:
            g = _kernels(block, plan, repeats, shifts, settings, state, rng)
            keep = min(len(g["correlation_id"]), limit - written)
            g = {key: value[:keep] for key, value in g.items()}
            if written == 0 and keep:
                first = int(g["api_start"].min())
                writers.write("hip_api_trace", _init_calls(first, int(g["thread"][0]), pid))
            writers.write("kernel_trace", _kernel_rows(g, plan, pid))
            writers.write("hip_api_trace", _api_rows(g, plan, pid))
            writers.write("truth", _truth_rows(g, plan))
            writers.write("node_events", _node_rows(block, plan, repeats, shifts))
            state.next_correlation += keep
            state.next_dispatch += keep
            written += keep
            if written >= limit:
                break
    finally:
        writers.close()
    return SimulatedTruth(
        kernel_trace=writers.kernel_trace,
        hip_api_trace=writers.hip_api_trace,
        truth=writers.truth,
        node_events=writers.node_events,
        clock_offset_ns=settings.clock_offset_ns,
        kernels=written,
    )


def simulate_rocprof_traces(
    node_events: pa.Table,
    out_dir: Path,
    settings: SimulationSettings = SimulationSettings(),
    pid: int = 4242,
) -> SimulatedTruth:
    """rocprofv3 kernel and HIP API traces for the Node windows of one real profile."""
    rng = np.random.default_rng(settings.seed)
    block, plan = _block(node_events, settings, rng)
    chunks = iter([(np.zeros(1, np.int64), np.zeros(1, np.int64))])
    return _simulate(block, plan, chunks, np.iinfo(np.int64).max, out_dir, settings, pid, rng)


def simulate_at_scale(
    n_kernels: int,
    out_dir: Path,
    settings: SimulationSettings = SimulationSettings(),
    node_pattern: pa.Table | None = None,
    pid: int = 4242,
) -> SimulatedTruth:
    """Exactly `n_kernels` kernels: the pattern's iterations repeated, each repeat after the
    previous one ended plus an idle gap of 20-200 µs (so repeats are not exactly periodic, as
    real iterations are not), written `CHUNK_KERNELS` at a time."""
    rng = np.random.default_rng(settings.seed)
    pattern = node_pattern if node_pattern is not None else synthetic_node_pattern(settings.seed)
    block, plan = _block(pattern, settings, rng)
    per_block = int(_kernel_counts(block, plan).sum())
    if per_block == 0:
        raise ValueError("the node pattern launches no kernels")
    total_repeats = -(-n_kernels // per_block)
    per_chunk = max(1, CHUNK_KERNELS // per_block)

    def chunks():
        cursor = 0
        for first in range(0, total_repeats, per_chunk):
            repeats = np.arange(first, min(first + per_chunk, total_repeats), dtype=np.int64)
            gaps = block.span + rng.integers(20_000, 200_000, len(repeats))
            shifts = cursor + np.r_[0, np.cumsum(gaps)[:-1]]
            cursor = int(shifts[-1] + gaps[-1])
            yield repeats, shifts

    return _simulate(block, plan, chunks(), n_kernels, out_dir, settings, pid, rng)


def synthetic_node_pattern(seed: int = 0, nodes: int = 48) -> pa.Table:
    """One iteration of a made-up CNN/transformer mix, for when no real profile is at hand."""
    rng = np.random.default_rng(seed)
    ops = ["Conv", "Relu", "MaxPool", "MatMul", "Add", "LayerNormalization", "Softmax", "Gemm"]
    op = [ops[i % len(ops)] for i in range(nodes)]
    duration = np.round(rng.lognormal(np.log(12_000), 0.6, nodes), -3).astype(np.int64)
    gap = rng.integers(3, 9, nodes) * 1_000
    start = 1_700_000_000_000_000_000 + np.r_[0, np.cumsum(duration + gap)[:-1]]
    nodes_table = pa.table(
        {
            "category": ["Node"] * nodes,
            "iteration": [0] * nodes,
            "node_name": [f"layer{i // len(ops)}/{o.lower()}" for i, o in enumerate(op)],
            "op_type": op,
            "start_ns": start,
            "duration_ns": duration,
            "thread_id": [1] * nodes,
        }
    )
    run = pa.table(
        {
            "category": ["Session"],
            "iteration": [0],
            "event_name": ["model_run"],
            "start_ns": [int(start[0]) - 5_000],
            "duration_ns": [int(start[-1] + duration[-1] - start[0]) + 10_000],
        }
    )
    return pa.concat_tables([conform(nodes_table, KERNEL_EVENTS), conform(run, KERNEL_EVENTS)])


# --- Scoring --------------------------------------------------------------------------------


def attribution_accuracy(assigned: pa.Table, truth: SimulatedTruth, by_iteration: bool = False):
    """Fraction of kernel TIME attributed to the right node, from the true kernel durations.

    Right means `runtime_node` is the kernel's true node or, for a fused kernel, either of its
    two true nodes (ONNX Runtime would report the pair under one of them; splitting its time is
    the node mapping's job, not the launch attribution's). Unmatched kernels count as wrong.
    With `by_iteration` the iteration must match too.
    """
    same_iteration = "AND a.iteration = t.iteration" if by_iteration else ""
    query = f"""
        SELECT sum(t.duration_ns) FILTER (
                   WHERE (CAST(a.runtime_node AS VARCHAR) = CAST(t.node AS VARCHAR)
                          OR CAST(a.runtime_node AS VARCHAR) = CAST(t.fused_node AS VARCHAR))
                   {same_iteration})
               / sum(t.duration_ns)
        FROM read_parquet(?) t
        LEFT JOIN (SELECT correlation_id, runtime_node, iteration FROM assigned) a
        USING (correlation_id)
    """
    with engine.connect() as con:
        con.register("assigned", assigned.select(["correlation_id", "runtime_node", "iteration"]))
        return float(con.execute(query, [str(truth.truth)]).fetchall()[0][0] or 0.0)

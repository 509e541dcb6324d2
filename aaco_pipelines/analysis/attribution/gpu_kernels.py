"""GPU kernel attribution: which ONNX Runtime node launched each device kernel.

On a GPU host ONNX Runtime's profile shows host-side node windows (the time it spent launching a
node's kernels) while rocprofv3 shows the device kernels and the HIP API calls that launched
them, on its own host clock. Kernels run asynchronously (launch latency, queues, several
streams), so a kernel's own time says little about its node; its launch call does. Evidence,
best first:

  ort_parent          the kernel row already names its node (ONNX Runtime's own GPU
                      `Kernel` events carry their parent node)                        1.0
  correlation_launch  kernel -> the API call with its correlation id -> the call's host
                      start, moved onto the profile's clock by the estimated offset ->
                      the node window holding it (same thread when thread ids match)   0.95
                      ... or, outside every window, the nearest window within
                      NEAREST_WINDOW_MAX_NS (jitter pushes a few launches just outside) 0.7
  migraphx_partition  as correlation_launch, but the window is a compiled MIGraphX
                      partition; with the partition's member ONNX nodes given, each
                      kernel also gets an `onnx_node` (see `_spread_over_members`)   0.95 / 0.7
  unmatched           nothing fits: runtime_node is null, the kernel is kept             0.0

`confidence` is that of `runtime_node`; a partition's `onnx_node` is an estimate on top of it.
The clock offset is estimated, not assumed: the offset that puts the most launch calls inside
node windows (`clock_alignment.estimate_clock_offset`). Everything is numpy over sorted arrays
(searchsorted), no per-kernel Python, so 10^7 kernels take seconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.attribution.clock_alignment import (
    ClockAlignment,
    estimate_clock_offset,
)
from aaco_pipelines.collectors.kernel_families import kernel_families

CONFIDENCE = {
    "ort_parent": 1.0,
    "correlation_launch": 0.95,
    "nearest_window": 0.7,
    "unmatched": 0.0,
}
METHODS = ("ort_parent", "correlation_launch", "migraphx_partition", "unmatched")

# A launch up to this far outside every window still belongs to the nearest one: clock jitter
# and ONNX Runtime's µs timestamps; farther away it came from outside the profiled runs.
NEAREST_WINDOW_MAX_NS = 50_000

GPU_ATTRIBUTION = pa.schema(
    [
        ("kernel_index", pa.int64()),  # row of the kernel in the input table
        ("dispatch_id", pa.int64()),
        ("correlation_id", pa.int64()),
        ("kernel_name", pa.string()),
        ("start_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("launch_ns", pa.int64()),  # the launch call's start on the profile's clock
        ("runtime_node", pa.dictionary(pa.int32(), pa.string())),  # null: unmatched
        ("iteration", pa.int32()),  # that of the node window (ort_parent: the kernel's own)
        ("method", pa.dictionary(pa.int8(), pa.string())),
        ("confidence", pa.float64()),
        ("onnx_node", pa.dictionary(pa.int32(), pa.string())),  # migraphx_partition only
    ]
)

# Partition nodes of the MIGraphX execution provider: one node runs a whole compiled subgraph.
_PARTITION_OP = re.compile(r"^MGXKernel_graph_")
_PARTITION_NAME = re.compile(r"^MIGraphXExecutionProvider_")


# --- Attribution ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Windows:
    """ONNX Runtime node windows, sorted by (thread, start)."""

    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    iteration: np.ndarray  # int64, -2**31 for null
    name_code: np.ndarray  # into names
    names: pa.Array
    is_partition: np.ndarray  # per name


_NO_ITERATION = np.iinfo(np.int32).min


def attribute_gpu_kernels(
    kernels: pa.Table,
    api_calls: pa.Table,
    node_events: pa.Table,
    partition_members: Mapping[str, Sequence[tuple[str, str, int | None]]] | None = None,
    alignment: ClockAlignment | None = None,
) -> pa.Table:
    """One GPU_ATTRIBUTION row per kernel (none dropped), best evidence first.

    `kernels`: KERNEL_EVENTS rows of device kernels; `api_calls`: API_CALLS rows;
    `node_events`: KERNEL_EVENTS rows (only category Node is used). `partition_members`:
    {MIGraphX partition node: [(onnx_node, op_type, flops)]}. Without `alignment` the clock
    offset is estimated from the launches; the one used is in the schema metadata
    (`clock_alignment`, JSON).
    """
    n = kernels.num_rows
    windows = _node_windows(node_events)
    named = kernels["node_name"].is_valid().to_numpy(zero_copy_only=False)
    launch, launch_thread = _launch_calls(kernels, api_calls)
    launched = ~named & (launch != _NO_LAUNCH)
    if alignment is None:
        alignment = estimate_clock_offset(launch[launched], windows.start, windows.end)
    launch_ns = np.where(launched, launch + alignment.offset_ns, _NO_LAUNCH)

    window, confidence = _locate(launch_ns[launched], launch_thread[launched], windows)
    window_of = np.full(n, -1, dtype=np.int64)
    window_of[launched] = window
    method = np.full(n, METHODS.index("unmatched"), dtype=np.int8)
    conf = np.zeros(n)
    found = window_of >= 0
    method[found] = METHODS.index("correlation_launch")
    conf[launched] = confidence
    partition = found & windows.is_partition[windows.name_code[np.maximum(window_of, 0)]]
    method[partition] = METHODS.index("migraphx_partition")
    method[named], conf[named] = METHODS.index("ort_parent"), CONFIDENCE["ort_parent"]

    runtime_node, names = _runtime_nodes(kernels, windows, window_of, named)
    iteration = np.where(found, windows.iteration[np.maximum(window_of, 0)], _NO_ITERATION)
    own = kernels["iteration"].fill_null(_NO_ITERATION).to_numpy(zero_copy_only=False)
    iteration = np.where(named, own, iteration)
    onnx = _spread_over_members(kernels, windows, window_of, partition, partition_members or {})
    return _table(kernels, launch_ns, runtime_node, names, iteration, method, conf, onnx, alignment)


_NO_LAUNCH = np.iinfo(np.int64).min


def _node_windows(node_events: pa.Table) -> _Windows:
    columns = ["category", "node_name", "op_type", "start_ns", "duration_ns", "thread_id"]
    nodes = node_events.select([*columns, "iteration"])
    nodes = nodes.filter(
        pc.and_(
            pc.equal(nodes["category"], "Node"),
            pc.and_(pc.is_valid(nodes["start_ns"]), pc.is_valid(nodes["node_name"])),
        )
    )
    encoded = pc.dictionary_encode(nodes["node_name"].combine_chunks())
    names = encoded.dictionary
    start = nodes["start_ns"].to_numpy().astype(np.int64)
    end = start + nodes["duration_ns"].fill_null(0).to_numpy(zero_copy_only=False)
    thread = nodes["thread_id"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((start, thread))
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    first = np.full(len(names), 0, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]  # each name's first row
    op_of_name = pc.take(nodes["op_type"], first)
    is_partition = np.asarray(
        [
            bool(_PARTITION_OP.match(op or "")) or bool(_PARTITION_NAME.match(name or ""))
            for name, op in zip(names.to_pylist(), op_of_name.to_pylist(), strict=True)
        ],
        dtype=bool,
    )
    return _Windows(
        start=start[order],
        end=end[order],
        thread=thread[order],
        iteration=nodes["iteration"]
        .fill_null(_NO_ITERATION)
        .to_numpy(zero_copy_only=False)
        .astype(np.int64)[order],
        name_code=codes[order],
        names=names,
        is_partition=is_partition,
    )


def _launch_calls(kernels: pa.Table, api_calls: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel, the start and thread of the API call with its correlation id (the earliest
    call when a profiler recorded nested ones); _NO_LAUNCH when there is none."""
    corr = kernels["correlation_id"].fill_null(-1).to_numpy(zero_copy_only=False)
    n = len(corr)
    calls = api_calls.filter(pc.is_valid(api_calls["correlation_id"]))
    if calls.num_rows == 0:
        return np.full(n, _NO_LAUNCH, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    api_corr = calls["correlation_id"].to_numpy(zero_copy_only=False).astype(np.int64)
    api_start = calls["start_ns"].fill_null(_NO_LAUNCH).to_numpy(zero_copy_only=False)
    api_thread = calls["thread_id"].fill_null(-1).to_numpy(zero_copy_only=False)
    order = np.lexsort((api_start, api_corr))
    api_corr, api_start, api_thread = api_corr[order], api_start[order], api_thread[order]
    index = np.searchsorted(api_corr, corr)
    index_ok = np.minimum(index, len(api_corr) - 1)
    hit = (index < len(api_corr)) & (api_corr[index_ok] == corr) & (corr >= 0)
    start = np.where(hit, api_start[index_ok], _NO_LAUNCH).astype(np.int64)
    return start, np.where(hit, api_thread[index_ok], -1).astype(np.int64)


def _locate(times: np.ndarray, threads: np.ndarray, windows: _Windows):
    """Per launch: the window holding it (on its own thread when thread ids are comparable,
    else on any), or the nearest within NEAREST_WINDOW_MAX_NS; -1 when none. And confidence."""
    window = np.full(len(times), -1, dtype=np.int64)
    confidence = np.zeros(len(times))
    if len(times) == 0 or len(windows.start) == 0:
        return window, confidence
    thread_ids = windows.thread[np.r_[True, windows.thread[1:] != windows.thread[:-1]]]
    group = np.minimum(np.searchsorted(thread_ids, threads), len(thread_ids) - 1)
    known = thread_ids[group] == threads
    per_thread = known if known.mean() >= 0.5 else np.zeros(len(times), dtype=bool)
    if per_thread.any():
        group = group[per_thread]
        groups_of_windows = np.searchsorted(thread_ids, windows.thread)
        order = np.arange(len(windows.start))  # windows are already sorted by (thread, start)
        found = _lookup(times[per_thread], group, windows, groups_of_windows, order)
        window[per_thread], confidence[per_thread] = found
    if (~per_thread).any():
        order = np.argsort(windows.start, kind="stable")
        groups = np.zeros(len(order), dtype=np.int64)
        found = _lookup(times[~per_thread], np.zeros((~per_thread).sum(), np.int64), windows,
                        groups, order)  # fmt: skip
        window[~per_thread], confidence[~per_thread] = found
    return window, confidence


def _lookup(times, group, windows: _Windows, window_group, order):
    """Containment search over windows keyed by (group, time): one searchsorted for all groups.

    A running maximum of window ends finds a window holding the time even when windows overlap
    (parallel executors); outside every window the nearer of the previous and next window in the
    same group is taken when within NEAREST_WINDOW_MAX_NS.
    """
    start, end, window_group = windows.start[order], windows.end[order], window_group[order]
    origin = min(int(start.min()), int(times.min()))
    span = max(int(end.max()), int(times.max())) - origin + 2 * NEAREST_WINDOW_MAX_NS + 1
    bits = span.bit_length()
    if (int(window_group.max(initial=0)) + 1) << bits >= 1 << 62:
        raise ValueError("trace too long to key by thread; attribute without thread ids")

    def key(g, t):
        return (g.astype(np.int64) << bits) | (t - origin)

    start_key, end_key, time_key = (
        key(window_group, start),
        key(window_group, end),
        key(group, times),
    )
    reach = np.maximum.accumulate(end_key)
    holder = np.maximum.accumulate(np.where(end_key == reach, np.arange(len(reach)), 0))
    index = np.searchsorted(start_key, time_key, side="right") - 1
    safe = np.maximum(index, 0)
    same_group_before = (index >= 0) & ((reach[safe] >> bits) == group)
    inside = (index >= 0) & (time_key <= reach[safe])
    gap_before = np.where(same_group_before, time_key - reach[safe], np.iinfo(np.int64).max)
    nxt = np.minimum(index + 1, len(start_key) - 1)
    same_group_after = (index + 1 < len(start_key)) & (window_group[nxt] == group)
    gap_after = np.where(same_group_after, start_key[nxt] - time_key, np.iinfo(np.int64).max)
    nearest = np.where(gap_before <= gap_after, holder[safe], nxt)
    near = ~inside & (np.minimum(gap_before, gap_after) <= NEAREST_WINDOW_MAX_NS)
    found = np.where(inside, holder[safe], np.where(near, nearest, -1))
    found = np.where(found >= 0, order[np.maximum(found, 0)], -1)
    confidence = np.where(
        inside, CONFIDENCE["correlation_launch"], np.where(near, CONFIDENCE["nearest_window"], 0.0)
    )
    return found, confidence


def _runtime_nodes(kernels, windows: _Windows, window_of, named):
    """Dictionary codes of each kernel's runtime node (-1: none) and the dictionary."""
    own = pc.dictionary_encode(kernels["node_name"].combine_chunks())
    names = pc.unique(pa.concat_arrays([windows.names.cast(pa.string()),
                                        own.dictionary.cast(pa.string())]))  # fmt: skip
    window_codes = pc.index_in(windows.names, names).to_numpy(zero_copy_only=False)
    own_codes = pc.index_in(own.dictionary, names).to_numpy(zero_copy_only=False)
    codes = np.where(window_of >= 0, window_codes[windows.name_code[np.maximum(window_of, 0)]], -1)
    own_index = own.indices.fill_null(0).to_numpy(zero_copy_only=False)
    if len(own_codes):
        codes = np.where(named, own_codes[own_index], codes)
    return codes.astype(np.int32), names


# --- MIGraphX partitions --------------------------------------------------------------------

_ELEMENTWISE_OPS = {"Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf",
                    "Gelu", "BiasGelu", "FastGelu", "Clip", "Pow", "Sqrt", "Exp", "Neg", "Cast",
                    "Where", "Sum", "HardSigmoid", "BatchNormalization"}  # fmt: skip
# Which ONNX ops a kernel family executes (GEMM kernels also run convolutions lowered to GEMM).
FAMILY_OPS = {
    "gemm": {"MatMul", "Gemm", "FusedGemm", "FusedMatMul", "MatMulInteger", "Conv", "FusedConv"},
    "convolution": {"Conv", "FusedConv", "ConvTranspose", "QLinearConv"},
    "attention": {"Attention", "MultiHeadAttention", "GroupQueryAttention", "MatMul", "Softmax"},
    "softmax": {"Softmax", "LogSoftmax"},
    "layernorm": {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                  "BatchNormalization", "InstanceNormalization", "GroupNormalization"},
    "reduction": {"ReduceMean", "ReduceSum", "ReduceMax", "GlobalAveragePool", "MaxPool",
                  "AveragePool", "ArgMax", "TopK"},
    "copy": {"Transpose", "Reshape", "Concat", "Slice", "Gather", "Split", "Expand", "Identity"},
    "elementwise": _ELEMENTWISE_OPS,
}  # fmt: skip


def _spread_over_members(kernels, windows: _Windows, window_of, partition, members):
    """Each partition kernel's ONNX node: among the partition's members executing the kernel's
    family (all members when none does), by cumulative time in launch order against the
    members' FLOP shares (equal shares when FLOPs are unknown).

    Within one run of a partition, the kernels of a family are laid end to end in start order;
    a kernel goes to the member whose FLOP-share slice holds the kernel's time midpoint. The
    members' time then follows their FLOP share, whole kernels stay whole, and the first GEMM
    kernels go to the first MatMul of the list (pass members in graph order).
    """
    codes = np.full(len(window_of), -1, dtype=np.int32)
    onnx_names = sorted({m[0] for group in members.values() for m in group})
    if not partition.any() or not onnx_names:
        return codes, pa.array(onnx_names, pa.string())
    rows = np.flatnonzero(partition)
    node_names = windows.names.to_pylist()
    node_of_row = windows.name_code[window_of[rows]]
    family = _families(kernels, rows)
    start = kernels["start_ns"].to_numpy()[rows]
    duration = kernels["duration_ns"].to_numpy()[rows].astype(np.float64)
    for code in np.unique(node_of_row):
        group = members.get(node_names[code], ())
        if not group:
            continue
        for fam in np.unique(family[node_of_row == code]):
            chosen = [m for m in group if m[1] in FAMILY_OPS.get(fam, ())] or list(group)
            flops = np.asarray([m[2] or 0 for m in chosen], dtype=np.float64)
            share = (
                flops / flops.sum() if flops.sum() > 0 else np.full(len(chosen), 1 / len(chosen))
            )
            sel = np.flatnonzero((node_of_row == code) & (family == fam))
            mid = _time_midpoints(window_of[rows[sel]], start[sel], duration[sel])
            member = np.minimum(np.searchsorted(np.cumsum(share), mid), len(chosen) - 1)
            member_codes = np.searchsorted(onnx_names, [m[0] for m in chosen])
            codes[rows[sel]] = member_codes[member]
    return codes, pa.array(onnx_names, pa.string())


def _families(kernels: pa.Table, rows: np.ndarray) -> np.ndarray:
    names = pc.take(kernels["kernel_name"], rows).combine_chunks()
    family = kernel_families(names).to_numpy(zero_copy_only=False)
    if "kernel_family" in kernels.column_names:
        given = pc.take(kernels["kernel_family"], rows).combine_chunks()
        valid = given.is_valid().to_numpy(zero_copy_only=False)
        family = np.where(valid, given.fill_null("").to_numpy(zero_copy_only=False), family)
    return family.astype(str)


def _time_midpoints(instance, start, duration) -> np.ndarray:
    """Per kernel, the midpoint of its time as a fraction of its instance's total, kernels of
    one instance laid end to end in start order."""
    order = np.lexsort((start, instance))
    inst, dur = instance[order], duration[order]
    firsts = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    sizes = np.diff(np.r_[firsts, len(inst)])
    csum = np.cumsum(dur)
    base = np.repeat(np.r_[0.0, csum[firsts[1:] - 1]], sizes)
    total = np.repeat(np.add.reduceat(dur, firsts), sizes)
    mid = np.empty(len(order))
    mid[order] = (csum - base - dur / 2) / np.where(total > 0, total, 1)
    return mid


# --- Output ---------------------------------------------------------------------------------


def _table(kernels, launch_ns, runtime_node, names, iteration, method, conf, onnx, alignment):
    n = kernels.num_rows

    def column(name, kind):
        if name in kernels.column_names:
            return kernels[name].combine_chunks().cast(kind)
        return pa.nulls(n, kind)

    def dictionary(codes, values, index_dtype=np.int32):
        indices = pa.array(codes.astype(index_dtype), mask=codes < 0)
        return pa.DictionaryArray.from_arrays(indices, values)

    onnx_codes, onnx_names = onnx
    arrays = [
        pa.array(np.arange(n, dtype=np.int64)),
        column("dispatch_id", pa.int64()),
        column("correlation_id", pa.int64()),
        column("kernel_name", pa.string()),
        column("start_ns", pa.int64()),
        column("duration_ns", pa.int64()),
        pa.array(launch_ns, mask=launch_ns == _NO_LAUNCH),
        dictionary(runtime_node, names),
        pa.array(iteration.astype(np.int32), mask=iteration == _NO_ITERATION),
        dictionary(method, pa.array(METHODS), np.int8),
        pa.array(conf),
        dictionary(onnx_codes, onnx_names),
    ]
    metadata = {b"clock_alignment": json.dumps(asdict(alignment)).encode()}
    return pa.Table.from_arrays(arrays, schema=GPU_ATTRIBUTION.with_metadata(metadata))


def clock_alignment_of(attribution: pa.Table) -> ClockAlignment:
    """The clock alignment an attribution table was computed with."""
    return ClockAlignment(**json.loads(attribution.schema.metadata[b"clock_alignment"]))

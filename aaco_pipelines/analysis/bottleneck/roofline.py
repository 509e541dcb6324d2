"""Placing ops, and a whole session, on the roofline of the measured hardware envelope.

An op's arithmetic intensity AI = flops / bytes_moved says which roof applies to it: the
attainable rate is min(peak FLOP/s, AI x peak B/s), bending at the ridge point (peak FLOP/s /
peak B/s). Utilization against that roof tells how much of the hardware an op really gets,
whether it is starved by compute or by memory. Unknown costs stay null: a roofline built on
guessed FLOPs would point at the wrong op.

The roofline is hierarchical: an op whose bytes fit a cache level is judged against that
level's measured bandwidth (HardwareEnvelope.ceiling_for), not DRAM's. And no op is shown above
its roof: an op measured faster than its roof proves the roof wrong (an envelope measured on a
busy host, a noisy size), so judge_roofline lifts that roof to the fastest op under it, marks the
points it judges (roof_lifted) and says so (RoofLift), instead of reporting 102 % of a peak.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.envelope.datasheets import FALLBACK_DTYPE, kernel_dtype, node_dtype
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope

ROOFLINE_COLUMNS = pa.schema(
    [
        ("arithmetic_intensity", pa.float64()),
        ("achieved_flops_per_s", pa.float64()),
        ("achieved_bytes_per_s", pa.float64()),
        ("roof_flops_per_s", pa.float64()),
        ("bound", pa.string()),
        ("utilization", pa.float64()),
        ("roof_level", pa.string()),  # GEMM when compute-bound, else L2 | L3 | ... | DRAM
    ]
)
COMPUTE_ROOF = "GEMM"


@dataclass(frozen=True)
class Known:
    """A column as float64 values and where they are known (nulls and NaN are not)."""

    values: np.ndarray
    known: np.ndarray

    @classmethod
    def of(cls, column: pa.ChunkedArray | pa.Array) -> Known:
        values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
        return cls(values, ~np.isnan(values))

    def arrow(self) -> pa.Array:
        return pa.array(np.where(self.known, self.values, 0.0), pa.float64(), mask=~self.known)


def _ratio(numerator: Known, denominator: Known) -> Known:
    """numerator / denominator, known only where both are and the denominator is positive."""
    known = numerator.known & denominator.known & (denominator.values > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = numerator.values / np.where(known, denominator.values, 1.0)
    return Known(values, known)


def roofline_table(nodes: pa.Table, envelope: HardwareEnvelope | None) -> pa.Table:
    """`nodes` (onnx_node, op_type, flops, bytes_moved, time_ns per iteration) plus its roofline;
    with no envelope, only what needs none (intensity, achieved rates), nothing judged.

    arithmetic_intensity  flops / bytes_moved                      null when bytes null or 0
    achieved_flops_per_s  flops / (time_ns x 1e-9)                 null when time null or 0
    achieved_bytes_per_s  bytes_moved / (time_ns x 1e-9)
    roof_flops_per_s      min(gemm.peak, AI x bandwidth.peak)
    bound                 "compute" when AI >= ridge point, else "memory"
    utilization           achieved_flops_per_s / roof_flops_per_s; for a memory-bound op this
                          equals achieved_bytes_per_s / bandwidth.peak, which is what is used,
                          so zero-FLOP data movement (AI 0, roof 0) still gets a utilization
    """
    flops = Known.of(nodes["flops"])
    moved = Known.of(nodes["bytes_moved"])
    seconds = Known.of(nodes["time_ns"])
    seconds = Known(seconds.values * 1e-9, seconds.known)
    intensity = _ratio(flops, moved)
    achieved_flops = _ratio(flops, seconds)
    achieved_bytes = _ratio(moved, seconds)
    added = [intensity.arrow(), achieved_flops.arrow(), achieved_bytes.arrow()]
    if envelope is None:
        added += [pa.nulls(nodes.num_rows, field.type) for field in list(ROOFLINE_COLUMNS)[3:]]
        for field, column in zip(ROOFLINE_COLUMNS, added, strict=True):
            nodes = nodes.append_column(field, column)
        return nodes
    level, ceiling = memory_levels(moved, envelope)
    roof = Known(np.minimum(envelope.gemm.peak, intensity.values * ceiling), intensity.known)
    compute_bound = intensity.values * ceiling >= envelope.gemm.peak
    utilization = Known(
        np.where(
            compute_bound,
            achieved_flops.values / envelope.gemm.peak,
            achieved_bytes.values / ceiling,
        ),
        intensity.known & achieved_flops.known & achieved_bytes.known,
    )
    bound = pa.array(
        np.where(compute_bound, "compute", "memory"), pa.string(), mask=~intensity.known
    )
    roof_level = pa.array(
        np.where(compute_bound, COMPUTE_ROOF, level), pa.string(), mask=~intensity.known
    )
    added += [roof.arrow(), bound, utilization.arrow(), roof_level]
    for field, column in zip(ROOFLINE_COLUMNS, added, strict=True):
        nodes = nodes.append_column(field, column)
    return nodes


def memory_levels(moved: Known, envelope: HardwareEnvelope) -> tuple[np.ndarray, np.ndarray]:
    """Each op's memory level and that level's bandwidth: the smallest level whose capacity
    holds its bytes (HardwareEnvelope.ceiling_for), DRAM when they are unknown."""
    level = np.full(moved.values.size, "DRAM", dtype=object)
    ceiling = np.full(moved.values.size, envelope.bandwidth.peak)
    for name, capacity, peak in reversed(envelope.memory_ceilings()):  # largest first
        if capacity is None:
            continue
        fits = moved.known & (moved.values <= capacity)
        level[fits], ceiling[fits] = name, peak
    return level, ceiling


@dataclass(frozen=True)
class EnvelopeUtilization:
    dominant_resource: str  # "compute" | "memory": the roof the session's AI sits under
    hardware_envelope_utilization: float  # the dominant resource's utilization
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    compute_utilization: float  # achieved_flops_per_s / gemm.peak
    memory_utilization: float  # achieved_bytes_per_s / bandwidth.peak
    arithmetic_intensity: float | None  # None when the session moved no bytes


def envelope_utilization(
    total_flops: float, total_bytes: float, busy_time_ns: float, envelope: HardwareEnvelope
) -> EnvelopeUtilization:
    """Hardware envelope utilization (HEU) of a session, over the time its kernels were busy.

    With totals and busy time per iteration:
      achieved_flops_per_s = total_flops / (busy_time_ns x 1e-9), likewise for bytes
      AI = total_flops / total_bytes; dominant resource = "compute" when AI >= ridge point
      (or no bytes moved), else "memory"
      HEU = achieved_flops_per_s / gemm.peak           when compute dominates
          = achieved_bytes_per_s / bandwidth.peak      when memory dominates
    Busy time, not wall time, so host gaps between kernels count against the runtime, not here.
    """
    if busy_time_ns <= 0:
        raise ValueError(f"busy_time_ns must be positive, got {busy_time_ns}")
    seconds = busy_time_ns * 1e-9
    flops_per_s = total_flops / seconds
    bytes_per_s = total_bytes / seconds
    compute = flops_per_s / envelope.gemm.peak
    memory = bytes_per_s / envelope.bandwidth.peak
    intensity = total_flops / total_bytes if total_bytes > 0 else None
    dominant = "compute" if intensity is None or intensity >= envelope.ridge_point() else "memory"
    return EnvelopeUtilization(
        dominant_resource=dominant,
        hardware_envelope_utilization=compute if dominant == "compute" else memory,
        achieved_flops_per_s=flops_per_s,
        achieved_bytes_per_s=bytes_per_s,
        compute_utilization=compute,
        memory_utilization=memory,
        arithmetic_intensity=intensity,
    )


def roofline_utilization(
    points: pa.Table, envelope: HardwareEnvelope
) -> EnvelopeUtilization | None:
    """The session's utilization from its judged roofline points: the time its ops would need at
    their own roofs (each under its data type's GEMM peak, each's bytes at the ceiling of the
    memory level they fit), as a share of the time they took; None when no point has a known
    cost. For one roof and one level this is envelope_utilization over the ops' time; with
    caches it no longer judges cache-resident bytes against DRAM, and since no point is above
    its roof (judge_roofline) it never exceeds 1.

    The FLOPs and bytes are the points' (what ran, fused groups' external bytes), not the
    model's totals (which count folded nodes and the tensors fused kernels keep inside)."""
    seconds = Known.of(points["time_ns"])
    flops, moved = Known.of(points["flops"]), Known.of(points["bytes_moved"])
    total_s = float(seconds.values[seconds.known].sum()) * 1e-9
    if total_s <= 0 or not flops.known.any():
        return None
    roof_dtypes = points["roof_dtype"].to_pylist()
    gemm = np.array([envelope.for_dtype(d).gemm.peak for d in roof_dtypes], dtype=float)
    _, ceiling = memory_levels(moved, envelope)
    compute_s = float((flops.values / gemm)[flops.known].sum())
    memory_s = float((moved.values / ceiling)[moved.known].sum())
    total_flops = float(flops.values[flops.known].sum())
    total_bytes = float(moved.values[moved.known].sum())
    dominant = "compute" if compute_s >= memory_s else "memory"
    return EnvelopeUtilization(
        dominant_resource=dominant,
        hardware_envelope_utilization=max(compute_s, memory_s) / total_s,
        achieved_flops_per_s=total_flops / total_s,
        achieved_bytes_per_s=total_bytes / total_s,
        compute_utilization=compute_s / total_s,
        memory_utilization=memory_s / total_s,
        arithmetic_intensity=total_flops / total_bytes if total_bytes > 0 else None,
    )


def roof_time_per_node_us(points: pa.Table, envelope: HardwareEnvelope) -> float | None:
    """The mean time a node needs at its roofs (its FLOPs at its data type's GEMM peak or its
    bytes at its memory level's ceiling, the longer), in us, over the nodes with a known cost:
    the graph's work per node against the device, which no competing process moves. None when
    no node's cost is known."""
    flops, moved = Known.of(points["flops"]), Known.of(points["bytes_moved"])
    costed = flops.known | moved.known
    if not costed.any():
        return None
    gemm = np.array(
        [envelope.for_dtype(d).gemm.peak for d in points["roof_dtype"].to_pylist()], dtype=float
    )
    _, ceiling = memory_levels(moved, envelope)
    compute_s = np.where(flops.known, flops.values / gemm, 0.0)
    memory_s = np.where(moved.known, moved.values / ceiling, 0.0)
    return float(np.maximum(compute_s, memory_s)[costed].mean() * 1e6)


# --- each node under the roof of its own data type -----------------------------------------

UNMATCHED = "(unmatched) "  # how attribution names a runtime node or kernel with no graph node


def node_dtypes(nodes: pa.Table) -> pa.Array:
    """Each node's data type: the graph's (node_dtype) when it is a graph node, else the one
    its kernel's name tells (kernel_dtype); null when neither says."""
    dtypes = []
    for name, op_type, graph_op, outputs, runtime_ops in zip(
        nodes["onnx_node"].to_pylist(),
        nodes["op_type"].to_pylist(),
        nodes["graph_op_type"].to_pylist(),
        nodes["dtypes"].to_pylist(),
        nodes["runtime_ops"].to_pylist(),
        strict=True,
    ):
        found = None
        if graph_op is not None:
            found = node_dtype(graph_op, outputs, runtime_ops or ())
        elif name and name.startswith(UNMATCHED):
            found = node_dtype(op_type, (), runtime_ops or ()) or kernel_dtype(
                name[len(UNMATCHED) :]
            )
        dtypes.append(found)
    return pa.array(dtypes, pa.string())


def dtype_roofline(nodes: pa.Table, envelope: HardwareEnvelope | None) -> pa.Table:
    """`nodes` (onnx_node, op_type, flops, bytes_moved, time_ns, dtype) on the roofline, each
    under the GEMM roof of its own data type (roof_dtype: fp32 when its type has no peak in the
    envelope). Without an envelope, only what needs none (intensity, achieved rates) is filled:
    no roof, bound or utilization."""
    if envelope is None:
        unjudged = roofline_table(nodes, None)
        return unjudged.append_column("roof_dtype", pa.nulls(nodes.num_rows, pa.string()))
    dtypes = nodes["dtype"].to_pylist()
    roofs = [envelope.roof_dtype(d) for d in dtypes]
    order = pa.array(np.arange(nodes.num_rows))
    parts = []
    for roof in dict.fromkeys(roofs):
        mask = pa.array([r == roof for r in roofs])
        part = roofline_table(nodes.filter(mask), envelope.for_dtype(roof))
        part = part.append_column("roof_dtype", pa.array([roof] * part.num_rows, pa.string()))
        parts.append(part.append_column("_order", order.filter(mask)))
    if not parts:
        return roofline_table(nodes, envelope).append_column("roof_dtype", pa.nulls(0, pa.string()))
    table = pa.concat_tables(parts).sort_by("_order")
    return table.drop_columns(["_order"])


def dominant_dtype(roofline: pa.Table) -> str:
    """The roof data type carrying most of the session's known FLOPs (fp32 when none)."""
    if roofline.num_rows == 0 or "roof_dtype" not in roofline.column_names:
        return FALLBACK_DTYPE
    flops: dict[str, float] = {}
    for roof, value in zip(
        roofline["roof_dtype"].to_pylist(), roofline["flops"].to_pylist(), strict=True
    ):
        if roof is not None and value:
            flops[roof] = flops.get(roof, 0.0) + float(value)
    return max(flops, key=flops.__getitem__) if flops else FALLBACK_DTYPE


# --- no op above its roof ------------------------------------------------------------------


@dataclass(frozen=True)
class RoofLift:
    """A roof raised to what an op was measured doing: the envelope said less was possible."""

    roof: str  # "fp32 GEMM", "int8 GEMM", "L2", "L3", "DRAM"
    measured: float  # the envelope's peak
    observed: float  # the fastest op under that roof, now the roof
    node: str  # that op
    unit: str  # FLOP/s | B/s

    def describe(self) -> str:
        return (
            f"{self.roof} roof lifted from {self.measured:.3g} to {self.observed:.3g} {self.unit} "
            f"({self.node} ran at {self.observed / self.measured:.0%} of the measured peak)"
        )


@dataclass(frozen=True)
class JudgedRoofline:
    points: pa.Table  # dtype_roofline's columns, plus roof_lifted
    envelope: HardwareEnvelope | None  # the roofs they were judged against, lifted where beaten
    lifts: list[RoofLift]

    def note(self) -> str | None:
        """One sentence for the report (no final stop): which roofs were lifted and why, or
        None."""
        if not self.lifts:
            return None
        return (
            "Ops ran faster than the measured envelope allows, so its roofs were lifted to what "
            "they did (the envelope was probably measured while the host was busier): "
            + "; ".join(lift.describe() for lift in self.lifts)
        )


def judge_roofline(nodes: pa.Table, envelope: HardwareEnvelope | None) -> JudgedRoofline:
    """dtype_roofline against the envelope with every roof an op beat lifted to that op's rate
    (lift_to_observed), each point marked roof_lifted when its own roof was."""
    if envelope is None:
        points = dtype_roofline(nodes, None)
        return JudgedRoofline(
            points.append_column("roof_lifted", pa.nulls(points.num_rows, pa.bool_())), None, []
        )
    lifted, lifts = lift_to_observed(nodes, envelope)
    points = dtype_roofline(nodes, lifted)
    raised = {lift.roof for lift in lifts}
    marks = [
        None if level is None else (f"{dtype} GEMM" if level == COMPUTE_ROOF else level) in raised
        for level, dtype in zip(
            points["roof_level"].to_pylist(), points["roof_dtype"].to_pylist(), strict=True
        )
    ]
    return JudgedRoofline(
        points.append_column("roof_lifted", pa.array(marks, pa.bool_())), lifted, lifts
    )


def lift_to_observed(
    nodes: pa.Table, envelope: HardwareEnvelope
) -> tuple[HardwareEnvelope, list[RoofLift]]:
    """The envelope with each GEMM peak raised to the fastest op of its data type and each
    memory level's bandwidth to the fastest op it holds, where those ops beat them."""
    rates = roofline_table(nodes.select(["flops", "bytes_moved", "time_ns"]), None)
    flops = Known.of(rates["achieved_flops_per_s"])
    moved_rate = Known.of(rates["achieved_bytes_per_s"])
    names = np.asarray(nodes["onnx_node"].to_pylist(), dtype=object)
    roof_dtypes = np.asarray([envelope.roof_dtype(d) for d in nodes["dtype"].to_pylist()])
    lifted, lifts = envelope, []
    for dtype in dict.fromkeys(roof_dtypes.tolist()):
        fastest = _fastest(flops, roof_dtypes == dtype)
        peak = envelope.for_dtype(dtype).gemm
        if fastest is not None and flops.values[fastest] > peak.peak:
            observed = float(flops.values[fastest])
            lifts.append(RoofLift(f"{dtype} GEMM", peak.peak, observed, names[fastest], "FLOP/s"))
            lifted = _with_gemm_peak(lifted, dtype, observed)
    levels, _ = memory_levels(Known.of(nodes["bytes_moved"]), envelope)
    for name, _, _ in reversed(envelope.memory_ceilings()):  # DRAM first: it floors the caches
        fastest = _fastest(moved_rate, levels == name)
        ceiling = dict((n, p) for n, _, p in lifted.memory_ceilings())[name]
        if fastest is not None and moved_rate.values[fastest] > ceiling:
            observed = float(moved_rate.values[fastest])
            lifts.append(RoofLift(name, ceiling, observed, names[fastest], "B/s"))
            lifted = _with_bandwidth(lifted, name, observed)
    return lifted, lifts


def _fastest(rate: Known, mask: np.ndarray) -> int | None:
    candidates = np.flatnonzero(mask & rate.known)
    return int(candidates[np.argmax(rate.values[candidates])]) if candidates.size else None


def _with_gemm_peak(envelope: HardwareEnvelope, dtype: str, peak: float) -> HardwareEnvelope:
    if dtype in envelope.dtype_gemm:
        raised = dataclasses.replace(envelope.dtype_gemm[dtype], peak=peak)
        return dataclasses.replace(envelope, dtype_gemm={**envelope.dtype_gemm, dtype: raised})
    return dataclasses.replace(envelope, gemm=dataclasses.replace(envelope.gemm, peak=peak))


def _with_bandwidth(envelope: HardwareEnvelope, level: str, peak: float) -> HardwareEnvelope:
    if level in envelope.cache_bandwidth:
        raised = dataclasses.replace(envelope.cache_bandwidth[level], peak=peak)
        return dataclasses.replace(
            envelope, cache_bandwidth={**envelope.cache_bandwidth, level: raised}
        )
    return dataclasses.replace(
        envelope, bandwidth=dataclasses.replace(envelope.bandwidth, peak=peak)
    )

"""Placing ops, and a whole session, on the roofline of the measured hardware envelope.

An op's arithmetic intensity AI = flops / bytes_moved says which roof applies to it: the
attainable rate is min(peak FLOP/s, AI x peak B/s), bending at the ridge point (peak FLOP/s /
peak B/s). Utilization against that roof tells how much of the hardware an op really gets,
whether it is starved by compute or by memory. Unknown costs stay null: a roofline built on
guessed FLOPs would point at the wrong op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.datasheets import FALLBACK_DTYPE, kernel_dtype, node_dtype
from aaco_pipelines.analysis.envelope import HardwareEnvelope

ROOFLINE_COLUMNS = pa.schema(
    [
        ("arithmetic_intensity", pa.float64()),
        ("achieved_flops_per_s", pa.float64()),
        ("achieved_bytes_per_s", pa.float64()),
        ("roof_flops_per_s", pa.float64()),
        ("bound", pa.string()),
        ("utilization", pa.float64()),
    ]
)


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
    roof = Known(
        np.minimum(envelope.gemm.peak, intensity.values * envelope.bandwidth.peak), intensity.known
    )
    compute_bound = intensity.values >= envelope.ridge_point()
    utilization = Known(
        np.where(
            compute_bound,
            achieved_flops.values / envelope.gemm.peak,
            achieved_bytes.values / envelope.bandwidth.peak,
        ),
        intensity.known & achieved_flops.known & achieved_bytes.known,
    )
    bound = pa.array(
        np.where(compute_bound, "compute", "memory"), pa.string(), mask=~intensity.known
    )
    added += [roof.arrow(), bound, utilization.arrow()]
    for field, column in zip(ROOFLINE_COLUMNS, added, strict=True):
        nodes = nodes.append_column(field, column)
    return nodes


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

"""Why each GPU kernel takes its time: its occupancy, what the hardware counted, its roof, its class.

The session classifier (analysis/bottleneck/classification.py) says what limits the whole session;
this says it per kernel, from the occupancy its resources allow (analysis/kernels/occupancy.py,
every GPU trace) and what the hardware counted while it ran (analysis/kernels/counter_metrics.py,
sessions measured with `--counters` or traces with counters). Each kernel gets the first of
CLASSES that holds; the counted work rolled up per runtime node is a counted roofline (HBM, L2,
LDS where the counters allow), set beside the cost model's FLOPs of the node's ONNX nodes.

Entry points: `diagnose_kernels` (every device kernel judged, and the counted roofline per node)
and `recommendations` (the kernels' findings, ranked, for the bottleneck report).

Concepts: docs/concepts/kernel-diagnosis.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from aaco_pipelines.analysis.envelope.record import HardwareEnvelope, ResourcePeak
from aaco_pipelines.analysis.kernels.counter_metrics import (
    kernel_hardware_metrics,
    kernel_hardware_summary,
)
from aaco_pipelines.analysis.kernels.occupancy import describe, kernel_occupancy
from aaco_pipelines.execution.gpu_counters import DTYPES
from aaco_pipelines.foundation.sql import used_parameters
from aaco_pipelines.tracelake.schema import (
    COUNTER_ROOFLINE,
    KERNEL_DIAGNOSES,
    conform,
    empty_table,
)
from aaco_pipelines.tracelake.store import TraceLake

# At half a roof or more, the roof is what holds the kernel, whatever its occupancy: more waves
# cannot beat a roof.
ROOF_SHARE = 0.5
LOW_OCCUPANCY = 0.25  # 2 of 8 waves per SIMD (CDNA), 4 of 16 (RDNA): too few to hide latency
LOW_GRID_FILL = 0.5  # half the GPU's wave slots idle for want of work
DIVERGENCE = 0.5  # VALU work with fewer than half a wave's lanes active: divergence
# Counted and cost-model FLOPs further apart than this are reported: either the cost model is
# wrong about the op, or the kernels do work the op does not need (padding, recomputation, a slow
# algorithm).
DISAGREEMENT = 2.0
FINDING_MIN_SHARE = 0.05  # kernels with less of the time make no recommendation
LEVELS = ("HBM", "L2", "LDS")  # the counted memory levels, outermost first
CLASSES = (  # a kernel's class is the first that holds, in this order
    "compute_throughput_limited",
    "memory_bandwidth_bound",
    "under_occupied",
    "divergence_limited",
    "latency_bound",
    "not_judged",
)
ACTIONS = {
    "compute_throughput_limited": "use a faster data type or the matrix cores for",
    "memory_bandwidth_bound": "cut the bytes moved by (fuse, lower precision, better reuse)",
    "under_occupied": "raise the occupancy of",
    "divergence_limited": "make the threads of a wave take the same branch (or size workgroups "
    "in multiples of 64) in",
    "latency_bound": "give more independent work per wave to",
}


@dataclass(frozen=True)
class KernelDiagnoses:
    kernels: pa.Table  # KERNEL_DIAGNOSES, most time first
    nodes: pa.Table  # COUNTER_ROOFLINE, most time first

    def findings(self, limit: int = 3) -> list[dict]:
        """The judged kernels with at least FINDING_MIN_SHARE of the time, most time first."""
        rows = [
            row
            for row in self.kernels.to_pylist()
            if row["kernel_class"] in ACTIONS and (row["share"] or 0) >= FINDING_MIN_SHARE
        ]
        return rows[:limit]


def diagnose_kernels(
    lake: TraceLake, session_id: str, envelope: HardwareEnvelope | None
) -> KernelDiagnoses:
    """Every device kernel of the session judged, and the counted roofline per node; empty for
    a session without device kernels (the CPU provider's nodes are not GPU kernels)."""
    with lake.connect() as con:
        occupancy = kernel_occupancy(con, session_id)
        if occupancy.num_rows == 0:
            return KernelDiagnoses(empty_table(KERNEL_DIAGNOSES), empty_table(COUNTER_ROOFLINE))
        counted = kernel_hardware_metrics(con, session_id)
    places = _kernel_places(lake, session_id)
    with duckdb.connect() as con:
        con.register("occupancy", occupancy)
        con.register("counted", counted)
        con.register("work", kernel_hardware_summary(counted))
        con.register("places", places)
        params = {"sid": session_id, **_roofs(envelope)}
        kernels = con.sql(KERNELS_SQL, params=used_parameters(KERNELS_SQL, params))
        kernels = kernels.to_arrow_table()
        kernels = _with_texts(kernels)
        con.register("judged", kernels)
        cost = _model_cost(lake, session_id)
        con.register("cost", cost)
        nodes = con.sql(NODES_SQL, params=used_parameters(NODES_SQL, params)).to_arrow_table()
    nodes = nodes.append_column("disagreement", pa.array(_disagreements(nodes), pa.string()))
    return KernelDiagnoses(conform(kernels, KERNEL_DIAGNOSES), conform(nodes, COUNTER_ROOFLINE))


def recommendations(
    diagnoses: KernelDiagnoses, gains: dict[str, float] | None = None
) -> list[tuple[str, str, float | None]]:
    """The kernels' findings as (action, why, ns their node saves at 2x or None when unknown),
    by the end-to-end gain of their node (`gains`: runtime node -> ns saved at 2x, from the
    critical path), then by their share of kernel time."""
    gains = gains or {}
    rows = sorted(
        diagnoses.findings(),
        key=lambda row: (-(gains.get(row["node_name"]) or 0.0), -(row["share"] or 0.0)),
    )
    return [(_action(row), row["finding"], gains.get(row["node_name"])) for row in rows]


def _action(row: dict) -> str:
    """What to do about a judged kernel (a grid too small needs more work, not fewer VGPRs)."""
    where = row["node_name"] or row["kernel_name"]
    if row["kernel_class"] == "under_occupied" and row["limiter"] == "grid":
        return f"give each dispatch more work (a larger batch, fused launches) in {where}"
    return f"{ACTIONS[row['kernel_class']]} {where}"


def _roofs(envelope: HardwareEnvelope | None) -> dict:
    """The envelope's peaks as query parameters: fp32 and each data type's, the bandwidth, and
    the GPU's L2 and LDS ceilings (a GPU envelope's published levels only: a CPU envelope's
    "L2" is the host's cache)."""
    peaks = envelope.gemm_peaks() if envelope is not None else {}
    roofs = {f"peak_{d}": peaks.get(d, peaks.get("fp32")) for d in DTYPES}
    levels = envelope.cache_bandwidth if envelope is not None and envelope.device else {}
    return {
        **roofs,
        "bandwidth": envelope.bandwidth.peak if envelope is not None else None,
        **{f"{level.lower()}_bandwidth": _peak_of(levels.get(level)) for level in LEVELS[1:]},
    }


def _peak_of(peak: ResourcePeak | None) -> float | None:
    return peak.peak if peak is not None else None


def _kernel_places(lake: TraceLake, session_id: str) -> pa.Table:
    """(kernel_name, node_name, dispatches, ns, iterations): where each kernel ran, as the
    attribution stage stored it (analysis.attribution.session.kernel_places)."""
    return lake.query(
        "SELECT kernel_name, node_name, dispatches, ns, iterations FROM kernel_places "
        "WHERE session_id = $sid",
        {"sid": session_id},
    )


def _model_cost(lake: TraceLake, session_id: str) -> pa.Table:
    """The cost model's FLOPs and bytes of the ONNX nodes each runtime node ran."""
    return lake.query(
        """
        SELECT a.runtime_node AS node_name, sum(g.flops * coalesce(a.share, 1)) AS model_flops,
               sum(g.bytes_moved * coalesce(a.share, 1)) AS model_bytes
        FROM node_attribution a
        JOIN session_records s ON s.session_id = a.session_id
        JOIN graph_nodes g ON g.model_sha256 = s.model_sha256 AND g.node_name = a.onnx_node
        WHERE a.session_id = $sid AND a.runtime_node IS NOT NULL
        GROUP BY a.runtime_node
        """,
        {"sid": session_id},
    )


KERNELS_SQL = f"""
WITH shapes AS (  -- a kernel's resource configuration with the most time stands for it
    SELECT device_id, kernel_name, any_value(gfx) AS gfx,
           sum(dispatches)::BIGINT AS dispatches, sum(total_ns)::BIGINT AS total_ns,
           arg_max(achievable_waves, total_ns) AS achievable_waves,
           arg_max(max_waves, total_ns) AS max_waves, arg_max(occupancy, total_ns) AS occupancy,
           arg_max(limiter, total_ns) AS limiter, arg_max(grid_fill, total_ns) AS grid_fill,
           bool_or(uses_scratch) AS uses_scratch,
           arg_max(reason, total_ns) AS reason, arg_max(caveat, total_ns) AS caveat,
           arg_max(wave_slots, total_ns) AS wave_slots,
           arg_max(vgprs_counted, total_ns) AS vgprs_counted,
           arg_max(accum_vgpr_count, total_ns) AS accum_vgpr_count,
           arg_max(sgpr_count, total_ns) AS sgpr_count, arg_max(lds_bytes, total_ns) AS lds_bytes,
           arg_max(waves_per_workgroup, total_ns) AS waves_per_workgroup
    FROM occupancy GROUP BY device_id, kernel_name
),
homes AS (  -- the runtime node with most of the kernel's time
    SELECT kernel_name, arg_max(node_name, ns) AS node_name FROM places GROUP BY kernel_name
),
joined AS (
    SELECT s.*, h.node_name, s.total_ns / sum(s.total_ns) OVER () AS share,
           t.dtype, t.flops_per_s, t.bytes_per_s, t.l2_hit_rate, t.lds_bank_conflict_rate,
           t.valu_thread_utilization,
           CASE WHEN t.dtype IS NOT NULL THEN CASE t.dtype
               {" ".join(f"WHEN '{d}' THEN $peak_{d}" for d in DTYPES)} END
           END AS roof_flops_per_s,
           CASE WHEN t.bytes_per_s IS NOT NULL THEN $bandwidth END AS roof_bytes_per_s
    FROM shapes s
    LEFT JOIN work t ON t.device = s.device_id AND t.kernel_name = s.kernel_name
    LEFT JOIN homes h ON h.kernel_name = s.kernel_name
),
judged AS (
    SELECT *, flops_per_s / roof_flops_per_s AS compute_utilization,
           bytes_per_s / roof_bytes_per_s AS bandwidth_utilization
    FROM joined
)
SELECT $sid AS session_id, *,
    CASE
        WHEN compute_utilization >= {ROOF_SHARE} THEN 'compute_throughput_limited'
        WHEN bandwidth_utilization >= {ROOF_SHARE} THEN 'memory_bandwidth_bound'
        WHEN occupancy <= {LOW_OCCUPANCY}
             OR (limiter = 'grid' AND grid_fill < {LOW_GRID_FILL}) THEN 'under_occupied'
        WHEN valu_thread_utilization < {DIVERGENCE} THEN 'divergence_limited'
        WHEN compute_utilization IS NOT NULL OR bandwidth_utilization IS NOT NULL
             OR valu_thread_utilization IS NOT NULL THEN 'latency_bound'
        ELSE 'not_judged'
    END AS kernel_class
FROM judged
ORDER BY total_ns DESC, device_id, kernel_name
"""


NODES_SQL = """
WITH per_dispatch AS (
    SELECT kernel_name, sum(total_flops) / count(*) AS flops, sum(hbm_bytes) / count(*) AS bytes,
           sum(l2_bytes) / count(*) AS l2, sum(lds_bytes) / count(*) AS lds,
           count(total_flops) = count(*) AS all_flops, count(hbm_bytes) = count(*) AS all_bytes,
           count(l2_bytes) = count(*) AS all_l2, count(lds_bytes) = count(*) AS all_lds
    FROM counted GROUP BY kernel_name
),
per_node AS (
    SELECT p.node_name,
           sum(p.ns / p.iterations) AS time_ns,
           CASE WHEN bool_and(coalesce(c.all_flops, false))
                THEN sum(p.dispatches / p.iterations * c.flops) END AS counted_flops,
           CASE WHEN bool_and(coalesce(c.all_bytes, false))
                THEN sum(p.dispatches / p.iterations * c.bytes) END AS counted_bytes,
           CASE WHEN bool_and(coalesce(c.all_l2, false))
                THEN sum(p.dispatches / p.iterations * c.l2) END AS counted_l2_bytes,
           CASE WHEN bool_and(coalesce(c.all_lds, false))
                THEN sum(p.dispatches / p.iterations * c.lds) END AS counted_lds_bytes
    FROM places p LEFT JOIN per_dispatch c USING (kernel_name)
    WHERE p.node_name IS NOT NULL AND p.iterations > 0
    GROUP BY p.node_name
),
typed AS (  -- the node's roof: the data type most of its kernels' counted time was in
    SELECT node_name, arg_max(roof_flops_per_s, total_ns) AS roof_flops_per_s
    FROM judged WHERE node_name IS NOT NULL AND roof_flops_per_s IS NOT NULL GROUP BY node_name
),
placed AS (
    SELECT n.*, n.counted_flops / nullif(n.counted_bytes, 0) AS arithmetic_intensity,
           n.counted_flops / (n.time_ns * 1e-9) AS achieved_flops_per_s,
           n.counted_bytes / (n.time_ns * 1e-9) AS achieved_bytes_per_s,
           n.counted_flops / nullif(n.counted_l2_bytes, 0) AS l2_intensity,
           n.counted_l2_bytes / (n.time_ns * 1e-9) AS achieved_l2_bytes_per_s,
           n.counted_flops / nullif(n.counted_lds_bytes, 0) AS lds_intensity,
           n.counted_lds_bytes / (n.time_ns * 1e-9) AS achieved_lds_bytes_per_s,
           coalesce(t.roof_flops_per_s, $peak_fp32) AS roof_flops_per_s,
           $bandwidth AS roof_bytes_per_s, $l2_bandwidth AS roof_l2_bytes_per_s,
           $lds_bandwidth AS roof_lds_bytes_per_s, c.model_flops, c.model_bytes
    FROM per_node n LEFT JOIN typed t USING (node_name) LEFT JOIN cost c USING (node_name)
    WHERE n.counted_flops IS NOT NULL OR n.counted_bytes IS NOT NULL
       OR n.counted_l2_bytes IS NOT NULL OR n.counted_lds_bytes IS NOT NULL
),
shared AS (  -- each level's achieved bytes/s as a share of its ceiling
    SELECT *, achieved_bytes_per_s / roof_bytes_per_s AS hbm_share,
           achieved_l2_bytes_per_s / roof_l2_bytes_per_s AS l2_share,
           achieved_lds_bytes_per_s / roof_lds_bytes_per_s AS lds_share
    FROM placed
)
SELECT $sid AS session_id, node_name, time_ns, counted_flops, counted_bytes,
       arithmetic_intensity, achieved_flops_per_s, achieved_bytes_per_s, roof_flops_per_s,
       roof_bytes_per_s,
       CASE WHEN arithmetic_intensity IS NULL OR roof_flops_per_s IS NULL OR roof_bytes_per_s IS NULL
            THEN NULL
            WHEN arithmetic_intensity >= roof_flops_per_s / roof_bytes_per_s THEN 'compute'
            ELSE 'memory' END AS bound,
       CASE bound WHEN 'compute' THEN achieved_flops_per_s / roof_flops_per_s
                  WHEN 'memory' THEN achieved_bytes_per_s / roof_bytes_per_s END AS utilization,
       hbm_share, counted_l2_bytes, l2_intensity, achieved_l2_bytes_per_s, roof_l2_bytes_per_s,
       l2_share, counted_lds_bytes, lds_intensity, achieved_lds_bytes_per_s,
       roof_lds_bytes_per_s, lds_share,
       -- the level closest to its ceiling binds (outermost first on a tie)
       CASE WHEN coalesce(hbm_share, l2_share, lds_share) IS NULL THEN NULL
            WHEN coalesce(hbm_share, -1) >= greatest(coalesce(l2_share, -1),
                                                     coalesce(lds_share, -1)) THEN 'HBM'
            WHEN coalesce(l2_share, -1) >= coalesce(lds_share, -1) THEN 'L2'
            ELSE 'LDS' END AS binding_level,
       model_flops, model_bytes, counted_flops / nullif(model_flops, 0) AS flops_ratio
FROM shared
ORDER BY time_ns DESC, node_name
"""


def _with_texts(kernels: pa.Table) -> pa.Table:
    """The occupancy sentence and the finding of each kernel (one row per kernel name: an
    aggregate, not a trace)."""
    rows = kernels.to_pylist()
    occupancy = [describe(row) if row["max_waves"] or row["reason"] else None for row in rows]
    findings = [_finding(row, text) for row, text in zip(rows, occupancy, strict=True)]
    return kernels.append_column("occupancy_text", pa.array(occupancy, pa.string())).append_column(
        "finding", pa.array(findings, pa.string())
    )


def _finding(row: dict, occupancy: str | None) -> str:
    """Where, how much and why, in one sentence: "block2/conv: 22 % of kernel time, occupancy
    limited by VGPRs to 4 of 8 waves per SIMD (128 VGPRs)"."""
    where = row["node_name"] or row["kernel_name"]
    head = f"{where}: {row['share']:.0%} of kernel time"
    kind = row["kernel_class"]
    if kind == "compute_throughput_limited":
        why = f"{row['compute_utilization']:.0%} of the {row['dtype']} peak counted"
    elif kind == "memory_bandwidth_bound":
        why = f"{row['bandwidth_utilization']:.0%} of the memory bandwidth counted"
    elif kind == "latency_bound":
        shares = [
            f"{value:.0%} of the {what}"
            for value, what in (
                (row["compute_utilization"], f"{row['dtype']} peak"),
                (row["bandwidth_utilization"], "bandwidth"),
            )
            if value is not None
        ]
        why = f"below both roofs ({', '.join(shares) or 'not counted'}) with {occupancy}"
    elif kind == "under_occupied":
        why = occupancy
    elif kind == "divergence_limited":
        why = f"its VALU work kept {row['valu_thread_utilization']:.0%} of a wave's lanes busy"
    else:
        why = f"not judged without counters ({occupancy})" if occupancy else "not judged"
    return f"{head}, {why}"


def _disagreements(nodes: pa.Table) -> list[str | None]:
    """Where counted and cost-model FLOPs differ by more than DISAGREEMENT, what that means."""
    texts = []
    for ratio in nodes["flops_ratio"].to_pylist():
        if ratio is None or 1 / DISAGREEMENT <= ratio <= DISAGREEMENT:
            texts.append(None)
        elif ratio > DISAGREEMENT:
            texts.append(
                f"the hardware counted {ratio:.1f}x the cost model's FLOPs: the kernels do work "
                "the op does not need (padding, recomputation, a slow algorithm), or the cost "
                "model misses some"
            )
        else:
            texts.append(
                f"the hardware counted {ratio:.2f}x the cost model's FLOPs: the cost model "
                "overstates the op, or part of its work ran in kernels that were not counted"
            )
    return texts

"""Where the session sits against the hardware and its own structure: the roofline, each GPU
kernel's diagnosis, the critical path with its what-ifs, and the structural diff."""

from __future__ import annotations

from aaco_pipelines.report.markdown_tables import num, pct
from aaco_pipelines.report.section_model import Section, Table, maybe
from aaco_pipelines.report.units import duration


def roofline_section(roofline: dict) -> Section:
    envelope, note = roofline["envelope"], roofline.get("envelope_note")
    if envelope is None:
        text = [note] if note else ["No hardware envelope for this session."]
        columns = [c for c in ROOFLINE_COLUMNS if c[0] not in ("bound", "utilization")]
        rows = roofline["top_points"]
        return Section(
            "roofline",
            "Roofline",
            text,
            [Table("Ops by time (not judged)", rows, columns, name="roofline_top_ops")],
        )
    peaks = ", ".join(f"{d} {p:.4g}" for d, p in (envelope.get("gemm_peaks") or {}).items())
    if envelope.get("source") == "datasheet":
        reference = envelope.get("reference") or {}
        text = [
            f"DATASHEET envelope {envelope['envelope_id']} (published peaks, not measured): "
            f"{reference.get('product')} ({envelope.get('device_arch')}), "
            f"{reference.get('url')}; per-CU rates: {reference.get('rates')}"
            + (f" {reference['rates_url']}" if reference.get("rates_url") else "")
            + f". Matched by {reference.get('matched_by')}.",
        ]
    else:
        device = envelope.get("device_arch")
        text = [
            f"Measured envelope {envelope['envelope_id']} ({envelope['target']}"
            + (f", {envelope.get('device_name') or ''} {device}" if device else "")
            + f", measured {envelope['measured_at']}): fp32 GEMM spread "
            f"{envelope['gemm_low']:.3g} – {envelope['gemm_high']:.3g} FLOP/s, bandwidth spread "
            f"{envelope['bandwidth_low']:.3g} – {envelope['bandwidth_high']:.3g} B/s."
        ]
    text.append(
        f"GEMM peaks per data type (FLOP/s): {peaks}; bandwidth "
        f"{envelope['bandwidth_bytes_per_s']:.4g} B/s; fp32 ridge point "
        f"{envelope['ridge_point']:.3g} FLOP/B. Each op is judged under the GEMM roof of its data "
        "type (fp32 when its type has no peak) and the bandwidth of the smallest memory level "
        "its bytes fit (ceiling); a roof an op beat is lifted to it (lifted)."
    )
    ceilings = envelope.get("memory_ceilings") or []
    if len(ceilings) > 1:
        text.append(
            "Memory ceilings: "
            + ", ".join(
                f"{c['level']} {c['bytes_per_s']:.3g} B/s"
                + (f" (up to {c['capacity_bytes'] / 2**20:.3g} MiB)" if c["capacity_bytes"] else "")
                for c in ceilings
            )
            + "."
        )
    if envelope.get("theoretical_share"):
        text.append(
            f"The measured fp32 GEMM peak is {envelope['theoretical_share']:.0%} of the host's "
            "theoretical peak (cores x clock x SIMD lanes x 2 FMA units x 2)."
        )
    if note:
        text.append(f"Chosen: {note}.")
    return Section(
        "roofline",
        "Roofline",
        text,
        [
            Table(
                "Ops by time",
                roofline["top_points"],
                ROOFLINE_COLUMNS,
                name="roofline_top_ops",
                brief=BRIEF_ROOFLINE_COLUMNS,
            )
        ],
        ["roofline"],
    )


ROOFLINE_COLUMNS = [
    ("onnx_node", "node", None),
    ("op_type", "op", None),
    ("dtype", "dtype", None),
    ("roof_dtype", "roof", None),
    ("time_ns", "time / iter", duration),
    ("arithmetic_intensity", "FLOP/B", num),
    ("achieved_flops_per_s", "FLOP/s", num),
    ("bound", "bound", None),
    ("roof_level", "ceiling", None),
    ("utilization", "of roof", pct),
    ("roof_lifted", "lifted", None),
]


# six columns: FLOP/s, dtypes, roof, ceiling and lifts are in the HTML report
BRIEF_ROOFLINE_COLUMNS = (
    "onnx_node", "op_type", "time_ns", "arithmetic_intensity", "bound", "utilization"
)  # fmt: skip

KERNEL_COLUMNS = [
    ("kernel_name", "kernel", None),
    ("node_name", "node", None),
    ("share", "share", pct),
    ("kernel_class", "class", None),
    ("occupancy_text", "occupancy", None),
    ("flops_per_s", "counted FLOP/s", num),
    ("compute_utilization", "of peak", pct),
    ("bytes_per_s", "counted B/s", num),
    ("bandwidth_utilization", "of bandwidth", pct),
    ("l2_hit_rate", "L2 hit", pct),
]
COUNTER_ROOFLINE_COLUMNS = [
    ("node_name", "node", None),
    ("time_ns", "time / iter", duration),
    ("counted_flops", "counted FLOPs", num),
    ("counted_bytes", "counted bytes", num),
    ("arithmetic_intensity", "FLOP/B", num),
    ("bound", "bound", None),
    ("utilization", "of roof", pct),
    ("hbm_share", "of HBM", pct),
    ("l2_share", "of L2", pct),
    ("lds_share", "of LDS", pct),
    ("binding_level", "binds", None),
    ("model_flops", "cost-model FLOPs", num),
    ("flops_ratio", "counted / model", num),
    ("disagreement", "note", None),
]


def kernels_section(kernels: dict) -> Section:
    """Each GPU kernel's occupancy and counted work against its roofs, its class and finding;
    the counted roofline per node beside the cost model's."""
    text = [
        "Per GPU kernel, most time first: the occupancy its registers, LDS and grid allow (every "
        "trace), what the hardware counted against the envelope's roofs (sessions with "
        "counters), and the class that follows (compute_throughput_limited or "
        "memory_bandwidth_bound at half a roof or more; under_occupied at a quarter of the "
        "waves or a grid filling under half the GPU; latency_bound below both roofs; "
        "not_judged where a trace alone cannot tell)."
    ]
    text += [row["finding"] for row in kernels["diagnoses"] if row.get("finding")][:3]
    text += [
        f"{row['node_name']}: {row['disagreement']}"
        for row in kernels["counter_roofline"]
        if row.get("disagreement")
    ]
    tables = [
        Table(
            "Kernels: why they take their time",
            kernels["diagnoses"],
            KERNEL_COLUMNS,
            name="kernel_findings",
            brief=("kernel_name", "share", "kernel_class", "occupancy_text",
                   "compute_utilization", "bandwidth_utilization"),
        )
    ]  # fmt: skip
    if kernels["counter_roofline"]:
        tables.append(
            Table(
                "Counted roofline per node (hardware counters beside the cost model)",
                kernels["counter_roofline"],
                COUNTER_ROOFLINE_COLUMNS,
                name="counter_roofline",
                brief=(
                    "node_name",
                    "time_ns",
                    "arithmetic_intensity",
                    "bound",
                    "utilization",
                    "binding_level",
                ),
            )  # fmt: skip
        )
    return Section("kernels", "Kernels: occupancy, counters, class", text, tables)


CRITICAL_PATH_COLUMNS = [
    ("onnx_node", "node", None),
    ("runtime_node", "runtime node", None),
    ("gain_2x_ns", "saved at 2x", duration),
    ("kernel_ns", "time / iter", duration),
    ("critical_ns", "on the path", duration),
    ("slack_ns", "slack", duration),
    ("overlap_ns", "hidden (overlap)", duration),
]


def critical_path_section(path: dict) -> Section:
    """What to fix first: nodes ranked by the end-to-end time a 2x faster one saves, re-timed
    on the iteration's DAG; with each one's time on the critical path and its slack."""
    dag = "kernels on device queues behind their host launches"
    if path["dag"] == "host_threads":
        dag = "node executions on the runtime's threads"
    text = [
        f"Each profiled iteration as a DAG of {dag}, over {path['iterations']} iterations: "
        f"critical path {duration(path['path_p50_ns'])} per iteration, "
        f"{maybe(path['host_share'], '{:.0%}')} of it not covered by node time (host launches, "
        f"scheduling, the executor's own time); parallelism "
        f"{maybe(path['parallelism'], '{:.2f}')}.",
        "Share is not impact: a node's gain is the re-timed DAG's, not its share of time "
        "(`aaco whatif --node N --speedup S` for any speedup).",
        *(f"Caveat: {caveat}" for caveat in path["caveats"]),
    ]
    table = Table(
        "What to fix first: saved end to end at 2x",
        path["nodes"],
        CRITICAL_PATH_COLUMNS,
        name="fix_first",
        brief=tuple(key for key, _, _ in CRITICAL_PATH_COLUMNS if key != "overlap_ns"),
    )
    return Section("critical-path", "Critical path: what to fix first", text, [table])


FUSION_COLUMNS = [
    ("change", "change", None),
    ("where", "at", None),
    ("label", "fused op", None),
    ("kernels_a", "kernels/iter before", num),
    ("kernels_b", "after", num),
    ("delta_ms", "time change, ms", num),
    ("ci_low_ms", "CI low", num),
    ("ci_high_ms", "CI high", num),
]
NODE_TIME_COLUMNS = [
    ("node", "node", None),
    ("op_type", "op", None),
    ("a_ms", "ms before", num),
    ("b_ms", "ms after", num),
    ("delta_ms", "change, ms", num),
    ("ci_low_ms", "CI low", num),
    ("ci_high_ms", "CI high", num),
]


def structure_section(structure: dict) -> Section:
    """What changed in the compiled graph since the model's previous session: fusions,
    kernel counts, and the nodes whose time moved most (aaco diff --structure has it all)."""
    text = [line.strip() for line in structure["headline"].splitlines()] + [
        f"Against the model's previous session on this target ({structure['session_a']}); "
        f"`aaco diff --structure {structure['session_a']} {structure['session_b']}` lists "
        "every node."
    ]
    tables = []
    if structure["fusions"]:
        tables.append(
            Table(
                "Fusions lost, gained or reshaped",
                structure["fusions"],
                FUSION_COLUMNS,
                name="fusion_changes",
                brief=("change", "where", "label", "kernels_a", "kernels_b", "delta_ms"),
            )
        )
    tables.append(
        Table(
            "Nodes whose time moved most",
            structure["nodes"],
            NODE_TIME_COLUMNS,
            name="nodes_moved",
            brief=("node", "op_type", "a_ms", "b_ms", "delta_ms"),
        )
    )
    return Section("structure", "Structure since the previous session", text, tables)

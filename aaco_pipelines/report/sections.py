"""The report's layout: its sections, each with sentences, tables and plots, from the content.

Markdown and HTML both render this one layout, so a section or a column added here appears in
both formats. Tables are (rows, columns) as `report.markdown_tables.markdown_table` takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aaco_pipelines.analysis.attribution.ranking_stability import (
    MIN_ITERATIONS,
    STABLE,
    TICK_NS,
    TIE,
)
from aaco_pipelines.analysis.bottleneck.classification import CLOSE_CALL, close_call_text
from aaco_pipelines.analysis.comparison.across_sessions import rivals, rivals_text
from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality
from aaco_pipelines.report.content import DRIFT_PLOT_METRICS
from aaco_pipelines.report.markdown_tables import num, pct
from aaco_pipelines.report.objectives_text import OBJECTIVE_COLUMNS, shown
from aaco_pipelines.report.units import by_unit, duration

Columns = Sequence[tuple[str, str, Callable | None]]


@dataclass(frozen=True)
class Table:
    caption: str
    rows: list[dict]
    columns: Columns


@dataclass(frozen=True)
class Section:
    key: str  # anchor id
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # plot ids, see html.session_plots


def drift_plot_id(metric: str) -> str:
    return f"drift-{metric}"


def report_sections(content: dict) -> list[Section]:
    return [
        _summary(content),
        _bottleneck(content["bottleneck"], content.get("measurement")),
        _derived(content["derived_metrics"]),
        _time(content),
        _roofline(content["roofline"]),
        *([_kernels(content["kernels"])] if content["kernels"]["diagnoses"] else []),
        *([_critical_path(content["critical_path"])] if content.get("critical_path") else []),
        *([_structure(content["structure"])] if content.get("structure") else []),
        _telemetry(content["telemetry"]),
        _drift(content["drift"]),
        *([_objectives(content["objectives"])] if content.get("objectives") else []),
        *([_generation(content["generation"])] if content.get("generation") else []),
        _environment(content["environment"]),
    ]


def _ci(interval: list[float] | None) -> str:
    return f"{duration(interval[0])} – {duration(interval[1])}" if interval else "—"


def _maybe(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def _measurement_line(measurement: dict | None) -> str:
    """Whether the numbers below can be trusted, first (measurement_quality)."""
    if measurement is None:
        return "Measurement quality: not judged (a session loaded before it was)."
    line = MeasurementQuality(**measurement).line()
    return line[0].upper() + line[1:] + "."


def _summary(content: dict) -> Section:
    s, session = content["summary"], content["session"]
    level = f"{s['confidence']:.0%}"
    coverage = s["latency_p50_ci_coverage"]
    rows = [
        {
            "stat": "mean",
            "value": duration(s["latency_mean_ns"]),
            "ci": _ci(s["latency_mean_ci_ns"]),
        },
        {"stat": "p50", "value": duration(s["latency_p50_ns"]), "ci": _ci(s["latency_p50_ci_ns"])},
        {"stat": "p99", "value": duration(s["latency_p99_ns"])},
        {"stat": "min", "value": duration(s["latency_min_ns"])},
        {"stat": "std", "value": duration(s["latency_std_ns"])},
        {"stat": "throughput", "value": _maybe(s["throughput_per_s"], "{:.4g} /s")},
        {"stat": "measured iterations", "value": str(s["measured_iterations"])},
        {"stat": "profiled p50", "value": duration(s["profiled_latency_p50_ns"])},
        {"stat": "profiling overhead", "value": _maybe(s["profiling_overhead_pct"], "{:.1f}%")},
    ]
    text = [
        _measurement_line(content.get("measurement")),
        f"Model {session['model_name']} ({(session['model_sha256'] or '—')[:12]}), session "
        f"{session['session_id']}, started {session['started_at']} on target {session['target']} "
        f"with {', '.join(session['providers_used'] or []) or '—'} (trace: {session['trace_source']}).",
        f"Intervals at {level}: mean by {s['ci_methods']['mean']}; median by "
        f"{s['ci_methods']['median']}"
        + (f", achieved coverage {coverage:.1%}." if coverage is not None else "."),
    ]
    columns = [("stat", "", None), ("value", "value", None), ("ci", f"{level} CI", None)]
    return Section(
        "summary",
        "Summary",
        text,
        [Table("Latency of the measured pass", rows, columns)],
        ["latency-histogram", "iteration-latency"],
    )


def _bottleneck(report: dict | None, measurement: dict | None = None) -> Section:
    if report is None:
        return Section("bottleneck", "Bottleneck", ["Not classified: the analysis did not run."])
    heu = report["hardware_envelope_utilization"]
    source = report.get("envelope_source")
    text = [
        f"{report['bottleneck']} with confidence {report['confidence']:.2f}; dominant resource "
        f"{report['dominant_resource'] or '—'}, hardware envelope utilization "
        f"{pct(heu) if heu is not None else '—'}"
        + (f" (against the {source.upper()} envelope)." if source == "datasheet" else ".")
    ]
    close = close_call_text(report.get("close_calls"))
    if close:
        text.append(
            f"A close call: with its signals moved by {CLOSE_CALL:.0%} (their spread between two "
            f"quiet runs), the class would be {close}. Measure again, or read the evidence "
            "below, before acting on the class alone."
        )
    others = report.get("others") or []
    found = rivals(report["bottleneck"], others)
    if found:
        text.append(
            f"Across sessions: {rivals_text('bottleneck', found, others)}. Read the evidence "
            "below, or measure again, before acting on the class alone."
        )
    if measurement and measurement["verdict"] == "suspect":
        text.append(
            "This diagnosis is uncertain: it rests on a measurement judged suspect ("
            + "; ".join(measurement["reasons"])
            + "). Measure again on a quiet host before acting on it."
        )
    if source == "none":
        text.append(
            "No hardware envelope: utilization and roofline signals are not judged (see Roofline)."
        )
    posterior = sorted(report["posterior"].items(), key=lambda kv: -kv[1])
    present = [e for e in report["evidence"] if e["value"] is not None]
    absent = [e["signal"] for e in report["evidence"] if e["value"] is None]
    if absent:
        text.append("Not measured (no evidence either way): " + ", ".join(absent) + ".")
    return Section(
        "bottleneck",
        "Bottleneck",
        text,
        [
            Table(
                "Posterior",
                [{"class": k, "p": v} for k, v in posterior],
                [("class", "class", None), ("p", "posterior", num)],
            ),
            Table(
                "Evidence",
                present,
                [
                    ("signal", "signal", None),
                    ("value", "value", num),
                    ("mean", "mean", num),
                    ("bin", "bin", None),
                    ("favours", "favours", None),
                    ("why_it_matters", "why it matters", None),
                ],
            ),
            Table(
                "Recommendations",
                report["recommendations"] or [],
                [("rank", "#", None), ("action", "action", None), ("why", "why", None)],
            ),
        ],
    )


def _derived(metrics: list[dict]) -> Section:
    rows = [{**m, "shown": by_unit(m["value"], m["unit"])} for m in metrics]
    columns = [
        ("metric", "metric", None),
        ("shown", "value", None),
        ("meaning", "meaning", None),
    ]
    return Section("derived-metrics", "Derived metrics", [], [Table("", rows, columns)])


OP_COLUMNS = [
    ("name", "name", None),
    ("op_type", "op", None),
    ("mean_ns", "mean / iter", duration),
    ("p50_ns", "p50 / iter", duration),
    ("share", "share", pct),
    ("mean_share", "mean share", pct),
    ("p_top", "P(first)", pct),
    ("p_top3", "P(top 3)", pct),
    ("kernels_per_iteration", "kernels / iter", num),
]
OP_TYPE_COLUMNS = [c for c in OP_COLUMNS if c[0] != "op_type"]  # its name is the op type


def ranking_text(ranking: dict, top_ops: list[dict]) -> str | None:
    """Whether the top op (and the top three) can be named, from the bootstrap over the
    profiled iterations: the ops tied with it (ranking_stability.tied_with_top), else
    "uncertain" below ranking_stability.STABLE, with who else leads; and the ops the version's
    other sessions named first instead."""
    if not top_ops:
        return None
    stability, top = ranking.get("top_op_stability"), top_ops[0]["name"]
    if stability is None:
        return (
            f"Ranking stability not judged: {ranking.get('profiled_iterations')} profiled "
            f"iteration(s), fewer than {MIN_ITERATIONS}."
        )
    runs = f"bootstrap resamples of the {ranking.get('profiled_iterations')} profiled iterations"
    tied = ranking.get("tied") or []
    if tied:
        names = ", ".join(f"{t['name']} ({pct(t['share'])})" for t in tied)
        text = (
            f"Top ops tied: {top} ({pct(top_ops[0]['share'])}) with {names}: within "
            f"{TIE:.0%} (or {TICK_NS / 1e3:g} µs) of its median time, or first in "
            f"{1 - STABLE:.0%} or more of {runs} "
            f"({top} first in {stability:.0%}). Which of them leads is the run's luck, not the "
            "model's: treat them as one group."
        )
    elif stability >= STABLE:
        text = f"Top op {top}: first in {stability:.0%} of {runs}."
    else:
        leading = ", ".join(f"{r['name']} {r['p_top']:.0%}" for r in ranking["leading"][:3])
        text = (
            f"Top op uncertain: {top} is first in only {stability:.0%} of {runs} ({leading}). "
            "Profile more iterations, or measure on a quiet host, before acting on the order."
        )
    three = ranking.get("top3_stability")
    if three is not None and three < STABLE and len(top_ops) > 3:
        text += f" The top three are uncertain too: the same three lead in {three:.0%}."
    others = ranking.get("others") or []
    found = rivals(top, others, said=[t["name"] for t in tied])
    if found:
        text += (
            f" Across sessions: {rivals_text('top_op', found, others)}; treat them as one group."
        )
    return text


def _time(content: dict) -> Section:
    kernels = [
        ("kernel", "kernel", None),
        ("kernel_family", "family", None),
        ("op_type", "op", None),
        ("mean_ns", "mean / iter", duration),
        ("calls_per_iteration", "calls / iter", num),
        ("share", "share", pct),
    ]
    return Section(
        "time",
        "Where the time went",
        [
            "Per profiled iteration, ranked by median. Shares are of all attributed kernel time, "
            "from each op's median time per iteration (one preempted iteration reorders "
            "nothing); the mean-based share is beside it. P(first) and P(top 3): how often a "
            "bootstrap resample of the profiled iterations ranks the op so. Kernels: mean per "
            "iteration.",
            *filter(None, [ranking_text(content.get("ranking") or {}, content["top_ops"])]),
        ],
        [
            Table("Top ops (ONNX nodes)", content["top_ops"], OP_COLUMNS),
            Table("Top op types", content["top_op_types"], OP_TYPE_COLUMNS),
            Table("Top kernels", content["top_kernels"], kernels),
        ],
        ["op-breakdown"],
    )


def _roofline(roofline: dict) -> Section:
    envelope, note = roofline["envelope"], roofline.get("envelope_note")
    if envelope is None:
        text = [note] if note else ["No hardware envelope for this session."]
        columns = [c for c in ROOFLINE_COLUMNS if c[0] not in ("bound", "utilization")]
        rows = roofline["top_points"]
        return Section(
            "roofline", "Roofline", text, [Table("Ops by time (not judged)", rows, columns)]
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
        [Table("Ops by time", roofline["top_points"], ROOFLINE_COLUMNS)],
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


def _kernels(kernels: dict) -> Section:
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
    tables = [Table("Kernels: why they take their time", kernels["diagnoses"], KERNEL_COLUMNS)]
    if kernels["counter_roofline"]:
        tables.append(
            Table(
                "Counted roofline per node (hardware counters beside the cost model)",
                kernels["counter_roofline"],
                COUNTER_ROOFLINE_COLUMNS,
            )
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


def _critical_path(path: dict) -> Section:
    """What to fix first: nodes ranked by the end-to-end time a 2x faster one saves, re-timed
    on the iteration's DAG; with each one's time on the critical path and its slack."""
    dag = "kernels on device queues behind their host launches"
    if path["dag"] == "host_threads":
        dag = "node executions on the runtime's threads"
    text = [
        f"Each profiled iteration as a DAG of {dag}, over {path['iterations']} iterations: "
        f"critical path {duration(path['path_p50_ns'])} per iteration, "
        f"{_maybe(path['host_share'], '{:.0%}')} of it not covered by node time (host launches, "
        f"scheduling, the executor's own time); parallelism "
        f"{_maybe(path['parallelism'], '{:.2f}')}.",
        "Share is not impact: a node's gain is the re-timed DAG's, not its share of time "
        "(`aaco whatif --node N --speedup S` for any speedup).",
        *(f"Caveat: {caveat}" for caveat in path["caveats"]),
    ]
    table = Table("What to fix first: saved end to end at 2x", path["nodes"], CRITICAL_PATH_COLUMNS)
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


def _structure(structure: dict) -> Section:
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
            Table("Fusions lost, gained or reshaped", structure["fusions"], FUSION_COLUMNS)
        )
    tables.append(Table("Nodes whose time moved most", structure["nodes"], NODE_TIME_COLUMNS))
    return Section("structure", "Structure since the previous session", text, tables)


def _telemetry(series: list[dict]) -> Section:
    rows = [{**s, **{k: by_unit(s[k], s["unit"]) for k in ("mean", "min", "max")}} for s in series]
    columns = [
        ("series", "series", None),
        ("samples", "samples", None),
        ("mean", "mean", None),
        ("min", "min", None),
        ("max", "max", None),
    ]
    text = [] if series else ["No telemetry was recorded."]
    return Section(
        "telemetry",
        "Telemetry",
        text,
        [Table("Over the whole run", rows, columns)] if rows else [],
        ["telemetry"] if rows else [],
    )


def _drift(verdicts: list[dict]) -> Section:
    if not verdicts:
        return Section("drift", "Drift", ["No drift verdicts for this session."])
    rows = [
        {
            **v,
            "ci": f"{v['ci_low']:+.1f}% – {v['ci_high']:+.1f}%"
            if v["ci_low"] is not None
            else None,
            "changes": "; ".join(
                f"{c['shift_pct']:+.1f}% at {c['session_id']}" for c in v["change_points"]
            )
            or None,
        }
        for v in verdicts
    ]
    columns = [
        ("metric", "metric", None),
        ("verdict", "verdict", None),
        ("effect_pct", "effect %", lambda x: f"{x:+.2f}"),
        ("ci", "95% CI", None),
        ("decided_by", "decided by", None),
        ("history_points", "history", None),
        ("changes", "change points", None),
    ]
    shown = {v["metric"] for v in verdicts}
    return Section(
        "drift",
        "Drift",
        ["Verdicts on this session against the model's earlier sessions."],
        [Table("", rows, columns)],
        [drift_plot_id(m) for m in DRIFT_PLOT_METRICS if m in shown],
    )


def _objectives(objectives: list[dict]) -> Section:
    breached = [o["objective"] for o in objectives if o["verdict"] == "breached"]
    text = [
        "The model's objectives (SLOs): a limit is breached only when the figure's 95 % "
        "interval, widened by how much it moves from session to session, lies beyond it; met "
        "when it lies within; uncertain in between.",
        f"Breached: {', '.join(breached)}." if breached else "No objective is breached.",
    ]
    if any(o["suspect"] for o in objectives):
        text.append(
            "A breach marked (suspect measurement) was measured on a host the quality check "
            "suspects: it is shown, not confirmed."
        )
    return Section(
        "objectives",
        "Objectives",
        text,
        [Table("", [shown(o) for o in objectives], OBJECTIVE_COLUMNS)],
    )


def _generation(generation: dict) -> Section:
    """LLM generation: figures per scenario (LoadGen's own beside), the curves, time per phase."""
    figures = [
        ("scenario", "scenario", None),
        ("requests", "requests", num),
        ("ttft_p50_ns", "TTFT p50", duration),
        ("ttft_p99_ns", "TTFT p99", duration),
        ("loadgen_ttft_p50_ns", "TTFT p50 (LoadGen)", duration),
        ("tpot_p50_ns", "TPOT p50", duration),
        ("tpot_p99_ns", "TPOT p99", duration),
        ("loadgen_tpot_p50_ns", "TPOT p50 (LoadGen)", duration),
        ("itl_p99_ns", "ITL p99", duration),
        ("e2e_p50_ns", "e2e p50", duration),
        ("queue_mean_ns", "queueing (mean)", duration),
        ("output_tokens_per_s", "tokens/s", num),
        ("goodput_per_s", "goodput/s", num),
        ("slo_attainment", "within SLO", pct),
    ]
    curves = [
        ("batch_size", "batch", num),
        ("prompt_tokens", "prompt tokens", num),
        ("ttft_p50_ns", "TTFT p50", duration),
        ("tpot_p50_ns", "TPOT p50", duration),
        ("e2e_p50_ns", "e2e p50", duration),
        ("output_tokens_per_s", "tokens/s", num),
    ]
    phase = [
        ("name", "op type", None),
        ("mean_ns", "mean / step", duration),
        ("share", "share", pct),
    ]
    return Section(
        "generation",
        "LLM generation",
        [
            f"Headline scenario: {generation['headline']} (the session's latency and drift "
            "series). TTFT = queueing + prefill; TPOT = (last - first token) / (tokens - 1); "
            "a request arrives at LoadGen's scheduled issue, from which LoadGen's own figures "
            "count too."
        ],
        [
            Table("Scenarios", generation["scenarios"], figures),
            Table("Curves", generation["curves"], curves),
            Table("Prefill: top op types", generation["phases"]["prefill"], phase),
            Table("Decode: top op types", generation["phases"]["decode"], phase),
        ],
        ["generation-curves", "token-latencies"],
    )


def flatten(value, prefix: str = "") -> list[dict]:
    """Nested environment JSON as (key path, value) rows."""
    if isinstance(value, dict):
        return [row for k, v in value.items() for row in flatten(v, f"{prefix}{k}.")]
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return [row for i, v in enumerate(value) for row in flatten(v, f"{prefix}{i}.")]
    shown = ", ".join(map(str, value)) if isinstance(value, list) else value
    return [{"key": prefix.rstrip("."), "value": shown}]


def _environment(environment: dict) -> Section:
    rows = [r for r in flatten(environment) if r["value"] not in (None, "")]
    return Section(
        "environment",
        "Environment",
        ["As captured by the worker (sessions.env_json)."],
        [Table("", rows, [("key", "key", None), ("value", "value", None)])],
    )

"""The session over time and against its limits: telemetry, each metric's drift verdict,
objectives (SLOs) and generation figures."""

from __future__ import annotations

from aaco_pipelines.report.content import DRIFT_PLOT_METRICS
from aaco_pipelines.report.markdown_tables import num, pct
from aaco_pipelines.report.objectives_text import OBJECTIVE_COLUMNS, shown
from aaco_pipelines.report.section_model import Section, Table, drift_plot_id
from aaco_pipelines.report.units import by_unit, duration


def telemetry_section(series: list[dict]) -> Section:
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
        [Table("Over the whole run", rows, columns, name="telemetry")] if rows else [],
        ["telemetry"] if rows else [],
    )


def drift_section(verdicts: list[dict]) -> Section:
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
        [Table("", rows, columns, name="verdicts", brief=tuple(c[0] for c in columns[:6]))],
        [drift_plot_id(m) for m in DRIFT_PLOT_METRICS if m in shown],
    )


def objectives_section(objectives: list[dict]) -> Section:
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
        [
            Table(
                "",
                [shown(o) for o in objectives],
                OBJECTIVE_COLUMNS,
                name="objectives",
                brief=("objective", "limit", "value", "interval", "verdict", "basis"),
            )
        ],
    )


def generation_section(generation: dict) -> Section:
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
            Table(
                "Scenarios",
                generation["scenarios"],
                figures,
                name="generation_figures",
                brief=(
                    "scenario",
                    "ttft_p50_ns",
                    "tpot_p50_ns",
                    "itl_p99_ns",
                    "e2e_p50_ns",
                    "output_tokens_per_s",
                ),
            ),  # fmt: skip
            Table("Curves", generation["curves"], curves, name="generation_curves"),
            Table(
                "Prefill: top op types",
                generation["phases"]["prefill"],
                phase,
                name="prefill_op_types",
            ),
            Table(
                "Decode: top op types",
                generation["phases"]["decode"],
                phase,
                name="decode_op_types",
            ),
        ],
        ["generation-curves", "token-latencies"],
    )

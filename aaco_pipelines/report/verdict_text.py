"""The text of the CI gate's verdicts and of the drift detectors' figures, as `aaco diff`,
`aaco baseline` and `aaco detector arl` print them: a GateVerdict, a baseline and an ARL."""

from __future__ import annotations

from aaco_pipelines.governance.gate.decision import metric_label

METRIC_ROWS = {  # gated metric -> (row name, scale, unit)
    "latency_p50_ns": ("p50 latency", 1e-6, "ms"),
    "latency_p99_ns": ("p99 latency", 1e-6, "ms"),
    "throughput_per_s": ("throughput", 1.0, "/s"),
    "ttft_p50_ns": ("TTFT p50", 1e-6, "ms"),
    "tpot_p50_ns": ("TPOT p50", 1e-6, "ms"),
}
DECISION_TEXT = {
    "regression": "REGRESSION",
    "uncertain": "uncertain: a regression on a suspect measurement",
    "below_threshold": "below its threshold",
    "no_change": "no change",
    "improvement": "improvement",
}


def diff_text(v) -> str:
    """A GateVerdict as a headline and an aligned table, one row per gated metric with its
    decision."""
    b = v.baseline
    head = f"REGRESSION ({v.severity})" if v.regression else "no regression"
    if v.uncertain and not v.regression:
        head = (
            "no regression decided, "
            + ", ".join(metric_label(m) for m in v.uncertain)
            + " uncertain"
        )
    suspect = v.suspect_measurements
    if v.session_id in suspect:
        head += ", on a suspect measurement (measure again)"
    others = ", ".join(f"{s['kind']} ({s['posterior']:.2f})" for s in v.suspects[1:]) or "-"
    noise = v.evidence.get("noise_sd_pct")
    sessions = f"{b['n_sessions']} session{'s' * (b['n_sessions'] != 1)}"
    cells = [
        ("session", f"{v.session_id} ({v.model_slug} on {v.target})"),
        ("baseline", f"{b['name']} ({b['source']}, {sessions})"),
        *(metric_cell(m) for m in v.metrics.values()),
        ("confidence", f"{v.confidence:.2f}"),
        ("suspected", suspect_text(v.suspected_cause)),
        ("also", others),
        ("decided by", v.evidence["test"]),
        ("noise", f"session-to-session sd {noise:.1f} % of p50" if noise is not None else "-"),
        ("recommendation", v.recommendation),
    ]
    if suspect:
        cells[2:2] = [("measurement", measurement_text(v.session_id, suspect, b["n_sessions"]))]
    if v.generation is not None:  # after the metrics' rows
        after_metrics = 2 + bool(suspect) + len(v.metrics)
        cells[after_metrics:after_metrics] = generation_cells(v.generation)
    if v.paired is not None:
        cells[2:2] = [("side by side", paired_text(v.paired))]
        p50 = v.paired["latency_p50"]
        title = f"{head}: {v.model_slug} p50 {p50['effect_pct']:+.2f} % side by side with "
        title += f"{b['name']}'s version (threshold {v.threshold_pct:g} %)"
        return "\n".join([title, *(f"  {name:15} {value}" for name, value in cells)])
    shown = v.metrics[(v.regressed or v.uncertain or ["latency_p50_ns"])[0]]
    title = f"{head}: {v.model_slug} {metric_label(shown['metric'])} "
    title += f"{shown['effect_pct']:+.2f} % vs {b['name']} (threshold {shown['threshold_pct']:g} %)"
    return "\n".join([title, *(f"  {name:15} {value}" for name, value in cells)])


def paired_text(p: dict) -> str:
    """The side-by-side measurement that decided: its p50 change, CI, rounds and decision."""
    p50, decision = p["latency_p50"], DECISION_TEXT[p["decision"]]
    if p["decision"] == "regression":
        decision += f" ({p['severity']})"
    if p["decision"] == "uncertain":  # side by side: a regression no second process confirmed
        decision = "unconfirmed: a regression one measuring process found and another did not"
    processes = p.get("processes") or []
    by = ", ".join(f"{q['effect_pct']:+.1f} %" for q in processes)
    same = "the same version" if p["baseline_sha256"] == p["current_sha256"] else (
        f"{p['baseline_sha256'][:12]} -> {p['current_sha256'][:12]}"
    )  # fmt: skip
    return (
        f"p50 {p50['baseline_ms']:.4g} ms -> {p50['current_ms']:.4g} ms  "
        f"{p50['effect_pct']:+.2f} % [{p50['ci_low']:+.2f}, {p50['ci_high']:+.2f}]  {decision}; "
        f"{p['rounds']} interleaved rounds of {p['block_iterations']} iterations"
        + (f" in {len(processes)} processes ({by})" if len(processes) > 1 else "")
        + f", {same} "
        f"(this verdict's decision; the rows below are the stored sessions')"
    )


def metric_cell(m: dict) -> tuple[str, str]:
    """A gated metric's row: both values, the effect with its CI, and the decision."""
    name, scale, unit = METRIC_ROWS[m["metric"]]
    decision = DECISION_TEXT[m["decision"]]
    if m["decision"] == "regression":
        decision += f" ({m['severity']})"
    return (
        name,
        f"{m['baseline'] * scale:.4g} {unit} -> {m['current'] * scale:.4g} {unit}  "
        f"{m['effect_pct']:+.2f} % [{m['ci_low']:+.2f}, {m['ci_high']:+.2f}]  {decision}",
    )


def measurement_text(session_id: str, suspect: dict[str, list[str]], baseline_n: int) -> str:
    """Which side of the comparison rests on measurements judged suspect, and why."""
    parts = []
    if session_id in suspect:
        parts.append("this session SUSPECT: " + "; ".join(suspect[session_id]))
    others = len(suspect) - (session_id in suspect)
    if others:
        parts.append(f"{others} of the baseline's {baseline_n} sessions suspect")
    return "; ".join(parts)


def generation_cells(g: dict) -> list[tuple[str, str]]:
    """A generation session's figures and where its TTFT change went, as diff table rows."""
    cells = []
    for key, label, scale, unit in (  # TTFT and TPOT p50 have their rows among the metrics
        ("itl_p99_ns", "ITL p99", 1e-6, "ms"),
        ("output_tokens_per_s", "tokens/s", 1.0, "/s"),
    ):
        c = g.get(key)
        if c is not None:
            cells.append((label, f"{c['baseline'] * scale:.4g} {unit} -> "
                          f"{c['current'] * scale:.4g} {unit}  {c['effect_pct']:+.2f} %"))  # fmt: skip
    e = g["ttft_explained"]
    parts = ", ".join(
        f"{part.replace('_', ' ')} {e[f'{part}_ms']:+.3f} ms"
        for part in ("queueing", "prefill_kernel", "host")
        if e[f"{part}_ms"] is not None
    )
    cells.append(("TTFT change", f"mean {e['ttft_mean_delta_ms']:+.3f} ms = {parts} "
                  f"(mostly {(e['dominant'] or '-').replace('_', ' ')}; {g['scenario']})"))  # fmt: skip
    return cells


def suspect_text(s: dict | None) -> str:
    """kind (name): before -> after (posterior, share of the slowdown it explains)."""
    if s is None:
        return "-"
    label = s["kind"] if s["name"] == s["kind"] else f"{s['kind']} ({s['name']})"
    change = f": {s['before']} -> {s['after']}" if s["before"] or s["after"] else ""
    share = f", explains {s['share']:.0%}" if s["share"] is not None else ""
    return f"{label}{change} (posterior {s['posterior']:.2f}{share})"


def baseline_text(b) -> str:
    """One baseline as an aligned two-column table."""
    cells = [
        ("baseline", b.name + ("  (pinned)" if b.pinned else "")),
        ("model", f"{b.model_slug} on {b.target}"),
        ("created", f"{b.created_at:%Y-%m-%d %H:%M:%S %Z}"),
        ("latency p50", f"{b.latency_p50_ns / 1e6:.4f} ms (median of sessions)"),
        ("latency p99", f"{b.latency_p99_ns / 1e6:.4f} ms"),
        ("throughput", f"{b.throughput_per_s:.1f} /s"),
        ("model sha256", (b.model_sha256 or "-")[:12]),
        ("runtime", f"onnxruntime {b.env.get('onnxruntime_version') or '-'}, "
         f"rocm {b.env.get('rocm_version') or '-'} ({(b.runtime_fingerprint or '-')[:12]})"),
        ("providers", ", ".join(b.providers_used) or "-"),
        ("note", b.note or "-"),
        (f"sessions ({b.n_sessions})", "\n".join(" " * 18 * (i > 0) + s
                                                for i, s in enumerate(b.session_ids))),
    ]  # fmt: skip
    return "\n".join(f"  {name:15} {value}" for name, value in cells)


def arl_cell(value) -> str:
    """A computed ARL, or a simulated one with its standard error."""
    if isinstance(value, float):
        return f"{value:10.2f}"
    censored = f"  ({value.censored} runs censored: a lower bound)" if value.censored else ""
    return f"{value.mean:10.2f} +- {value.se:.2f}{censored}"

"""The text of the CI gate's verdicts and of the drift detectors' figures, as `aaco diff`,
`aaco baseline` and `aaco detector arl` print them: a GateVerdict, a baseline and an ARL."""

from __future__ import annotations


def diff_text(v) -> str:
    """A GateVerdict as a headline and an aligned table."""
    p50, tput, b = v.latency_delta_pct, v.throughput_delta_pct, v.baseline
    undecided = v.changes_not_decided()
    head = f"REGRESSION ({v.severity})" if v.regression else "no regression"
    if undecided and not v.regression:
        head = "no p50 regression, but a change the gate does not decide on"
    suspect = v.suspect_measurements
    if v.session_id in suspect:
        head += ", on a suspect measurement (measure again)"
    others = ", ".join(f"{s['kind']} ({s['posterior']:.2f})" for s in v.suspects[1:]) or "-"
    noise = v.evidence.get("noise_sd_pct")
    sessions = f"{b['n_sessions']} session{'s' * (b['n_sessions'] != 1)}"
    cells = [
        ("session", f"{v.session_id} ({v.model_slug} on {v.target})"),
        ("baseline", f"{b['name']} ({b['source']}, {sessions})"),
        ("p50 latency", f"{p50['baseline_ms']:.4f} ms -> {p50['current_ms']:.4f} ms  "
         f"{p50['effect_pct']:+.2f} % [{p50['ci_low']:+.2f}, {p50['ci_high']:+.2f}]"),
        ("throughput", f"{tput['baseline_per_s']:.1f} /s -> {tput['current_per_s']:.1f} /s  "
         f"{tput['effect_pct']:+.2f} % [{tput['ci_low']:+.2f}, {tput['ci_high']:+.2f}]"),
        ("confidence", f"{v.confidence:.2f}"),
        ("suspected", suspect_text(v.suspected_cause)),
        ("also", others),
        ("decided by", f"{v.evidence['decided_by']}: {v.evidence['test']}"),
        ("noise", f"session-to-session sd {noise:.1f} % of p50" if noise is not None else "-"),
        ("recommendation", v.recommendation),
    ]  # fmt: skip
    if undecided:
        cells[4:4] = [("not decided", "; ".join(undecided))]
    if suspect:
        cells[2:2] = [("measurement", measurement_text(v.session_id, suspect, b["n_sessions"]))]
    if v.generation is not None:
        cells[4:4] = generation_cells(v.generation)
    title = f"{head}: {v.model_slug} p50 {p50['effect_pct']:+.2f} % vs {b['name']} "
    title += f"(threshold {v.threshold_pct:g} %)"
    return "\n".join([title, *(f"  {name:15} {value}" for name, value in cells)])


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
    for key, label, scale, unit in (
        ("ttft_p50_ns", "TTFT p50", 1e-6, "ms"),
        ("tpot_p50_ns", "TPOT p50", 1e-6, "ms"),
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

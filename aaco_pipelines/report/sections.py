"""The report's layout: its sections, each with sentences, tables and plots, from the content.

Markdown and HTML both render this one layout, so a section or a column added here appears in
both formats. Tables are (rows, columns) as `report.markdown_tables.markdown_table` takes them.
"""

from __future__ import annotations

from aaco_pipelines.report.finding_sections import bottleneck_section, derived_section, time_section
from aaco_pipelines.report.history_sections import (
    drift_section,
    generation_section,
    objectives_section,
    telemetry_section,
)
from aaco_pipelines.report.placement_sections import (
    critical_path_section,
    kernels_section,
    roofline_section,
    structure_section,
)
from aaco_pipelines.report.section_model import Section, Table, ci_text, maybe, measurement_line
from aaco_pipelines.report.units import duration


def report_sections(content: dict) -> list[Section]:
    return [
        _summary(content),
        bottleneck_section(content["bottleneck"], content.get("measurement")),
        derived_section(content["derived_metrics"]),
        time_section(content),
        roofline_section(content["roofline"]),
        *([kernels_section(content["kernels"])] if content["kernels"]["diagnoses"] else []),
        *(
            [critical_path_section(content["critical_path"])]
            if content.get("critical_path")
            else []
        ),
        *([structure_section(content["structure"])] if content.get("structure") else []),
        telemetry_section(content["telemetry"]),
        drift_section(content["drift"]),
        *([objectives_section(content["objectives"])] if content.get("objectives") else []),
        *([generation_section(content["generation"])] if content.get("generation") else []),
        _environment(content["environment"]),
    ]


def _summary(content: dict) -> Section:
    s, session = content["summary"], content["session"]
    level = f"{s['confidence']:.0%}"
    coverage = s["latency_p50_ci_coverage"]
    rows = [
        {
            "stat": "mean",
            "value": duration(s["latency_mean_ns"]),
            "ci": ci_text(s["latency_mean_ci_ns"]),
        },
        {
            "stat": "p50",
            "value": duration(s["latency_p50_ns"]),
            "ci": ci_text(s["latency_p50_ci_ns"]),
        },
        {"stat": "p99", "value": duration(s["latency_p99_ns"])},
        {"stat": "min", "value": duration(s["latency_min_ns"])},
        {"stat": "std", "value": duration(s["latency_std_ns"])},
        {"stat": "throughput", "value": maybe(s["throughput_per_s"], "{:.4g} /s")},
        {"stat": "measured iterations", "value": str(s["measured_iterations"])},
        {"stat": "profiled p50", "value": duration(s["profiled_latency_p50_ns"])},
        {"stat": "profiling overhead", "value": maybe(s["profiling_overhead_pct"], "{:.1f}%")},
    ]
    unverified = session.get("unverified_reason")
    text = [
        *(
            [
                f"UNVERIFIED evidence: restored (aaco restore --unverified) without a record of "
                f"its bundle ({unverified}); nothing shows these numbers are the ones measured."
            ]
            if unverified
            else []
        ),
        measurement_line(content.get("measurement")),
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
        [Table("Latency of the measured pass", rows, columns, name="latency")],
        ["latency-histogram", "iteration-latency"],
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
        [Table("", rows, [("key", "key", None), ("value", "value", None)], name="environment")],
    )

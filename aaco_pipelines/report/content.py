"""The content of a session report as plain JSON-ready data: the single source the Markdown and
HTML renderers format, so the three formats never disagree.

Meanings are not rewritten here: derived metrics are explained by the definitions in
`analysis.metrics.derived`' docstring and evidence signals by the classifier's own rule rationales.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.attribution.ranking_stability import tied_with_top
from aaco_pipelines.analysis.bottleneck.classification import SIGNAL_RULES
from aaco_pipelines.analysis.metrics import derived as metrics_module
from aaco_pipelines.governance.drift.series import series_change_points
from aaco_pipelines.registry.workload import SCENARIOS
from aaco_pipelines.report.data import ReportData, read_report_data
from aaco_pipelines.report.latency_intervals import latency_with_intervals
from aaco_pipelines.report.structure_text import structure_headline
from aaco_pipelines.tracelake.store import TraceLake

TOP_OPS = 15
TOP_OP_TYPES = 10
DRIFT_PLOT_METRICS = ("latency_p50_ns", "throughput_per_s")
_DEFINITION = re.compile(r"^  (\w+)\s+(\S.*)$")


def metric_meanings(doc: str | None = metrics_module.__doc__) -> dict[str, str]:
    """Each derived metric's definition from the `analysis.metrics.derived` docstring table (a name
    indented two spaces, its definition, continuation lines indented deeper)."""
    meanings: dict[str, str] = {}
    current = None
    for line in (doc or "").splitlines():
        match = _DEFINITION.match(line)
        if match:
            current = match.group(1)
            meanings[current] = match.group(2).strip()
        elif current and line.startswith("    ") and line.strip():
            meanings[current] += " " + line.strip()
        else:
            current = None
    return meanings


def render_json(lake: TraceLake | str, session_id: str) -> dict:
    """The report of one session (or "latest") as JSON-ready data."""
    return report_content(read_report_data(lake, session_id))


def report_content(data: ReportData) -> dict:
    measured = _measured(data.iterations)
    return {
        "session": _plain(data.session),
        "summary": latency_with_intervals(data.session, measured),
        "measurement": dataclasses.asdict(data.measurement) if data.measurement else None,
        "environment": data.environment,
        "bottleneck": _bottleneck(data.bottleneck, data.other_sessions),
        "derived_metrics": _derived(data.derived_metrics),
        "top_ops": _level(data.op_breakdown, "node", TOP_OPS),
        # kernels and runtime nodes no graph node explains, with their share of kernel time
        "unmatched": _unmatched(data.op_breakdown),
        "ranking": _ranking(data),
        "top_op_types": _level(data.op_breakdown, "op_type", TOP_OP_TYPES),
        "top_kernels": _floats(data.top_kernels.to_pylist()),
        "roofline": {
            "envelope": _plain(data.envelope) if data.envelope else None,
            # measured | datasheet | none; the note says how it was chosen, or why there is none
            "envelope_source": _envelope_source(data),
            "envelope_note": (data.bottleneck or {}).get("envelope_note"),
            "top_points": _floats(data.roofline_points.slice(0, TOP_OPS).to_pylist()),
        },
        # why each GPU kernel takes its time (analysis/kernels/diagnosis.py); empty on a CPU
        "kernels": {
            "diagnoses": _floats(data.kernel_diagnoses.to_pylist()),
            "counter_roofline": _floats(data.counter_roofline.to_pylist()),
        },
        # which nodes each iteration waits for, and what a 2x faster one saves end to end
        "critical_path": _critical_path(data),
        # what changed in the compiled graph since the model's previous session
        "structure": _structure(data),
        "telemetry": _telemetry(data.telemetry),
        "drift": [_drift(row) for row in data.drift],
        # the model's objectives (SLOs): breached only when the interval lies beyond the limit
        "objectives": _floats(data.objectives),
        "generation": _generation(data),
    }


def _critical_path(data: ReportData) -> dict | None:
    if data.critical_path is None:
        return None
    summary = dict(data.critical_path)
    summary["caveats"] = json.loads(summary.pop("caveats_json") or "[]")
    return {**_plain(summary), "nodes": _floats(data.critical_path_nodes.to_pylist())}


STRUCTURE_NODES = 10  # the nodes whose time moved most, in the report (aaco diff --structure:
# all of them)


def _structure(data: ReportData) -> dict | None:
    diff = data.structure
    if diff is None:
        return None
    content = diff.to_dict()
    content["nodes"] = content["nodes"][:STRUCTURE_NODES]
    return {"headline": structure_headline(diff), **content}


GENERATION_FIGURES = (
    "requests", "ttft_p50_ns", "ttft_p90_ns", "ttft_p99_ns", "tpot_p50_ns", "tpot_p90_ns",
    "tpot_p99_ns", "itl_p50_ns", "itl_p99_ns", "e2e_p50_ns", "e2e_p99_ns", "queue_mean_ns",
    "output_tokens_per_s", "requests_per_s", "goodput_per_s", "slo_attainment",
    "arrival_rate_per_s",
)  # fmt: skip
CURVE_FIGURES = ("ttft_p50_ns", "tpot_p50_ns", "e2e_p50_ns", "output_tokens_per_s")


def _generation(data: ReportData) -> dict | None:
    """Per scenario its figures (LoadGen's beside, as `loadgen_<metric>`), the curve points and
    the top op types per phase; None for a forward-pass session."""
    rows = data.generation_metrics.to_pylist()
    if not rows:
        return None
    scenarios: dict[str, dict] = {}
    curves: dict[tuple, dict] = {}
    for r in rows:
        if r["run"] == "curve" and r["source"] == "aaco":
            point = curves.setdefault(
                (r["batch_size"], r["prompt_tokens"]),
                {"batch_size": r["batch_size"], "prompt_tokens": r["prompt_tokens"]},
            )
            if r["metric"] in CURVE_FIGURES:
                point[r["metric"]] = r["value"]
        elif r["batch_size"] is None and r["metric"] in (*GENERATION_FIGURES, "result_valid"):
            prefix = "" if r["source"] == "aaco" else "loadgen_"
            scenarios.setdefault(r["run"], {"scenario": r["run"]})[prefix + r["metric"]] = r[
                "value"
            ]
    phases = data.phase_breakdown.to_pylist()
    return {
        "headline": data.session.get("scenario"),
        "scenarios": [scenarios[run] for run in SCENARIOS if run in scenarios],
        "curves": [curves[k] for k in sorted(curves)],
        "phases": {
            phase: [r for r in phases if r["phase"] == phase][:TOP_OP_TYPES]
            for phase in ("prefill", "decode")
        },
    }


def _envelope_source(data: ReportData) -> str | None:
    if data.envelope is not None:
        return data.envelope["source"]
    return (data.bottleneck or {}).get("envelope_source")  # "none", or None before v8


def _measured(iterations: pa.Table) -> np.ndarray:
    rows = iterations.filter(pc.equal(iterations["pass"], "measured"))
    return rows["latency_ns"].to_numpy().astype(np.float64)


def _plain(row: dict) -> dict:
    """Timestamps as ISO text, so the dict is JSON as it stands."""
    return {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in row.items()}


def _floats(rows: list[dict]) -> list[dict]:
    """NaN is not JSON: it becomes None."""
    return [
        {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in row.items()}
        for row in rows
    ]


def _bottleneck(report: dict | None, others: list[dict]) -> dict | None:
    """The stored report with each signal's rationale, and the class of the version's other
    sessions (`others`, analysis/across_sessions)."""
    if report is None:
        return None
    evidence = [
        {**item, "why_it_matters": SIGNAL_RULES[item["signal"]].rationale}
        for item in report["evidence"]
        if item["signal"] in SIGNAL_RULES
    ]
    return {**report, "evidence": evidence, "others": [o["bottleneck"] for o in others]}


def _derived(table: pa.Table) -> list[dict]:
    meanings = metric_meanings()
    return [{**row, "meaning": meanings.get(row["metric"])} for row in table.to_pylist()]


def _ranking(data: ReportData) -> dict:
    """How sure the node ranking is (analysis/ranking_stability; None where not judged), the
    nodes some resample ranks first, most often first, the nodes tied with the top one, and
    the top op of the version's other sessions."""
    derived = dict(
        zip(
            data.derived_metrics["metric"].to_pylist(),
            data.derived_metrics["value"].to_pylist(),
            strict=True,
        )
    )
    nodes = data.op_breakdown.filter(pc.equal(data.op_breakdown["level"], "node"))
    leading = nodes.filter(pc.fill_null(pc.greater(nodes["p_top"], 0.0), False))
    leading = leading.sort_by([("p_top", "descending")]).select(["name", "p_top"])
    ranked = nodes.select(["name", "share", "p50_ns", "p_top"]).to_pylist()  # by median
    return {
        "profiled_iterations": data.session.get("profiled_iterations"),
        "top_op_stability": derived.get("top_op_stability"),
        "top3_stability": derived.get("top3_stability"),
        "leading": leading.to_pylist(),
        "tied": tied_with_top(ranked),
        "others": [o["top_op"] for o in data.other_sessions],
    }


def _level(breakdown: pa.Table, level: str, limit: int) -> list[dict]:
    rows = breakdown.filter(pc.equal(breakdown["level"], level)).slice(0, limit)
    return _floats(rows.drop_columns(["level"]).to_pylist())


def _unmatched(breakdown: pa.Table) -> list[dict]:
    nodes = breakdown.filter(pc.equal(breakdown["level"], "node"))
    rows = nodes.filter(pc.starts_with(nodes["name"], "(unmatched)"))
    return _floats(rows.drop_columns(["level"]).to_pylist())  # all: their share is summed


def _telemetry(samples: pa.Table) -> list[dict]:
    """Mean, min and max of each plotted series over the whole run."""
    out = []
    for name in dict.fromkeys(samples["series"].to_pylist()):
        rows = samples.filter(pc.equal(samples["series"], name))
        values = rows["value"].to_numpy(zero_copy_only=False).astype(float)
        out.append(
            {
                "series": name,
                "unit": rows["unit"][0].as_py(),
                "samples": int(values.size),
                "mean": float(values.mean()),
                "min": float(values.min()),
                "max": float(values.max()),
            }
        )
    return out


def _drift(row: dict) -> dict:
    """The verdict, and where the metric's level changed over the model's whole history."""
    keep = ("metric", "verdict", "effect_pct", "ci_low", "ci_high", "z", "decided_by")
    series = json.loads(row["series_json"])
    changes = [
        {"session_id": series["session_ids"][position], **point.to_dict()}
        for position, point in series_change_points(series)
    ]
    return {name: row.get(name) for name in keep} | {
        "history_points": row["history_points"],
        "series_points": len(series["values"]),
        "change_points": changes,
    }

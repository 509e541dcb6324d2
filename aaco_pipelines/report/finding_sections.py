"""The report's findings: the bottleneck with its evidence, the derived metrics, and where the
time goes (op types and nodes, with how sure their ranking is)."""

from __future__ import annotations

from aaco_pipelines.analysis.attribution.ranking_stability import (
    MIN_ITERATIONS,
    STABLE,
    TICK_NS,
    TIE,
)
from aaco_pipelines.analysis.bottleneck.classification import (
    CLOSE_CALL,
    class_line,
    close_call_text,
    set_aside_signals,
)
from aaco_pipelines.analysis.comparison.across_sessions import rivals, rivals_text
from aaco_pipelines.report.markdown_tables import num, pct
from aaco_pipelines.report.section_model import Section, Table
from aaco_pipelines.report.units import by_unit, duration


def bottleneck_section(report: dict | None, measurement: dict | None = None) -> Section:
    if report is None:
        return Section("bottleneck", "Bottleneck", ["Not classified: the analysis did not run."])
    heu = report["hardware_envelope_utilization"]
    source = report.get("envelope_source")
    undecided = report.get("decided") is False
    text = [f"Not decided: {report['undecided_reason']}."] if undecided else []
    text.append(
        f"{class_line(report)}; dominant resource "
        f"{report['dominant_resource'] or '—'}, hardware envelope utilization "
        f"{pct(heu) if heu is not None else '—'}"
        + (f" (against the {source.upper()} envelope)." if source == "datasheet" else ".")
    )
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
    set_aside = set_aside_signals(report["evidence"])
    if measurement and measurement["verdict"] == "suspect" and set_aside:
        text.append(
            "The measurement was suspect ("
            + "; ".join(measurement["reasons"])
            + "): "
            + ", ".join(set_aside)
            + " were set aside, as contention moves them, and the class "
            "rests on the rest. Measure again on a quiet host to judge them."
        )
    elif measurement and measurement["verdict"] == "suspect":
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
                name="posterior",
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
                name="evidence",
                brief=("signal", "value", "mean", "bin", "favours"),
            ),
            Table(
                "Recommendations",
                report["recommendations"] or [],
                [("rank", "#", None), ("action", "action", None), ("why", "why", None)],
                name="recommendations",
            ),
        ],
    )


def derived_section(metrics: list[dict]) -> Section:
    rows = [{**m, "shown": by_unit(m["value"], m["unit"])} for m in metrics]
    columns = [
        ("metric", "metric", None),
        ("shown", "value", None),
        ("meaning", "meaning", None),
    ]
    table = Table("", rows, columns, name="derived_metrics", brief=("metric", "shown"))
    return Section("derived-metrics", "Derived metrics", [], [table])


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
# its name is the op type
OP_TYPE_COLUMNS = [("name", "op type", None)] + [c for c in OP_COLUMNS[2:]]
BRIEF_OP_COLUMNS = ("name", "op_type", "p50_ns", "share", "p_top", "kernels_per_iteration")


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


def unmatched_text(unmatched: list[dict]) -> str:
    if not unmatched:
        return "Every kernel is attributed to an ONNX node."
    share = sum(row["share"] or 0.0 for row in unmatched)
    return (
        f"Unmatched: {pct(share)} of kernel time in {len(unmatched)} kernel(s) or runtime "
        "node(s) no ONNX node explains (named '(unmatched) ...' in the tables)."
    )


def time_section(content: dict) -> Section:
    unmatched = content.get("unmatched") or []
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
            unmatched_text(unmatched),
        ],
        [
            Table(
                "Top ops (ONNX nodes)",
                content["top_ops"],
                OP_COLUMNS,
                name="top_ops",
                brief=BRIEF_OP_COLUMNS,
            ),
            Table(
                "Top op types",
                content["top_op_types"],
                OP_TYPE_COLUMNS,
                name="top_op_types",
                brief=BRIEF_OP_COLUMNS,
            ),
            Table("Top kernels", content["top_kernels"], kernels, name="top_kernels"),
            *(
                [
                    Table(
                        "Unmatched kernels",
                        unmatched[:15],
                        OP_COLUMNS,
                        "unmatched_kernels",
                        BRIEF_OP_COLUMNS,
                    )
                ]
                if unmatched
                else []
            ),  # fmt: skip
        ],
        ["op-breakdown"],
    )

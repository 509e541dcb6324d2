"""The text of a structural diff, as `aaco diff --structure A B` prints it: a headline (how many
fusions were lost and gained, nodes whose kernel count changed, kernels that came and went, and
the largest time difference with its CI), then tables of rows for cli.common.print_table."""

from __future__ import annotations

TOP_NODES = 10  # the nodes of largest time difference shown
TOP_FUSIONS = 20
TOP_KERNELS = 10
LISTED_NAMES = 5  # names of nodes only one version has, before "... and N more"


def structure_headline(d) -> str:
    """Two lines: the counts and the largest difference, then which sessions."""
    kernels = {c: sum(k.change == c for k in d.kernels) for c in ("appeared", "vanished")}
    counts = (
        f"{_n(d.count('lost'), 'fusion')} lost, {d.count('gained')} gained"
        + "".join(f", {d.count(c)} {c}" for c in ("reshaped", "retyped") if d.count(c))
        + f"; {_n(len(d.kernel_count_changes), 'node')} changed kernel count"
        + f"; {_n(kernels['appeared'], 'kernel')} appeared, {kernels['vanished']} vanished"
    )
    largest = largest_difference(d)
    if largest:
        counts += f"; {largest}"
    only = ""
    if d.only_in_a or d.only_in_b:
        only = f"; {_n(len(d.only_in_a), 'node')} only in A, {len(d.only_in_b)} only in B"
    sessions = (
        f"  {d.model_slug}: A {d.session_a} -> B {d.session_b} ({d.iterations_a} and "
        f"{d.iterations_b} profiled iterations{only})"
    )
    return f"{counts}\n{sessions}"


def largest_difference(d) -> str:
    """'+0.41 ms at /x/LayerNorm (LayerNormalization fusion lost; 95% CI +0.38..+0.44)': the
    fusion change of largest time difference, else the node's; '' when nothing ran."""
    if d.fusions:
        f = d.fusions[0]
        what = f"{f.label} fusion {f.change}; "
        return f"{f.delta_ms:+.3g} ms at {f.where} ({what}{ci_text(f, d.confidence)})"
    if d.nodes:
        n = d.nodes[0]
        return f"{n.delta_ms:+.3g} ms at {n.node} ({ci_text(n, d.confidence)})"
    return ""


def ci_text(row, confidence: float) -> str:
    """'95% CI +0.38..+0.44', or why there is none."""
    if row.ci_low_ms is None:
        return "no CI: too few profiled iterations"
    return f"{confidence:.0%} CI {row.ci_low_ms:+.3g}..{row.ci_high_ms:+.3g} ms"


def structure_tables(d) -> list[tuple[str, list[tuple[str, ...]]]]:
    """(title, rows with a header first) of each table with something to show."""
    tables = []
    if d.fusions:
        rows = [("change", "A", "B", "at", "nodes", "kernels/it A -> B", "ms A -> B", "difference")]
        rows += [
            (
                f.change,
                "+".join(f.fused_a) or "apart",
                "+".join(f.fused_b) or "apart",
                f.where,
                str(len(f.members)),
                f"{f.kernels_a:.3g} -> {f.kernels_b:.3g}",
                f"{f.a_ms:.4g} -> {f.b_ms:.4g}",
                _delta(f, d.confidence),
            )
            for f in d.fusions[:TOP_FUSIONS]
        ]
        tables.append((_title("fusion changes", len(d.fusions), TOP_FUSIONS), rows))
    if d.kernel_count_changes:
        rows = [("node", "op", "kernels/it A -> B", "difference")]
        rows += [
            (n.node, n.op_type or "-", f"{n.kernels_a:.3g} -> {n.kernels_b:.3g}",
             _delta(n, d.confidence))
            for n in d.kernel_count_changes[:TOP_NODES]
        ]  # fmt: skip
        title = _title("nodes whose kernel count changed", len(d.kernel_count_changes), TOP_NODES)
        tables.append((title, rows))
    if d.kernels:
        rows = [("kernel", "", "per iteration", "ms per iteration")]
        rows += [
            (k.kernel, k.change, f"{k.per_iteration:.3g}", f"{k.ms_per_iteration:.4g}")
            for k in d.kernels[:TOP_KERNELS]
        ]
        tables.append((_title("kernels only one side ran", len(d.kernels), TOP_KERNELS), rows))
    if d.nodes:
        rows = [("node", "op", "ms A", "ms B", "difference")]
        rows += [
            (n.node + _only(n), n.op_type or "-", f"{n.a_ms:.4g}", f"{n.b_ms:.4g}",
             _delta(n, d.confidence))
            for n in d.nodes[:TOP_NODES]
        ]  # fmt: skip
        title = f"time per node, median per profiled iteration (largest {TOP_NODES} differences)"
        tables.append((title, rows))
    paths = d.critical_paths
    if paths.get("a") and paths.get("b"):
        a, b = paths["a"], paths["b"]
        rows = [("", "A", "B")]
        rows += [
            ("critical path per iteration", _ms(a["path_p50_ns"]), _ms(b["path_p50_ns"])),
            ("host share of it", _pct(a["host_share"]), _pct(b["host_share"])),
            ("fix first (2x faster saves)", _fix(a), _fix(b)),
        ]
        tables.append(("critical path (aaco whatif re-times it)", rows))
    for side, names in (("A", d.only_in_a), ("B", d.only_in_b)):
        if names:
            shown = ", ".join(names[:LISTED_NAMES])
            more = f" ... and {len(names) - LISTED_NAMES} more" if len(names) > LISTED_NAMES else ""
            tables.append((f"nodes only in {side}'s graph ({len(names)})", [(shown + more,)]))
    return tables


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.4g} ms"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.0%}"


def _fix(row: dict) -> str:
    if not row.get("fix_first"):
        return "-"
    return f"{row['fix_first']} ({_ms(row['fix_first_gain_ns'])})"


def _delta(row, confidence: float) -> str:
    return f"{row.delta_ms:+.3g} ms ({ci_text(row, confidence)})"


def _only(n) -> str:
    return "" if n.in_a and n.in_b else (" (only in A)" if n.in_a else " (only in B)")


def _title(what: str, count: int, shown: int) -> str:
    return f"{what} ({count}{f', first {shown}' if count > shown else ''})"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"

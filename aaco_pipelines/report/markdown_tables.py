"""Small Markdown tables for asset metadata: they read better in the UI than JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def markdown_table(
    rows: Sequence[dict], columns: Sequence[tuple[str, str, Callable | None]]
) -> str:
    """`columns` = (key, header, formatter or None); None values print as an em dash."""
    header = "| " + " | ".join(title for _, title, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    lines = [header, rule]
    for row in rows:
        cells = []
        for key, _, fmt in columns:
            value = row.get(key)
            cells.append("—" if value is None else (fmt(value) if fmt else str(value)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def num(value: float) -> str:
    return f"{value:.4g}"

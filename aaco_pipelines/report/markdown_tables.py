"""Small Markdown tables for asset metadata: they read better in the UI than JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def markdown_table(
    rows: Sequence[dict], columns: Sequence[tuple[str, str, Callable | None]]
) -> str:
    """`columns` = (key, header, formatter or None); None values print as an em dash."""
    header = "| " + " | ".join(title for _, title, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    lines = [header, rule] + [
        "| " + " | ".join(cells) + " |" for cells in table_cells(rows, columns)
    ]
    return "\n".join(lines)


def table_cells(
    rows: Sequence[dict], columns: Sequence[tuple[str, str, Callable | None]]
) -> list[list[str]]:
    """Each row's cells as text, in the columns' order: what every table shows."""
    return [
        ["—" if row.get(key) is None else (fmt(row[key]) if fmt else str(row[key]))
         for key, _, fmt in columns]
        for row in rows
    ]  # fmt: skip


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def num(value: float) -> str:
    return f"{value:.4g}"

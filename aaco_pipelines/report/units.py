"""Readable numbers for reports: a duration in the unit that suits it, a value by its unit."""

from __future__ import annotations


def duration(ns: float | None) -> str:
    """Nanoseconds as ns, µs, ms or s, whichever keeps the number between 1 and 1000."""
    if ns is None:
        return "—"
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.4g} ns"


def by_unit(value: float | None, unit: str | None) -> str:
    """A derived metric's value as its unit reads best: fractions as percentages, ns as time."""
    if value is None:
        return "—"
    if unit == "fraction":
        return f"{value * 100:.2f}%"
    if unit == "ns":
        return duration(value)
    if unit == "bytes":
        return f"{value / 2**20:.4g} MiB"
    return f"{value:.4g} {unit or ''}".rstrip()

"""Objectives (SLOs) as people read them: one table for the report, the asset and `aaco diff`,
and one line each for the terminal."""

from __future__ import annotations

from aaco_pipelines.report.markdown_tables import markdown_table, num

# (key, header, formatter): objective_verdicts rows, with `limit` and `interval` added
OBJECTIVE_COLUMNS = [
    ("objective", "objective", None),
    ("limit", "limit", None),
    ("value", "value", num),
    ("interval", "95% interval", None),
    ("samples", "samples", None),
    ("verdict", "verdict", None),
    ("basis", "rests on", None),
]
_UNITS = {"ms": " ms", "per_s": "/s", "MB": " MB"}


def shown(row: dict) -> dict:
    """The row with its limit, interval and verdict in words."""
    unit = _UNITS.get(row["unit"], "")
    sign = "<=" if row["bound"] == "max" else ">="
    low, high = row["ci_low"], row["ci_high"]
    interval = (
        None
        if row["value"] is None
        else f"{num(low) if low is not None else '-inf'} – "
        f"{num(high) if high is not None else 'open'}{unit}"
    )
    verdict = row["verdict"] + (" (suspect measurement)" if row["suspect"] else "")
    return {**row, "limit": f"{sign} {num(row['limit_value'])}{unit}", "interval": interval,
            "verdict": verdict}  # fmt: skip


def objectives_table(rows: list[dict]) -> str:
    return markdown_table([shown(r) for r in rows], OBJECTIVE_COLUMNS)


def objective_line(row: dict) -> str:
    """`latency_p99_ms <= 8 ms: 9.1 (8.7 – 9.6 ms), breached`"""
    r = shown(row)
    value = "no data" if row["value"] is None else f"{num(row['value'])} ({r['interval']})"
    return f"{row['objective']} {r['limit']}: {value}, {r['verdict']}"

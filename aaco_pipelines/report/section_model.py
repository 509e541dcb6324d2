"""What a report is made of: sections of sentences, tables and plots, and the small
formatting helpers every section uses. Markdown, HTML and the Dagster asset pages render these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality
from aaco_pipelines.report.units import duration

Columns = Sequence[tuple[str, str, Callable | None]]


@dataclass(frozen=True)
class Table:
    """`name` labels the table where it stands alone (an asset page's metadata entry); `brief`
    names the columns shown where space is short (six at most: the Dagster UI's dialog), every
    column when empty. The HTML and Markdown reports show every column."""

    caption: str
    rows: list[dict]
    columns: Columns
    name: str = ""
    brief: tuple[str, ...] = ()

    def brief_columns(self) -> Columns:
        return [c for c in self.columns if c[0] in self.brief] if self.brief else self.columns


@dataclass(frozen=True)
class Section:
    key: str  # anchor id
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # plot ids, see report.session_plots


def drift_plot_id(metric: str) -> str:
    return f"drift-{metric}"


def ci_text(interval: list[float] | None) -> str:
    return f"{duration(interval[0])} – {duration(interval[1])}" if interval else "—"


def maybe(value: float | None, pattern: str) -> str:
    return "—" if value is None else pattern.format(value)


def measurement_line(measurement: dict | None) -> str:
    """Whether the numbers below can be trusted, first (measurement_quality)."""
    if measurement is None:
        return "Measurement quality: not judged (a session loaded before it was)."
    line = MeasurementQuality(**measurement).line()
    return line[0].upper() + line[1:] + "."

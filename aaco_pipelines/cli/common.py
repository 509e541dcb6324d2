"""Helpers the command families share: the progress printer of `aaco run` and `aaco ingest`,
where the sessions went, aligned tables (`aaco registry list`, `aaco baseline list`) and
comma-separated options."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from aaco_pipelines.config import AacoPaths

# The stages of one `aaco run`, in order, as the measuring process and the pipeline announce
# them; the last one only the command itself reaches (StageProgress.done).
RUN_STAGES = ("creating session", "warmup pass", "measured pass", "profiled pass", "collecting",
              "analysing", "publishing", "done")  # fmt: skip


# The stages of one `aaco ingest`.
INGEST_STAGES = ("copying", "loading", "analysing", "publishing", "done")

BAR_WIDTH = 20


class StageProgress:
    """Progress on stderr: a bar over the stages, the seconds since the command began, and the
    measuring process's or pipeline's own line (the measuring process does not report inside the
    timed loop).

    A line only moves the bar through the stages before the last: the measuring process ends
    long before collection and analysis do, so the bar is full, and "done" said, only when the
    command calls `done()` with all its work behind it."""

    def __init__(self, stages: tuple[str, ...] = RUN_STAGES):
        self.stages = stages
        self.started = time.monotonic()
        self.reached = 0

    def __call__(self, message: str) -> None:
        working = self.stages[:-1]
        stage = next((i for i, s in enumerate(working, 1) if message.startswith(s)), 0)
        self.reached = max(self.reached, stage)
        self._print(message)

    def done(self) -> None:
        self.reached = len(self.stages)
        self._print(self.stages[-1])

    def _print(self, message: str) -> None:
        filled = round(BAR_WIDTH * self.reached / len(self.stages))
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        elapsed = time.monotonic() - self.started
        print(f"  [{bar}] {elapsed:6.1f}s  {message}", file=sys.stderr, flush=True)


def progress_printer(stages: tuple[str, ...] = RUN_STAGES) -> StageProgress:
    """The stage progress of one command (StageProgress): call it with each line, and
    `.done()` when the command's work is over."""
    return StageProgress(stages)


def lake_where(paths: AacoPaths) -> str:
    """Where this process's sessions go, for people: the shared DuckLake when one is configured
    (its description keeps no password), else the TraceLake file."""
    from aaco_pipelines.tracelake.ducklake import shared_lake

    return str(shared_lake() or paths.tracelake)


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of text (the first one the header) as left-aligned columns, indented two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def comma_list(listed: str | None) -> list[str] | None:
    """A comma-separated option as a list (None when absent or empty)."""
    names = [name.strip() for name in (listed or "").split(",") if name.strip()]
    return names or None

"""Helpers the command families share: the progress printer of `aaco run` and `aaco ingest`,
aligned tables (`aaco registry list`, `aaco baseline list`) and comma-separated options."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

# The stages of one `aaco run`, in order, as the worker and the pipeline announce them.
RUN_STAGES = ("creating session", "warmup pass", "measured pass", "profiled pass", "collecting",
              "analysing", "done")  # fmt: skip


# The stages of one `aaco ingest`.
INGEST_STAGES = ("copying", "loading", "analysing", "done")


def progress_printer(stages: tuple[str, ...] = RUN_STAGES) -> Callable[[str], None]:
    """Progress on stderr: a bar over the stages, the seconds since the command began, and the
    worker's or pipeline's own line (the worker does not report inside the timed loop)."""
    started = time.monotonic()
    reached = [0]

    def say(message: str) -> None:
        stage = next((i for i, s in enumerate(stages, 1) if message.startswith(s)), 0)
        reached[0] = max(reached[0], stage)
        filled = round(20 * reached[0] / len(stages))
        bar = "#" * filled + "-" * (20 - filled)
        elapsed = time.monotonic() - started
        print(f"  [{bar}] {elapsed:6.1f}s  {message}", file=sys.stderr, flush=True)

    return say


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of text (the first one the header) as left-aligned columns, indented two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def comma_list(listed: str | None) -> list[str] | None:
    """A comma-separated option as a list (None when absent or empty)."""
    names = [name.strip() for name in (listed or "").split(",") if name.strip()]
    return names or None

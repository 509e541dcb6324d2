"""Helpers the command families share: the progress printer of `aaco run` and `aaco ingest`,
where the sessions went, aligned tables (`aaco registry list`, `aaco baseline list`),
comma-separated options, the one way every `--json` prints, colour on a terminal, and the
examples every `--help` ends with."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

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
    """Rows of text (the first one the header) as left-aligned columns, indented two spaces;
    verdicts coloured on a terminal (emit)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    emit(
        "\n".join(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )
    )


def comma_list(listed: str | None) -> list[str] | None:
    """A comma-separated option as a list (None when absent or empty)."""
    names = [name.strip() for name in (listed or "").split(",") if name.strip()]
    return names or None


def add_json_option(parser, what: str) -> None:
    """`--json`, as every command that reports has it."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def print_json(data: object) -> None:
    """What every `--json` prints: one JSON document on stdout and nothing else (progress and
    notes go to stderr), indented; dataclasses as objects, paths, times and other values as
    their text."""
    import json

    to_terminal(json.dumps(data, indent=2, default=_json_value))


def _json_value(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def to_terminal(text: str) -> None:
    """Print to stdout; a reader that stops early (`| head`) ends the printing quietly, as it
    does for any Unix tool, never with a traceback."""
    try:
        print(text.rstrip("\n"), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit


# --- colour: verdicts on a terminal, plain when piped or NO_COLOR is set ----------------------

# Whole words only, as the commands print them (rich styles).
VERDICT_STYLES = (
    (r"SUSPECT|suspect|regression|regressed|breached|problem|failed|NOT MEASURED", "bold red"),
    (r"warning|missing|uncertain|undecided|unstable_series|insufficient_history", "yellow"),
    (r"OK|ok|pass|passed|met|no_change|improvement", "green"),
)


def colour_wanted(stream=None, environ=None) -> bool:
    """Colour only on a terminal, and never where NO_COLOR is set (no-color.org) or the
    terminal is dumb."""
    env = os.environ if environ is None else environ
    stream = sys.stdout if stream is None else stream
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def coloured(text: str) -> str:
    """The text with its verdict words in colour (ANSI, rendered by rich)."""
    from rich.console import Console
    from rich.text import Text

    styled = Text(text)
    for words, style in VERDICT_STYLES:
        styled.highlight_regex(rf"(?<![\w-])(?:{words})(?![\w-])", style)
    console = Console(force_terminal=True, color_system="standard", soft_wrap=True,
                      highlight=False, emoji=False, markup=False)  # fmt: skip
    with console.capture() as captured:
        console.print(styled, end="")
    return captured.get()


def emit(text: str) -> None:
    """Print a command's text to stdout, its verdicts coloured when stdout is a terminal
    (rich is imported only then: piped output costs nothing)."""
    to_terminal(coloured(text) if colour_wanted() else text)


# --- examples at the end of every --help --------------------------------------------------------


def with_examples(parser, *examples: str):
    """The parser with an `examples:` epilog of real invocations (kept as written)."""
    import argparse

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    return parser


def examples_of(parser) -> list[str]:
    """The invocations a parser's `--help` gives as examples (comments after `#` dropped)."""
    lines = (parser.epilog or "").splitlines()
    if not lines or lines[0] != "examples:":
        return []
    return [re.sub(r"\s+#.*$", "", line).strip() for line in lines[1:] if line.strip()]


def path_argument(action, kind: str = "file"):
    """Mark an argument as a path (file or dir) for shell completion (cli.completion)."""
    action.aaco_path = kind
    return action


def next_commands(session_id: str, compare: bool) -> list[str]:
    """What to run after a session: its whole report in the terminal, and the gate's verdict
    when the model has an earlier session to compare with."""
    commands = [f"aaco report --session {session_id} --format md"]
    if compare:
        commands.append(f"aaco diff --current {session_id}")
    return commands


def reports_folder(home: Path) -> Path:
    """AACO_HOME/reports, where reports and traces go by default (made when first needed)."""
    from aaco_pipelines.report.session_files import REPORTS

    folder = Path(home) / REPORTS
    folder.mkdir(parents=True, exist_ok=True)
    return folder

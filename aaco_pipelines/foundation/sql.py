"""Quoting for the SQL aaco builds around names, values and paths that come from files.

A trace's CSV header, its JSON keys, a SQLite database's table and column names and the trace's
own path are written by whoever made the file: they enter SQL only through these functions, so
they stay names and text and never become statements."""

from __future__ import annotations

import re
from pathlib import Path

from aaco_pipelines.errors import AacoInputError

# What DuckDB's file readers take as a glob pattern in a path.
GLOB_CHARACTERS = "*?["


def sql_literal(text: str) -> str:
    """`text` as a SQL string literal (single quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def sql_identifier(name: str) -> str:
    """`name` as a quoted SQL identifier (double quotes doubled), for DuckDB and SQLite."""
    return '"' + name.replace('"', '""') + '"'


def sql_path(path: Path) -> str:
    """A string literal naming exactly this local file for DuckDB's readers (read_csv,
    read_json), which take `*`, `?` and `[` as a pattern: each is escaped as a one-character
    class, so a trace named `run*` reads neither `run-2` beside it nor anything else."""
    text = str(Path(path).absolute())  # never `~/...` or a URL
    if not any(c in text for c in GLOB_CHARACTERS):
        return sql_literal(text)
    if "\\" in text:  # DuckDB's pattern matching splits paths at backslashes too
        raise AacoInputError(
            "DuckDB cannot read a path with a backslash and *, ? or [ in it exactly",
            path=path,
            fix="rename the file or folder without the backslash (or without *, ? and [)",
        )
    return sql_literal("".join(f"[{c}]" if c in GLOB_CHARACTERS else c for c in text))


def used_parameters(sql: str, params: dict) -> dict:
    """The named parameters `sql` uses (`$name`): DuckDB refuses a parameter a query lacks, so
    one set of values can serve several queries."""
    return {k: v for k, v in params.items() if re.search(rf"\${re.escape(k)}\b", sql)}

"""`aaco --version`: this aaco, the commit it runs from, and the versions of what it measures
and stores with (ONNX Runtime, Dagster, DuckDB), read from the installed distributions'
metadata: none of them is imported, so the answer takes no longer than Python's start."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from aaco_pipelines import __version__

# The distributions that install the module `onnxruntime`, one per host kind (pyproject.toml).
ONNXRUNTIME_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-rocm", "onnxruntime-migraphx",
                             "onnxruntime-gpu")  # fmt: skip
UNKNOWN = "unknown"


def checkout_commit(package: Path | None = None) -> str | None:
    """The short commit of the git checkout this package runs from (None when installed from a
    wheel, or when git cannot tell)."""
    root = (package or Path(__file__).resolve().parents[1]).parent
    if not (root / ".git").exists():
        return None
    try:
        found = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
            capture_output=True, text=True, timeout=5, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # no git here
        return None
    commit = found.stdout.strip()
    return commit if found.returncode == 0 and commit else None


def distribution_version(*names: str) -> str | None:
    """The version of the first of these distributions that is installed, with its name when
    it is not the first (onnxruntime-rocm)."""
    from importlib import metadata

    for name in names:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return version if name == names[0] else f"{version} ({name})"
    return None


def version_line() -> str:
    """`aaco 0.1.0 (commit abc1234) onnxruntime 1.22.1 dagster 1.13.27 duckdb 2.0.1`."""
    parts = [f"aaco {__version__} (commit {checkout_commit() or UNKNOWN})"]
    for label, names in (("onnxruntime", ONNXRUNTIME_DISTRIBUTIONS), ("dagster", ("dagster",)),
                         ("duckdb", ("duckdb",))):  # fmt: skip
        parts.append(f"{label} {distribution_version(*names) or 'not installed'}")
    return " ".join(parts)


class VersionAction(argparse.Action):
    """`--version`, computed when asked (a git call), not at every start."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="this aaco's version and commit, with ONNX Runtime's, Dagster's and "
                 "DuckDB's"):  # fmt: skip
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()

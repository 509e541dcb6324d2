"""Start-up of the `aaco` commands: `.venv/bin/python benchmarks/startup.py [--repeats N]`.

Each command is run as a whole process (interpreter start, imports, argument parsing) on input
that its first real step refuses at once (a model, trace or session that does not exist, in an
empty AACO_HOME), so the time is what the command costs before its real work begins. The
target is 0.5 s (issue 14): heavy modules (scipy, matplotlib, Dagster) are imported where they
are used. `aaco sweep`, `aaco ui` and `aaco worker` are Dagster itself: importing it is their
work, shown for reference. Prints the median of `--repeats` runs per command, after one run
that leaves Python's bytecode cache behind as any installed package has it (the benchmark
ignores PYTHONDONTWRITEBYTECODE: compiling the project's modules at every start is ~0.12 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.5
COMMANDS = {
    "aaco --version": ["--version"],
    "aaco registry list": ["registry", "list"],
    "aaco run": ["run", "--model", "missing.onnx"],
    "aaco ingest": ["ingest", "missing_trace"],
    "aaco report": ["report", "--session", "latest", "--format", "json", "--output", "r.json"],
    "aaco export": ["export", "--session", "latest", "--output", "p.json"],
    "aaco diff": ["diff"],
    "aaco baseline list": ["baseline", "list"],
    "aaco doctor": ["doctor"],
    "aaco sweep (Dagster)": ["sweep", "--models", "missing"],
}


def aaco_command() -> list[str]:
    """The installed console script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("aaco")
    return [str(script)] if script.exists() else [sys.executable, "-m", "aaco_pipelines.cli"]


def time_command(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="aaco-startup-") as tmp:
        env = {**os.environ, "AACO_HOME": str(Path(tmp) / "home")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for name, arguments in COMMANDS.items():
            argv = aaco_command() + arguments
            time_command(argv, env, Path(tmp))  # bytecode cached, as installed
            times = [time_command(argv, env, Path(tmp)) for _ in range(args.repeats)]
            median = statistics.median(times)
            results[name] = round(median, 3)
            verdict = "" if "Dagster" in name else ("ok" if median <= TARGET_S else "OVER")
            print(f"{name:<24} {median:6.2f} s  (runs {[round(t, 2) for t in times]}) {verdict}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

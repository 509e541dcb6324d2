"""Start-up of the `aaco` commands: `.venv/bin/python benchmarks/startup.py [--repeats N]`.

Each command is run as a whole process (interpreter start, imports, argument parsing) on input
that its first real step refuses at once (a model, trace or session that does not exist, in an
empty AACO_HOME), so the time is what the command costs before its real work begins. The
target is 0.5 s (issue 14): heavy modules (scipy, matplotlib, Dagster) are imported where they
are used. `aaco sweep`, `aaco ui` and `aaco worker` are Dagster itself: importing it is their
work, shown for reference. Prints the median of `--repeats` runs per command, after one run
that leaves Python's bytecode cache behind as any installed package has it (the benchmark
ignores PYTHONDONTWRITEBYTECODE: compiling the project's modules at every start is ~0.12 s).

Then the first printed line of a real `aaco run` (a zoo model) and `aaco ingest` (a rocprofv3
csv from shared/samples) (issue 45): the time from the start of the process to its first line
(on stderr, before the pipeline's imports) and to its first progress line (after them: where
the first line used to come), each command stopped (SIGTERM, as a user's Ctrl-C) once read.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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
    "aaco sessions": ["sessions"],
    "aaco run": ["run", "--model", "missing.onnx"],
    "aaco ingest": ["ingest", "missing_trace"],
    "aaco report": ["report", "--session", "latest", "--format", "json", "--output", "r.json"],
    "aaco export": ["export", "--session", "latest"],
    "aaco diff": ["diff"],
    "aaco baseline list": ["baseline", "list"],
    "aaco alert list": ["alert", "list"],
    "aaco doctor": ["doctor"],
    "aaco completion bash": ["completion", "bash"],
    "aaco sweep (Dagster)": ["sweep", "--models", "missing"],
}
SAMPLE_TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared" / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
)  # fmt: skip
FIRST_LINE_MODEL = "mlp"  # a zoo model: found by name, hashed in a millisecond


def aaco_command() -> list[str]:
    """The installed console script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("aaco")
    return [str(script)] if script.exists() else [sys.executable, "-m", "aaco_pipelines.cli"]


def time_command(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    return time.perf_counter() - t0


def first_lines(argv: list[str], env: dict, cwd: Path) -> tuple[float, float | None, str]:
    """(seconds to the first stderr line, to the first progress line, the first line) of a
    real command, which is then stopped with SIGTERM (it ends its measuring process itself)."""
    t0 = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        first = process.stderr.readline()
        t_first = time.perf_counter() - t0
        t_progress = None
        for line in process.stderr:
            if line.startswith("  ["):  # the stage progress bar: the pipeline is imported
                t_progress = time.perf_counter() - t0
                break
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own group, started above
            process.wait()
    return t_first, t_progress, first.strip()


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

        from aaco_pipelines.registry.zoo import build_zoo

        build_zoo(Path(tmp) / "home" / "registry")
        real = {"aaco run": ["run", "--model", FIRST_LINE_MODEL, "--iterations", "1000000"]}
        if SAMPLE_TRACE.is_file():
            real["aaco ingest"] = ["ingest", str(SAMPLE_TRACE), "--no-publish"]
        for name, arguments in real.items():
            argv = aaco_command() + arguments
            runs = [first_lines(argv, env, Path(tmp)) for _ in range(args.repeats)]
            first = statistics.median(r[0] for r in runs)
            progress = statistics.median(r[1] for r in runs if r[1] is not None)
            results[f"{name} first line"] = round(first, 3)
            results[f"{name} first progress line"] = round(progress, 3)
            verdict = "ok" if first <= TARGET_S else "OVER"
            print(f"{name + ' first line':<24} {first:6.2f} s  (runs {[round(r[0], 2) for r in runs]}) "
                  f"{verdict}: {runs[0][2]!r}")  # fmt: skip
            print(f"{'  then its progress':<24} {progress:6.2f} s  (the pipeline imported)")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

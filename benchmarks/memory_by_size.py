"""Peak memory by trace size: `.venv/bin/python benchmarks/memory_by_size.py [--kernels N,N,...]`
(default 2, 10 and 20 million kernels).

For each size: simulates an N-kernel rocprofv3 run from a real ONNX Runtime profile (as
benchmarks/gpu_traces.py does), then runs, each as a whole process in a fresh AACO_HOME, with
its wall time and peak resident memory: `aaco ingest <folder>` end to end, and `aaco export` of
the session as Perfetto JSON and as Perfetto protobuf. Issue 14 asks for peak memory flat in the
trace's size: DuckDB's memory for the TraceLake is bounded (AACO_DUCKDB_MEMORY_MB, default
1024), the analysis and the exports stream. `--memory-mb M` sets AACO_DUCKDB_MEMORY_MB for
the runs. Each size's files are deleted before the next. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from gpu_traces import print_rows, timed_process, zoo_profile
from trace_simulator import SimulationSettings, simulate_at_scale

EXPORTS = {"perfetto": "trace.json", "perfetto-proto": "trace.perfetto-trace"}


def measure_size(kernels: int, tmp: Path, env: dict) -> dict:
    """Ingest and both exports of one simulated trace, each a whole process."""
    truth = simulate_at_scale(kernels, tmp / "sim", SimulationSettings(), zoo_profile(tmp))
    trace = tmp / "rocprof"  # what rocprofv3 wrote, and nothing of the simulation's truth
    trace.mkdir()
    for csv in (truth.kernel_trace, truth.hip_api_trace):
        os.link(csv, trace / csv.name)
    aaco = [sys.executable, "-m", "aaco_pipelines.cli"]
    result = {"kernels": kernels, "ingest": timed_process([*aaco, "ingest", str(trace)], env)}
    shutil.rmtree(tmp / "sim")
    for fmt, name in EXPORTS.items():
        output = tmp / name
        command = [*aaco, "export", "--format", fmt, "--output", str(output)]
        result[fmt] = {**timed_process(command, env), "bytes": output.stat().st_size}
        output.unlink()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="2000000,10000000,20000000")
    parser.add_argument("--memory-mb", type=int, help="AACO_DUCKDB_MEMORY_MB for the runs")
    args = parser.parse_args(argv)
    results = []
    for kernels in (int(n) for n in args.kernels.split(",")):
        with tempfile.TemporaryDirectory(prefix="aaco-memory-bench-") as tmp_name:
            tmp = Path(tmp_name)
            env = {**os.environ, "AACO_HOME": str(tmp / "home")}
            if args.memory_mb:
                env["AACO_DUCKDB_MEMORY_MB"] = str(args.memory_mb)
            results.append(measure_size(kernels, tmp, env))
    rows = []
    for r in results:
        for stage in ("ingest", *EXPORTS):
            m = r[stage]
            size = f", {m['bytes'] / 1e6:,.0f} MB written" if "bytes" in m else ""
            rows.append((f"{r['kernels']:,} kernels: {stage}", f"{m['seconds']:.2f} s",
                         f"peak {m['peak_rss_bytes'] / 2**20:,.0f} MiB{size}"))  # fmt: skip
    print_rows(rows)
    print(json.dumps({"duckdb_memory_mb": args.memory_mb or "default", "runs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

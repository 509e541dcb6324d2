"""Perfetto export benchmark: `.venv/bin/python benchmarks/perfetto_export.py [--kernels N]`.

Simulates an N-kernel rocprofv3 run from a real ONNX Runtime profile (as benchmarks/gpu_traces.py
does), loads it with `aaco ingest`, then exports the session in both formats, each in a fresh
process: Chrome trace-event JSON (`write_perfetto`) and Perfetto's protobuf trace
(`write_perfetto_proto`). Prints each one's time, events, file size and peak memory, and one
JSON line. `--home DIR` keeps the AACO_HOME (and reuses a session already there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FORMATS = {"perfetto": "trace.json", "perfetto-proto": "trace.perfetto-trace"}


def build_session(kernels: int, home: Path) -> None:
    """A simulated rocprofv3 trace of `kernels` kernels, ingested into `home`'s TraceLake."""
    from gpu_traces import zoo_profile
    from trace_simulator import SimulationSettings, simulate_at_scale

    from aaco_pipelines.config import AacoPaths
    from aaco_pipelines.stages.ingest_trace import ingest_trace

    with tempfile.TemporaryDirectory(prefix="aaco-perfetto-bench-") as tmp_name:
        tmp = Path(tmp_name)
        truth = simulate_at_scale(kernels, tmp / "sim", SimulationSettings(), zoo_profile(tmp))
        trace = tmp / "rocprof"
        trace.mkdir()
        for csv in (truth.kernel_trace, truth.hip_api_trace):
            os.link(csv, trace / csv.name)
        ingest_trace(trace, AacoPaths.from_env({"AACO_HOME": str(home)}), name="bench")


def export(fmt: str, lake: Path, output: Path) -> dict:
    """One export in this process: seconds, events, bytes, peak resident memory."""
    from gpu_traces import peak_rss_bytes

    from aaco_pipelines.report.perfetto import write_perfetto
    from aaco_pipelines.report.perfetto_proto import write_perfetto_proto
    from aaco_pipelines.tracelake.store import TraceLake

    write = write_perfetto_proto if fmt == "perfetto-proto" else write_perfetto
    t0 = time.perf_counter()
    events = write(TraceLake(lake), "latest", output)
    seconds = time.perf_counter() - t0
    return {"format": fmt, "seconds": round(seconds, 2), "events": events,
            "bytes": output.stat().st_size, "peak_rss_mb": peak_rss_bytes() >> 20}  # fmt: skip


def run_export(fmt: str, lake: Path, output: Path) -> dict:
    command = [sys.executable, __file__, "--export", fmt, "--lake", str(lake), "--output",
               str(output)]  # fmt: skip
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=10_000_000)
    parser.add_argument("--home", type=Path, help="AACO_HOME to keep (default: a temporary one)")
    parser.add_argument("--export", choices=sorted(FORMATS), help=argparse.SUPPRESS)
    parser.add_argument("--lake", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.export:
        print(json.dumps(export(args.export, args.lake, args.output)))
        return 0
    with tempfile.TemporaryDirectory(prefix="aaco-perfetto-out-") as tmp_name:
        home = args.home or Path(tmp_name) / "home"
        lake = home / "tracelake.duckdb"
        if not lake.exists():
            build_session(args.kernels, home)
        results = []
        for fmt, name in FORMATS.items():
            output = Path(tmp_name) / name
            results.append(run_export(fmt, lake, output))
            output.unlink()
    for r in results:
        print(f"{r['format']:15} {r['seconds']:7.2f} s  {r['events']:>12,} events  "
              f"{r['bytes'] / 1e6:9.1f} MB  peak {r['peak_rss_mb']} MB")  # fmt: skip
    print(json.dumps({"kernels": args.kernels, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

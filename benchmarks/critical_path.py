"""Critical-path benchmark: `.venv/bin/python benchmarks/critical_path.py [--kernels N ...]
[--memory-mb MB ...]` (default 2,000,000 and 10,000,000 kernels; DuckDB's lake memory limit
AACO_DUCKDB_MEMORY_MB 1024, the default).

For each size: simulates an N-kernel rocprofv3 run (kernel trace + HIP API trace, the trace
simulator's synthetic CNN/transformer pattern repeated, two queues), ingests it as `aaco ingest
<folder>` does (`ingest_trace`) into a fresh AACO_HOME, then, in a fresh process, times
`analysis.critical_path.device_path.device_critical_path` and one what-if (`device_whatif.predict_device_spans`: the most
critical kernel twice as fast) over the TraceLake, with that process's peak resident memory
(VmHWM), once per memory limit. Targets: < 30 s for both at 10M kernels on 2 cores, and peak
memory bounded in trace size: the work is DuckDB window functions over the stored tables, which
spill under the lake's memory limit, and no Python object per kernel, so the peak is the
limit plus the interpreter's own, whatever the trace (below the limit, it grows until it
reaches it). Prints a small table and one JSON line. Everything lives in a temporary folder.
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

import pyarrow as pa
from gpu_traces import bench_paths, peak_rss_bytes, print_rows
from trace_simulator import simulate_at_scale

from aaco_pipelines.analysis.critical_path.device_path import device_critical_path
from aaco_pipelines.analysis.critical_path.device_whatif import predict_device_spans
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.tracelake.store import TraceLake

TARGET_S = 30.0
# Peak memory may be DuckDB's limit plus this much (interpreter, pyarrow, DuckDB's library):
# bounded whatever the trace, where a Python object per kernel would grow with it.
INTERPRETER_MB = 400


def measure(work: Path) -> dict:
    """The critical path and one what-if of the lake's one session, timed (in this process)."""
    lake = TraceLake(bench_paths(work).tracelake)
    (session,) = lake.query("SELECT session_id FROM session_records")["session_id"].to_pylist()
    t0, cpu0 = time.perf_counter(), time.process_time()
    path = device_critical_path(lake, session)
    t1, cpu1 = time.perf_counter(), time.process_time()
    top = path.per_node.to_pylist()[0]
    factors = pa.table({"node_name": [top["node_name"]], "speedup": [2.0]})
    predicted = predict_device_spans(lake, session, factors, "node_name").to_pylist()
    t2, cpu2 = time.perf_counter(), time.process_time()
    span = sum(r["span_ns"] for r in predicted)
    return {
        "critical_path_s": t1 - t0,
        "what_if_s": t2 - t1,
        # CPU time of all threads: what a busy machine cannot inflate (2 cores: wall >= cpu / 2)
        "critical_path_cpu_s": cpu1 - cpu0,
        "what_if_cpu_s": cpu2 - cpu1,
        "load_average": os.getloadavg()[0],
        "peak_rss_bytes": peak_rss_bytes(),
        "iterations": path.per_iteration.num_rows,
        "nodes": path.per_node.num_rows,
        "host_share": path.host_share,
        "top_node_critical_share": top["critical_ns"] / max(span, 1),
        "what_if_saving": 1 - sum(r["predicted_span_ns"] for r in predicted) / max(span, 1),
    }


def one_size(kernels: int, tmp: Path, limits: list[int]) -> list[dict]:
    """Simulate, ingest, then measure in a fresh process per memory limit."""
    t0 = time.perf_counter()
    truth = simulate_at_scale(kernels, tmp / "sim")
    trace = tmp / "rocprof"  # what rocprofv3 wrote, and nothing of the simulation's truth
    trace.mkdir()
    for csv in (truth.kernel_trace, truth.hip_api_trace):
        os.link(csv, trace / csv.name)
    simulate_s = time.perf_counter() - t0
    work = tmp / "work"
    t1 = time.perf_counter()
    ingest_trace(trace, bench_paths(work), name="bench")
    ingest_s = time.perf_counter() - t1
    results = []
    for limit in limits:
        env = {**os.environ, "AACO_DUCKDB_MEMORY_MB": str(limit)}
        command = [sys.executable, __file__, "--measure", str(work)]
        output = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
        result = json.loads(output.stdout.strip().splitlines()[-1])
        results.append({"kernels": truth.kernels, "duckdb_memory_mb": limit,
                        "simulate_s": simulate_s, "ingest_s": ingest_s, **result})  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, nargs="+", default=[2_000_000, 10_000_000])
    parser.add_argument("--memory-mb", type=int, nargs="+", default=[1024])
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    runs = []
    for kernels in sorted(args.kernels):
        with tempfile.TemporaryDirectory(prefix="aaco-critical-path-") as tmp_name:
            runs += one_size(kernels, Path(tmp_name), args.memory_mb)
    default = [r for r in runs if r["duckdb_memory_mb"] == args.memory_mb[0]]
    largest, smallest = default[-1], default[0]
    summary = {
        "runs": runs,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "memory_ratio": largest["peak_rss_bytes"] / smallest["peak_rss_bytes"],
        "targets_met": {
            "time": largest["critical_path_s"] + largest["what_if_s"] < TARGET_S,
            "bounded_memory": all(
                r["peak_rss_bytes"] <= (r["duckdb_memory_mb"] + INTERPRETER_MB) << 20 for r in runs
            ),
        },
    }
    rows = []
    for r in runs:
        rows += [
            (f"{r['kernels']:,} kernels, {r['duckdb_memory_mb']} MB", f"{r['critical_path_s']:.2f} s",
             f"critical path; what-if {r['what_if_s']:.2f} s (total < {TARGET_S:.0f} s); "
             f"CPU {r['critical_path_cpu_s']:.1f} + {r['what_if_cpu_s']:.1f} s, "
             f"load {r['load_average']:.1f}"),
            ("   peak memory", f"{r['peak_rss_bytes'] / 2**20:.0f} MB",
             f"host share {r['host_share']:.3f}; simulate {r['simulate_s']:.0f} s, "
             f"ingest {r['ingest_s']:.0f} s"),
        ]  # fmt: skip
    rows.append((f"memory, largest / smallest ({args.memory_mb[0]} MB)",
                 f"{summary['memory_ratio']:.2f}x",
                 f"bounded (<= limit + {INTERPRETER_MB} MB): "
                 f"{summary['targets_met']['bounded_memory']}"))  # fmt: skip
    print_rows(rows)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

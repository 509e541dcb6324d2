"""GPU trace benchmark: `.venv/bin/python benchmarks/gpu_traces.py [--kernels N]` (default 10,000,000).

Simulates an N-kernel rocprofv3 run (`<pid>_kernel_trace.csv` + `<pid>_hip_api_trace.csv`) from
a real ONNX Runtime profile of the zoo's resnet_cnn, repeated as many iterations as needed, then
measures side by side:
  a. plain DuckDB: CREATE TABLE t AS SELECT * FROM read_csv('<kernel trace>') into a fresh
     database file;
  b. our path: collectors.traces.collect_trace → kernel_events.parquet → INSERT into a fresh
     TraceLake (time, ratio to a: target <= 1.25x; peak memory: target < 2 GB); b' for
     comparison: the collector's SQL inserted straight into the TraceLake, no Parquet step;
  c. GPU attribution (attribute_gpu_kernels) + derived metrics (analysis.metrics) on the N
     kernels (target < 60 s), and the attribution's accuracy against the simulated truth.
a and b each run in a fresh child process, which reports its own wall time and peak resident
memory (VmHWM). Prints a small table and one JSON line. Everything lives in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aaco_pipelines.analysis.gpu_attribution import attribute_gpu_kernels, clock_alignment_of
from aaco_pipelines.analysis.metrics import compute_metrics
from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.collectors.trace_simulator import (
    SimulationSettings,
    attribution_accuracy,
    simulate_at_scale,
)
from aaco_pipelines.tracelake.schema import API_CALLS, KERNEL_EVENTS, sql_projection
from aaco_pipelines.tracelake.store import TraceLake

TARGET_RATIO, TARGET_PEAK_BYTES, TARGET_ANALYSIS_S = 1.25, 2 * 1024**3, 60.0
KERNEL_COLUMNS = ["node_name", "iteration", "correlation_id", "dispatch_id", "kernel_name",
                  "kernel_family", "start_ns", "duration_ns"]  # fmt: skip


def zoo_profile(tmp: Path, iterations: int = 10) -> pa.Table:
    """Node windows of a real ONNX Runtime CPU profile of the zoo's resnet_cnn."""
    import onnxruntime as ort

    from aaco_pipelines.registry.zoo import build_model

    path = tmp / "resnet_cnn.onnx"
    path.write_bytes(build_model("resnet_cnn").SerializeToString())
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp / "resnet_cnn")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    start_ns = session.get_profiling_start_time_ns()
    image = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    for _ in range(iterations):
        session.run(None, {"image": image})
    return read_ort_profile(tmp / session.end_profiling(), "bench", start_ns)


# --- a and b: one fresh child process each ---------------------------------------------------


def baseline_ingest(kernel_trace: Path, work: Path) -> None:
    with duckdb.connect(str(work / "plain.duckdb")) as con:
        con.execute("CREATE TABLE t AS SELECT * FROM read_csv(?)", [str(kernel_trace)]).fetchall()


def our_ingest(kernel_trace: Path, work: Path) -> None:
    parquet = collect_kernel_events(kernel_trace, work / "collected")
    lake = TraceLake(work / "tracelake.duckdb")
    with lake.connect(write=True) as con:
        con.execute(
            "INSERT INTO kernel_events BY NAME SELECT * FROM read_parquet(?)", [str(parquet)]
        ).fetchall()


def collect_kernel_events(kernel_trace: Path, out_dir: Path) -> Path:
    """kernel_events.parquet through the real collector; an inline DuckDB COPY when this
    checkout has no collectors.traces yet."""
    try:
        from aaco_pipelines.collectors.traces import collect_trace
    except ImportError:
        return _copy_kernel_events(kernel_trace, out_dir)
    collect_trace(kernel_trace, "bench", out_dir)
    return out_dir / "kernel_events.parquet"


def _copy_kernel_events(kernel_trace: Path, out_dir: Path) -> Path:
    columns = {
        "category": "'Kernel'",
        "event_name": "Kernel_Name",
        "kernel_name": "Kernel_Name",
        "start_ns": "Start_Timestamp",
        "duration_ns": "End_Timestamp - Start_Timestamp",
        "thread_id": "Thread_Id",
        "queue_id": "Queue_Id",
        "stream_id": "Stream_Id",
        "correlation_id": "Correlation_Id",
        "dispatch_id": "Dispatch_Id",
    }
    return _copy(kernel_trace, KERNEL_EVENTS, columns, out_dir / "kernel_events.parquet")


def _copy(csv: Path, schema: pa.Schema, columns: dict[str, str], target: Path) -> Path:
    """CSV → schema-conformant Parquet in one DuckDB COPY (no Python rows)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    select = sql_projection(
        schema, {"session_id": "'bench'", "source": "'rocprofv3_csv'", **columns}
    )
    with duckdb.connect() as con:
        con.execute(
            f"COPY (SELECT {select} FROM read_csv(?)) TO '{target}' (FORMAT parquet)", [str(csv)]
        ).fetchall()
    return target


def direct_ingest(kernel_trace: Path, work: Path) -> None:
    """For comparison, b without the intermediate Parquet: the collector's own SQL plan
    inserted straight into the TraceLake."""
    from aaco_pipelines.collectors import rocprofv3_csv

    lake = TraceLake(work / "tracelake.duckdb")
    with lake.connect(write=True) as con:
        source, expressions = rocprofv3_csv.plans(con, kernel_trace)["kernel_events"]
        select = sql_projection(KERNEL_EVENTS, {"session_id": "'bench'", **expressions})
        con.execute(f"INSERT INTO kernel_events SELECT {select} FROM {source}").fetchall()


STAGES = {"baseline": baseline_ingest, "ours": our_ingest, "direct": direct_ingest}


def run_stage(stage: str, kernel_trace: Path, work: Path) -> dict:
    """Run one ingest stage in a fresh Python process: its wall time and peak memory."""
    work.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, "--stage", stage, "--trace", str(kernel_trace),
               "--work", str(work)]  # fmt: skip
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def child(stage: str, kernel_trace: Path, work: Path) -> None:
    t0 = time.perf_counter()
    STAGES[stage](kernel_trace, work)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": _peak_rss_bytes()}))


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- c: attribution and metrics ---------------------------------------------------------------


def analyse(kernel_events: Path, api_calls: Path, node_events: Path) -> dict:
    kernels = pq.read_table(kernel_events, columns=KERNEL_COLUMNS)
    calls = pq.read_table(api_calls)
    events = pq.read_table(node_events)
    t0 = time.perf_counter()
    assigned = attribute_gpu_kernels(kernels, calls, events)
    t_attr = time.perf_counter() - t0
    counted = pc.and_(
        pc.is_valid(assigned["iteration"]), pc.greater_equal(assigned["iteration"], 0)
    )
    measured = assigned.filter(counted)
    metric_input = pa.table(
        {
            "iteration": measured["iteration"],
            "start_ns": measured["start_ns"],
            "duration_ns": measured["duration_ns"],
            "provider": pa.repeat("ROCMExecutionProvider", measured.num_rows),
        }
    )
    runs = events.filter(pc.equal(events["event_name"], "model_run")).sort_by("iteration")
    runs = runs.filter(pc.greater_equal(runs["iteration"], 0))
    node_count = pc.count_distinct(events["node_name"]).as_py()
    t1 = time.perf_counter()
    metrics = compute_metrics(metric_input, runs, node_count)
    t_metrics = time.perf_counter() - t1
    return {
        "assigned": assigned,
        "attribution_s": t_attr,
        "metrics_s": t_metrics,
        "metrics": metrics,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=10_000_000)
    parser.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--trace", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        child(args.stage, args.trace, args.work)
        return 0

    with tempfile.TemporaryDirectory(prefix="aaco-gpu-bench-") as tmp_name:
        tmp = Path(tmp_name)
        settings = SimulationSettings()
        t0 = time.perf_counter()
        pattern = zoo_profile(tmp)
        truth = simulate_at_scale(args.kernels, tmp / "trace", settings, pattern)
        simulate_s = time.perf_counter() - t0
        trace_mb = truth.kernel_trace.stat().st_size / 1e6

        plain = run_stage("baseline", truth.kernel_trace, tmp / "a")
        ours = run_stage("ours", truth.kernel_trace, tmp / "b")
        ratio = ours["seconds"] / plain["seconds"]
        direct = _optional_stage("direct", truth.kernel_trace, tmp / "b-direct")

        api_dir = tmp / "api"
        t1 = time.perf_counter()
        api_parquet = _collect_api_calls(truth.hip_api_trace, api_dir)
        api_s = time.perf_counter() - t1
        result = analyse(tmp / "b/collected/kernel_events.parquet", api_parquet, truth.node_events)
        analysis_s = result["attribution_s"] + result["metrics_s"]
        t2 = time.perf_counter()
        accuracy = attribution_accuracy(result["assigned"], truth)
        accuracy_iteration = attribution_accuracy(result["assigned"], truth, by_iteration=True)
        accuracy_s = time.perf_counter() - t2
        alignment = clock_alignment_of(result["assigned"])

    summary = {
        "kernels": truth.kernels,
        "kernel_trace_mb": round(trace_mb, 1),
        "simulate_s": round(simulate_s, 2),
        "plain_duckdb_s": round(plain["seconds"], 2),
        "plain_duckdb_peak_mb": round(plain["peak_rss_bytes"] / 2**20),
        "ours_s": round(ours["seconds"], 2),
        "ours_over_plain": round(ratio, 3),
        "ours_peak_mb": round(ours["peak_rss_bytes"] / 2**20),
        "direct_s": direct and round(direct["seconds"], 2),
        "direct_over_plain": direct and round(direct["seconds"] / plain["seconds"], 3),
        "api_collect_s": round(api_s, 2),
        "attribution_s": round(result["attribution_s"], 2),
        "metrics_s": round(result["metrics_s"], 2),
        "analysis_s": round(analysis_s, 2),
        "accuracy": round(accuracy, 5),
        "accuracy_with_iteration": round(accuracy_iteration, 5),
        "accuracy_query_s": round(accuracy_s, 2),
        "clock_offset_error_ns": alignment.offset_ns - settings.clock_offset_ns,
        "launches_inside_windows": round(alignment.matched_fraction, 4),
        "targets_met": {
            "ingest_ratio": ratio <= TARGET_RATIO,
            "ingest_peak_memory": ours["peak_rss_bytes"] < TARGET_PEAK_BYTES,
            "analysis_time": analysis_s < TARGET_ANALYSIS_S,
        },
    }
    _print_table(summary)
    print(json.dumps(summary))
    return 0


def _optional_stage(stage: str, kernel_trace: Path, work: Path) -> dict | None:
    """A comparison stage that needs the rocprofv3 CSV collector; None without it."""
    try:
        return run_stage(stage, kernel_trace, work)
    except subprocess.CalledProcessError:
        return None


def _collect_api_calls(hip_api_trace: Path, out_dir: Path) -> Path:
    try:
        from aaco_pipelines.collectors.traces import collect_trace
    except ImportError:
        columns = {
            "domain": "Domain",
            "api_name": "Function",
            "start_ns": "Start_Timestamp",
            "duration_ns": "End_Timestamp - Start_Timestamp",
            "process_id": "Process_Id",
            "thread_id": "Thread_Id",
            "correlation_id": "Correlation_Id",
        }
        return _copy(hip_api_trace, API_CALLS, columns, out_dir / "api_calls.parquet")
    collect_trace(hip_api_trace, "bench", out_dir)
    return out_dir / "api_calls.parquet"


def _print_table(s: dict) -> None:
    rows = [
        ("kernels simulated", f"{s['kernels']:,}", f"{s['kernel_trace_mb']} MB CSV"),
        ("simulate (profile + traces)", f"{s['simulate_s']:.2f} s", ""),
        ("a. plain DuckDB read_csv", f"{s['plain_duckdb_s']:.2f} s",
         f"peak {s['plain_duckdb_peak_mb']} MB"),
        ("b. collect_trace + TraceLake", f"{s['ours_s']:.2f} s",
         f"{s['ours_over_plain']:.2f}x of a (<= {TARGET_RATIO}x); peak {s['ours_peak_mb']} MB"),
        ("b'. same SQL, no Parquet step", f"{s['direct_s']} s",
         f"{s['direct_over_plain']}x of a (for comparison)"),
        ("   HIP API trace collect", f"{s['api_collect_s']:.2f} s", ""),
        ("c. attribution", f"{s['attribution_s']:.2f} s", ""),
        ("c. derived metrics", f"{s['metrics_s']:.2f} s",
         f"total {s['analysis_s']:.2f} s (< {TARGET_ANALYSIS_S:.0f} s)"),
        ("attribution accuracy (time)", f"{s['accuracy']:.4%}",
         f"with iteration {s['accuracy_with_iteration']:.4%}"),
        ("clock offset error", f"{s['clock_offset_error_ns']} ns",
         f"launches inside windows {s['launches_inside_windows']:.2%}"),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>14}  {note}")


if __name__ == "__main__":
    sys.exit(main())

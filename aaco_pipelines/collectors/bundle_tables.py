"""A session bundle's raw evidence → the normalized TraceLake tables of that session.

This is the single place where a bundle becomes rows: per-iteration latencies, kernel events from
ONNX Runtime's profile and (on a GPU host) rocprofv3's device trace, host and GPU telemetry, and
the one `sessions` row with the summary statistics.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.collectors.host_telemetry import host_telemetry_table, pass_labels
from aaco_pipelines.collectors.llm_generation import generation_tables
from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.collectors.traces import detect_format
from aaco_pipelines.execution.environment import runtime_fingerprint
from aaco_pipelines.tracelake.schema import ITERATIONS, SESSIONS, TELEMETRY, conform

PASS_ORDER = ("warmup", "measured", "profiled")


def collect_session(bundle: SessionBundle) -> dict[str, pa.Table]:
    """Write all TraceLake tables of one session into the bundle's tables/, and return them.

    Graph tables are added at ingestion from the bundle's graph/. A device trace (rocprofv3
    output in rocprof/) is checked and named in tables/device_trace.json, not copied: the
    TraceLake loads it from the raw files in one pass. Small tables are built in Arrow."""
    session = bundle.session
    latencies = bundle.read_json("latencies.json")
    passes = [(name, *bounds) for name, bounds in session["passes"].items()]
    tables = {
        "sessions": sessions_row(bundle, latencies),
        "iterations": iterations_table(bundle.session_id, latencies),
        "telemetry": telemetry_table(bundle, passes),
    }
    tables.update(generation_tables(bundle) or {})
    if "requests" in tables:
        tables["sessions"] = generation_sessions_row(tables["sessions"], bundle, tables)
    tables["kernel_events"] = read_ort_profile(
        bundle.file("ort_profile.json"),
        bundle.session_id,
        session["profiling_start_ns"],
        warmup_runs=session["profiled_warmup_iterations"],
    )
    bundle.write_tables(tables, device_trace(bundle))
    return tables


def device_trace(bundle: SessionBundle) -> dict | None:
    """The manifest of the traced pass's rocprofv3 output in rocprof/, if there is one; its
    format is checked now, so a broken trace fails collection, not a later stage."""
    trace_dir = bundle.file("rocprof")
    if not trace_dir.is_dir():
        return None
    return {"path": "rocprof", "format": detect_format(trace_dir), "iteration": None}


def telemetry_table(bundle: SessionBundle, passes: list[tuple[str, int, int]]) -> pa.Table:
    """Host telemetry, plus the GPU's (amdsmi) when the run sampled it."""
    parts = [
        host_telemetry_table(
            pq.read_table(bundle.file("host_samples.parquet")), bundle.session_id, passes
        )
    ]
    if bundle.file("gpu_samples.parquet").is_file():
        parts.append(
            gpu_telemetry_table(
                pq.read_table(bundle.file("gpu_samples.parquet")), bundle.session_id, passes
            )
        )
    return pa.concat_tables(parts)


def gpu_telemetry_table(raw: pa.Table, session_id: str, passes) -> pa.Table:
    """amdsmi samples (timestamp_ns, device, metric, value, unit) as TELEMETRY rows."""
    stamps = raw["timestamp_ns"].to_numpy()
    table = raw.append_column("pass", pa.array(pass_labels(stamps, passes), pa.string()))
    table = table.append_column("session_id", pa.array([session_id] * raw.num_rows, pa.string()))
    table = table.append_column("source", pa.array(["amdsmi"] * raw.num_rows, pa.string()))
    return conform(table, TELEMETRY)


def iterations_table(session_id: str, latencies: dict) -> pa.Table:
    parts = []
    for name in PASS_ORDER:
        if name not in latencies:
            continue
        starts = np.asarray(latencies[name]["iteration_start_ns"], dtype=np.int64)
        parts.append(
            pa.table(
                {
                    "session_id": pa.array(np.full(len(starts), session_id)),
                    "pass": pa.array(np.full(len(starts), name)),
                    "iteration": pa.array(np.arange(len(starts), dtype=np.int32)),
                    "start_ns": pa.array(starts),
                    "latency_ns": pa.array(
                        np.asarray(latencies[name]["latency_ns"], dtype=np.int64)
                    ),
                }
            )
        )
    return pa.concat_tables([conform(p, ITERATIONS) for p in parts])


def measured_latency_figures(measured_ns: np.ndarray, profiled_ns: np.ndarray) -> dict:
    """Summary statistics of the measured pass, and what profiling cost on top of it."""
    p50 = float(np.percentile(measured_ns, 50))
    profiled_p50 = float(np.percentile(profiled_ns, 50))
    mean = float(measured_ns.mean())
    return {
        "latency_mean_ns": mean,
        "latency_std_ns": float(measured_ns.std(ddof=1)) if len(measured_ns) > 1 else 0.0,
        "latency_p50_ns": int(round(p50)),
        "latency_p99_ns": int(round(np.percentile(measured_ns, 99))),
        "latency_min_ns": int(measured_ns.min()),
        "throughput_per_s": 1e9 / mean,  # one request at a time: inferences per second
        "profiled_latency_p50_ns": int(round(profiled_p50)),
        "profiling_overhead_pct": (profiled_p50 - p50) / p50 * 100.0,
    }


def sessions_row(bundle: SessionBundle, latencies: dict) -> pa.Table:
    session, request, env = bundle.session, bundle.request, bundle.environment
    summary = measured_latency_figures(
        np.asarray(latencies["measured"]["latency_ns"], dtype=np.float64),
        np.asarray(latencies["profiled"]["latency_ns"], dtype=np.float64),
    )
    row = {
        "session_id": bundle.session_id,
        "model_slug": session["model_slug"],
        "model_name": session["model_name"],
        "model_sha256": session["model_sha256"],
        "started_at": dt.datetime.fromisoformat(session["started_at"]),
        "finished_at": dt.datetime.fromisoformat(session["finished_at"]),
        "target": session["target"],
        "providers_requested": session["providers_requested"],
        "providers_used": session["providers_used"],
        "trace_source": session["trace_source"],
        "laboratory": request["laboratory"] is not None,
        "warmup_iterations": request["warmup_iterations"],
        "measured_iterations": len(latencies["measured"]["latency_ns"]),
        # as run: the sidecar's count is a minimum (execution.profiled_count)
        "profiled_iterations": len(latencies["profiled"]["latency_ns"]),
        **summary,
        "ort_version": env.get("onnxruntime_version"),
        "rocm_version": env.get("rocm_version"),
        "runtime_fingerprint": runtime_fingerprint(env),
        "hostname": env.get("hostname"),
        "bundle_path": str(bundle.path),
        "env_json": json.dumps(env, sort_keys=True, default=str),
        "workload": "forward",
    }
    return pa.Table.from_pylist([row], schema=SESSIONS)


def generation_sessions_row(row: pa.Table, bundle: SessionBundle, tables: dict) -> pa.Table:
    """A generation session's row: its latencies are the headline scenario's end-to-end request
    latencies (the measured pass), its throughput that scenario's completed requests per second,
    its profiled iterations the runs of the profile (a prefill or a decode step each), and its
    profiling overhead the profiled decode steps' median against the measured ones' at
    batch 1 (null when no scenario decoded at batch 1)."""
    scenario = bundle.request["generation"]["workload"]["scenarios"][0]
    metrics = tables["generation_metrics"].to_pylist()
    requests_per_s = next(
        m["value"] for m in metrics
        if m["run"] == scenario and m["source"] == "aaco" and m["batch_size"] is None
        and m["metric"] == "requests_per_s"
    )  # fmt: skip
    steps = tables["generation_steps"]
    decode = steps.filter(
        pc.and_(pc.equal(steps["phase"], "decode"), pc.equal(steps["batch_size"], 1))
    )
    durations = pc.subtract(decode["end_ns"], decode["start_ns"]).to_numpy()
    profiled = (decode["run"].to_numpy(zero_copy_only=False) == "profiled") & (
        decode["iteration"].fill_null(-1).to_numpy() >= 0
    )
    measured = ~np.isin(decode["run"].to_numpy(zero_copy_only=False), ["profiled", "warmup"])
    overhead = None
    if profiled.any() and measured.any():
        base = float(np.median(durations[measured]))
        overhead = (float(np.median(durations[profiled])) - base) / base * 100.0
    passes = tables["iterations"]["pass"].to_numpy(zero_copy_only=False)
    changes = {
        "profiled_iterations": int((passes == "profiled").sum()),
        "workload": "generation",
        "scenario": scenario,
        "throughput_per_s": requests_per_s,
        "profiling_overhead_pct": overhead,
    }
    data = row.to_pylist()[0] | changes
    return pa.Table.from_pylist([data], schema=SESSIONS)

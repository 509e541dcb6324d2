"""`aaco ingest`: a trace collected elsewhere (a cluster node, a colleague's run) as a session.

The trace (a rocprofv3 output directory or file, a rocpd or RPD database, a rocprof v1
results.csv; an ONNX Runtime profile beside it is used for attribution) is copied into an
immutable bundle like a measured session's, with the model's graph when the model is given, and
then flows through collection, the TraceLake, attribution, classification and drift.

Without ONNX Runtime's `model_run` spans there are no iterations: the whole trace counts as one
iteration, its wall time is the trace's span (first kernel start to last kernel end), and that
span is the session's latency. Sessions of the same workload stay comparable; say so in reports.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from aaco_pipelines.bundle import SessionBundle, write_json
from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.collectors.session import latency_summary, merge_kernel_events
from aaco_pipelines.collectors.traces import collect_trace, detect_format
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.runner import new_session_id
from aaco_pipelines.graph.store import prepare_model_version
from aaco_pipelines.registry.scan import model_slug, registered_model
from aaco_pipelines.tracelake.schema import ITERATIONS, KERNEL_EVENTS, SESSIONS, TELEMETRY, conform

ORT_PROFILE_GLOBS = ("*onnxruntime_profile*.json", "ort_profile*.json")


def ingest_trace(
    trace: Path, paths: AacoPaths, *, model: Path | None = None, name: str | None = None
) -> SessionBundle:
    """Build and publish the session bundle of an external trace (tables included)."""
    trace = trace.absolute()
    if not trace.exists():
        raise AacoInputError(
            "trace not found", path=trace, fix="give a rocprofv3 output directory or a trace file"
        )
    trace_format = detect_format(trace)
    slug = model_slug(name or (model.stem if model else trace.stem))
    session_id = new_session_id(slug)
    staging = paths.sessions / ".staging" / session_id
    staging.mkdir(parents=True)
    try:
        bundle = _build(staging, trace, trace_format, paths, model, slug, name, session_id)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    final = paths.sessions / dt.date.today().isoformat() / session_id
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(bundle.path, final)
    return SessionBundle(final)


def _build(staging, trace, trace_format, paths, model, slug, name, session_id) -> SessionBundle:
    raw = staging / "raw"
    if trace.is_dir():
        shutil.copytree(trace, raw)
    else:
        raw.mkdir()
        shutil.copy2(trace, raw / trace.name)
    version = None
    if model is not None:
        version, _ = prepare_model_version(registered_model(model.absolute(), slug), paths)
        shutil.copytree(version.graph_dir, staging / "graph")
        derive_optimized_model(version.snapshot_path, staging / "optimized_model.onnx")
    bundle = SessionBundle(staging)
    with tempfile.TemporaryDirectory(prefix=".collect-", dir=staging) as tmp:
        tmp = Path(tmp)
        counts = collect_trace(raw if trace.is_dir() else raw / trace.name, session_id, tmp)
        if not counts.get("kernel_events"):
            raise AacoInputError(
                "the trace has no kernel dispatches",
                path=trace,
                fix="collect with kernel tracing on (rocprofv3 --kernel-trace)",
            )
        files = {n: tmp / f"{n}.parquet" for n, rows in counts.items() if rows}
        host = _host_events(trace, session_id, tmp)
        parts = [files["kernel_events"], *([host] if host else [])]
        files["kernel_events"] = merge_kernel_events(parts, tmp / "merged.parquet")
        span, runs = _iterations(files["kernel_events"], session_id, tmp, has_runs=host is not None)
        files["kernel_events"] = merge_kernel_events(
            [files["kernel_events"], *runs], tmp / "final.parquet"
        )
        write_json(
            staging / "session.json",
            _session_json(session_id, slug, name, trace, trace_format, version),
        )
        write_json(
            staging / "request.json",
            {
                "ingested_from": str(trace),
                "format": trace_format,
                "model": str(model) if model else None,
            },
        )
        write_json(
            staging / "env.json",
            {"collected_elsewhere": True, "trace_format": trace_format, "hostname": None},
        )
        tables = {
            "sessions": _sessions_row(bundle, span, version, trace_format),
            "iterations": _iterations_rows(session_id, span),
            "telemetry": _telemetry(files),
        }
        files.pop("telemetry", None)
        bundle.write_tables(tables, files)
    return bundle


def derive_optimized_model(model: Path, target: Path) -> None:
    """ONNX Runtime's optimized graph of the model, derived here with the CPU provider: node
    names match a CPU profile exactly; a GPU run's fusions may differ, and its extra nodes are
    then anchored by name (see attribution.with_profiled_nodes)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3
    ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def _host_events(trace: Path, session_id: str, tmp: Path) -> Path | None:
    """ONNX Runtime's profile of the same run, when it sits beside the trace: host node windows
    for attribution (its own clock; the GPU attribution estimates the offset)."""
    if not trace.is_dir():
        return None
    for pattern in ORT_PROFILE_GLOBS:
        for profile in sorted(trace.glob(pattern)):
            events = read_ort_profile(profile, session_id, profiling_start_ns=0)
            target = tmp / "host_events.parquet"
            pq.write_table(events, target)
            return target
    return None


def _iterations(kernel_events: Path, session_id: str, tmp: Path, has_runs: bool):
    """The trace's span (first kernel start, last kernel end), and — when there are no
    ONNX Runtime model_run spans — one synthetic run covering it, so every kernel is in
    iteration 0."""
    with duckdb.connect() as con:
        start, end = con.sql(
            "SELECT min(start_ns), max(start_ns + duration_ns) FROM read_parquet($f) "
            "WHERE category = 'Kernel'",
            params={"f": str(kernel_events)},
        ).fetchall()[0]
        if has_runs:
            return (start, end), []
        target = tmp / "kernels_in_run.parquet"
        con.execute(
            "COPY (SELECT * REPLACE (0::INTEGER AS iteration) FROM read_parquet($f)) TO $t (FORMAT parquet)",
            {"f": str(kernel_events), "t": str(target)},
        ).fetchall()
    run = pa.Table.from_pylist(
        [
            {
                "session_id": session_id,
                "source": "trace_span",
                "category": "Session",
                "iteration": 0,
                "event_name": "model_run",
                "start_ns": start,
                "duration_ns": end - start,
            }
        ]
    )
    run_file = tmp / "trace_span.parquet"
    pq.write_table(conform(run, KERNEL_EVENTS), run_file)
    os.replace(target, kernel_events)
    return (start, end), [run_file]


def _session_json(session_id, slug, name, trace, trace_format, version) -> dict:
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    return {
        "session_id": session_id,
        "model_name": name or (version.name if version else slug),
        "model_slug": slug,
        "model_sha256": version.sha256 if version else None,
        "target": "external",
        "started_at": now,
        "finished_at": now,
        "trace_source": trace_format,
        "ingested_from": str(trace),
        "passes": {},
        "providers_used": [],
        "providers_requested": [],
    }


def _sessions_row(bundle: SessionBundle, span, version, trace_format) -> pa.Table:
    session = bundle.session
    wall = float(span[1] - span[0])
    summary = latency_summary(pa.array([wall]).to_numpy(), pa.array([wall]).to_numpy())
    row = {
        **{
            k: session.get(k)
            for k in ("session_id", "model_slug", "model_name", "model_sha256", "target")
        },
        "started_at": dt.datetime.fromisoformat(session["started_at"]),
        "finished_at": dt.datetime.fromisoformat(session["finished_at"]),
        "providers_requested": [],
        "providers_used": [],
        "trace_source": trace_format,
        "laboratory": False,
        "warmup_iterations": 0,
        "measured_iterations": 1,
        "profiled_iterations": 1,
        **summary,
        "runtime_fingerprint": "external",
        "bundle_path": str(bundle.path),
        "env_json": "{}",
    }
    return pa.Table.from_pylist([row], schema=SESSIONS)


def _iterations_rows(session_id: str, span) -> pa.Table:
    rows = [
        {
            "session_id": session_id,
            "pass": p,
            "iteration": 0,
            "start_ns": span[0],
            "latency_ns": span[1] - span[0],
        }
        for p in ("measured", "profiled")
    ]
    return conform(pa.Table.from_pylist(rows), ITERATIONS)


def _telemetry(files: dict[str, Path]) -> pa.Table:
    if "telemetry" in files:
        return conform(pq.read_table(files["telemetry"]), TELEMETRY)
    return TELEMETRY.empty_table()

"""Ingest a trace (`aaco ingest`): a trace collected elsewhere (a cluster node, a colleague's run) as a session.

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
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from aaco_pipelines.bundle.session_bundle import (
    SessionBundle,
    copy_folder,
    copy_with_digest,
    record_evidence,
    write_json,
)
from aaco_pipelines.collectors.full_disk import full_disk
from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.collectors.rocprofv3_csv import missing_from_run
from aaco_pipelines.collectors.traces import detect_device_trace, trace_files
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError, Interrupted, out_of_space
from aaco_pipelines.execution.runner import new_session_id
from aaco_pipelines.execution.session_folders import clean_leftovers, session_folder_held
from aaco_pipelines.foundation.stopping import stop_requested
from aaco_pipelines.registry.identity import claim_series
from aaco_pipelines.registry.scan import model_slug, registered_model
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.tracelake.schema import ITERATIONS, KERNEL_EVENTS, SESSIONS, TELEMETRY, conform
from aaco_pipelines.tracelake.store import TraceLake

ORT_PROFILE_GLOBS = ("*onnxruntime_profile*.json", "ort_profile*.json")
# The longest span a trace may have: 2^62 ns, 146 years. Beyond it a latency in float
# nanoseconds no longer rounds to a 64-bit integer; no real trace comes near.
MAX_SPAN_NS = 1 << 62
INT64_MAX = (1 << 63) - 1


def ingest_trace(
    trace: Path,
    paths: AacoPaths,
    *,
    model: Path | None = None,
    name: str | None = None,
    complete: bool = True,
    on_progress: Callable[[str], None] | None = None,
) -> SessionBundle:
    """Build and publish the session bundle of an external trace and load it into the
    TraceLake, all or nothing: on any error neither the bundle nor any row remains.
    `complete=False` leaves the session invisible to readers until its analysis is committed
    (the caller analyses it next). `on_progress` hears each stage: a
    10^7-kernel trace takes tens of seconds."""
    say = on_progress or (lambda message: None)
    trace = trace.absolute()
    if not trace.exists():
        raise AacoInputError(
            "trace not found", path=trace, fix="give a rocprofv3 output directory or a trace file"
        )
    refuse_aaco_folders(trace, paths)
    trace_format = detect_device_trace(trace, scratch=paths.scratch)  # before any work
    if trace_format == "rocprofv3_csv" and trace.is_file() and (missing := missing_from_run(trace)):
        say(missing)
    slug = claim_series(
        paths.tracelake, name or (model.stem if model else model_slug(trace.stem)), model or trace
    )
    session_id = new_session_id(slug)
    staging = paths.sessions / ".staging" / session_id
    final = paths.sessions / dt.date.today().isoformat() / session_id
    clean_leftovers(paths)
    staging.mkdir(parents=True)
    evidence = None
    try:
        with session_folder_held(staging, session_id):
            evidence = EvidenceCopy(trace, staging / "raw")
            say(f"copying the {trace_format} trace into the session bundle ({evidence.mb} MB)")
            version = _build(staging, trace, trace_format, paths, model, slug, name, session_id)
            bundle = SessionBundle(final)

            def publish(con) -> dict[str, pa.Table]:
                """Once the rows are in, before they commit: the bundle complete and in place."""
                tables = _span_tables(
                    con, SessionBundle(staging), final, trace, version, trace_format
                )
                record_evidence(staging, known=evidence.finish())
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging, final)
                return tables

            say(f"loading session {session_id} into the TraceLake (the copy goes on beside it)")
            load_session(
                TraceLake(paths.tracelake),
                SessionBundle(staging),
                derive=publish,
                verify=False,  # hashed while copying
                complete=complete,
                trace_source=trace,  # read while the copy is made: checked against it
                scratch=paths.scratch,  # a gzip trace inflates in AACO_HOME's scratch
            )
    except BaseException as exc:
        if evidence is not None:
            evidence.cancel()
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        signal_name = stop_requested()
        if signal_name is not None and not isinstance(exc, Interrupted):
            raise Interrupted(signal_name) from exc  # a library turned the stop into its error
        problem = out_of_space(exc, paths.home) or full_disk(exc, "ingesting the trace")
        if problem is not None:
            raise problem from exc
        raise
    return bundle


def refuse_aaco_folders(trace: Path, paths: AacoPaths) -> None:
    """Refuse AACO_HOME, a folder holding it or the TraceLake, and AACO_HOME's own folders: none
    is a trace (copying one into itself never ends, and its lake changes while it is read)."""
    resolved = trace.resolve()
    own = {
        paths.home,
        paths.registry,
        paths.sessions,
        paths.failed_sessions,
        paths.graphs,
        paths.dagster_home,
        paths.scratch,
        paths.tracelake,
    }
    holds = [p for p in (paths.home, paths.tracelake) if p.resolve().is_relative_to(resolved)]
    if resolved in {p.resolve() for p in own} or holds:
        what = "aaco's own data" if not holds else f"aaco's own data ({holds[0]})"
        raise AacoInputError(
            f"this is, or holds, {what}, not a trace: AACO_HOME is {paths.home}",
            path=trace,
            fix="give the profiler's output folder or file; keep traces out of AACO_HOME "
            "(a session's raw trace is in sessions/<date>/<id>/raw/)",
        )


def _build(staging, trace, trace_format, paths, model, slug, name, session_id):
    """The bundle in staging, but for the raw trace (being copied): the model's graph, the JSON
    records, and tables holding ONNX Runtime's host events (the trace is named for loading,
    not copied into them)."""
    version = None
    if model is not None:
        from aaco_pipelines.stages.prepare import prepare_model_version  # onnx: only with a model

        version, _ = prepare_model_version(registered_model(model.absolute(), slug), paths)
        copy_folder(version.graph_dir, staging / "graph")
        derive_optimized_model(
            version.snapshot_path, staging / "optimized_model.onnx", version.registry_path
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
    host = _host_events(trace, session_id)
    SessionBundle(staging).write_tables(
        {
            "kernel_events": host if host is not None else KERNEL_EVENTS.empty_table(),
            "telemetry": TELEMETRY.empty_table(),
        },
        device_trace={
            "path": "raw" if trace.is_dir() else f"raw/{trace.name}",
            "format": trace_format,
            "iteration": None if host is not None else 0,  # no runs: the trace is one iteration
        },
    )
    return version


class EvidenceCopy:
    """The trace copied into the bundle as its raw evidence, and hashed, in a thread of its
    own while the TraceLake loads the original: the load leaves about a fifth of two cores
    idle, and the copy and hash of a 2.8 GB trace take 2.1-2.5 s of one (written direct, see
    copy_with_digest; the hash is 1.65 s of it). A copy, not a hard link: appending
    to or editing the original later must not change what this session was measured from;
    an original that changes before the copy is done is refused. The room for the copy is
    checked before it starts: a disk that fills part-way wastes the load and can leave a
    TraceLake file created on the same disk half-written."""

    def __init__(self, trace: Path, raw: Path):
        if trace.is_dir():
            files = sorted(p for p in trace.rglob("*") if p.is_file())
        else:  # with its run's other files beside it (a rocprofv3 CSV's agent info)
            files = trace_files(trace)
        base = trace if trace.is_dir() else trace.parent
        self.targets = {source: raw / source.relative_to(base) for source in files}
        self.raw = raw
        self.before = {source: _identity(source) for source in files}
        size = sum(bytes_ for bytes_, _ in self.before.values())
        self.mb = round(size / 1e6)
        free = shutil.disk_usage(raw.parent).free
        if free < size:
            raise OSError(
                errno.ENOSPC,
                f"no room for the trace's copy ({size >> 20} MiB, {free >> 20} MiB free)",
                str(raw.parent),
            )
        self.digests: dict[str, dict] = {}
        self.stop, self.failure = threading.Event(), None
        self.thread = threading.Thread(target=self._copy, name="evidence-copy", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        try:
            for source, target in self.targets.items():
                target.parent.mkdir(parents=True, exist_ok=True)
                relative = target.relative_to(self.raw.parent).as_posix()
                self.digests[relative] = copy_with_digest(source, target, self.stop)
        except BaseException as exc:  # handed to the thread that waits in finish()
            self.failure = exc

    def finish(self) -> dict[str, dict]:
        """{bundle-relative path: digest} of every copied file, once the copy is done."""
        self.thread.join()
        if self.failure is not None:
            raise self.failure
        changed = [s for s, seen in self.before.items() if _identity(s) != seen]
        if changed:
            raise AacoInputError(
                "the trace changed while it was being ingested",
                path=changed[0],
                fix="ingest a trace that no process is still writing",
            )
        return self.digests

    def cancel(self) -> None:
        self.stop.set()
        self.thread.join()


def _identity(file: Path) -> tuple[int, int]:
    """What changes when a file is written to: its size and modification time."""
    stat = file.stat()
    return stat.st_size, stat.st_mtime_ns


def _span_tables(
    con, bundle: SessionBundle, published: Path, trace, version, trace_format
) -> dict[str, pa.Table]:
    """After the trace's rows are in: its span (first kernel start to last kernel end) is the
    session's one iteration and its latency; without ONNX Runtime runs a `model_run` span
    stands for that iteration. Also written to the bundle's tables/ for later re-loads
    (`bundle`, still in staging; the rows name where it is `published`)."""
    start, end = con.execute(  # HUGEINT: an end past 2^63 is refused, not an overflow
        "SELECT min(start_ns), max(CAST(start_ns AS HUGEINT) + duration_ns) FROM kernel_events "
        "WHERE session_id = ? AND category = 'Kernel'",
        [bundle.session_id],
    ).fetchall()[0]
    if start is None:
        raise AacoInputError(
            "the trace has no kernel dispatches",
            path=trace,
            fix="collect with kernel tracing on (rocprofv3 --kernel-trace)",
        )
    _refuse_broken_span(trace, start, end)
    environment = {
        "collected_elsewhere": True,
        "trace_format": trace_format,
        "gpu_agents": _gpu_agents(con, bundle.session_id),
    }
    tables = {
        "sessions": _sessions_row(
            bundle, published, (start, end), version, trace_format, environment
        ),
        "iterations": _iterations_rows(bundle.session_id, (start, end)),
    }
    if bundle.device_trace["iteration"] is not None:
        tables["kernel_events"] = _trace_span_run(bundle.session_id, start, end)
    bundle.add_tables(tables)
    return tables


def _refuse_broken_span(trace: Path, start: int, end: int) -> None:
    """The trace's span is its one iteration's latency: it must be a positive number of
    nanoseconds that fits the lake's 64-bit columns."""
    if end is None or end <= start:
        raise AacoInputError(
            f"the trace's kernels span no time (first start {start} ns, last end {end} ns; "
            "all timestamps zero?), so it has no latency",
            path=trace,
            fix="re-collect the trace with timestamps (rocprofv3 --kernel-trace writes them)",
        )
    if end > INT64_MAX or end - start > MAX_SPAN_NS:
        raise AacoInputError(
            f"the trace's kernels span from {start} to {end} ns, beyond 64-bit nanoseconds "
            "(146 years at most): its timestamps are corrupt",
            path=trace,
            fix="re-collect the trace; check its Start/End timestamps",
        )


def derive_optimized_model(model: Path, target: Path, user_model: Path) -> None:
    """ONNX Runtime's optimized graph of the model, derived with the CPU provider: node names
    match a CPU profile exactly; a GPU run's fusions may differ, and its extra nodes are then
    anchored by name (see attribution.with_profiled_nodes). In a child process: ONNX Runtime
    loads the weights, and they must never be loaded into the aaco process (a 7B model's 13 GB)."""
    code = (
        "import sys; from pathlib import Path; "
        "from aaco_pipelines.stages.ingest_trace import _derive_here; _derive_here(Path(sys.argv[1]), Path(sys.argv[2]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(model), str(target)], capture_output=True, text=True
    )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        reason = reason.replace(str(model), user_model.name)  # our snapshot is not the user's
        raise AacoInputError(
            f"ONNX Runtime could not load the model to derive its optimized graph ({reason})",
            path=user_model,
            fix="check that the model runs in ONNX Runtime, or ingest the trace without --model",
        )


def _derive_here(model: Path, target: Path) -> None:
    import onnxruntime as ort

    from aaco_pipelines.execution.ort_session import create_session

    options = ort.SessionOptions()
    options.log_severity_level = 3
    request = {"model_path": str(model), "resolved_providers": ["CPUExecutionProvider"]}
    create_session(ort, request, options, optimized_graph=target)


def _host_events(trace: Path, session_id: str) -> pa.Table | None:
    """ONNX Runtime's profile of the same run, when it sits beside the trace: host node windows
    for attribution (its own clock; the GPU attribution estimates the offset)."""
    if not trace.is_dir():
        return None
    for pattern in ORT_PROFILE_GLOBS:
        for profile in sorted(trace.glob(pattern)):
            return read_ort_profile(profile, session_id, profiling_start_ns=0)
    return None


def _trace_span_run(session_id: str, start: int, end: int) -> pa.Table:
    run = {
        "session_id": session_id,
        "source": "trace_span",
        "category": "Session",
        "iteration": 0,
        "event_name": "model_run",
        "start_ns": start,
        "duration_ns": end - start,
    }
    return conform(pa.Table.from_pylist([run]), KERNEL_EVENTS)


def _session_json(session_id, slug, name, trace, trace_format, version) -> dict:
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    return {
        "session_id": session_id,
        "model_name": name or (version.name if version else slug),
        "model_slug": slug,
        "model_sha256": version.sha256 if version else None,
        "target": "external",  # analysis.envelope.choice.EXTERNAL_TARGET: judged against its GPU
        "started_at": now,
        "finished_at": now,
        "trace_source": trace_format,
        "ingested_from": str(trace),
        "passes": {},
        "providers_used": [],
        "providers_requested": [],
    }


def _gpu_agents(con, session_id: str) -> list[dict]:
    """The trace's GPU agents as its agent info names them (gfx target, product, CUs, clock)
    and the kernel time each ran: the GPU the session is judged against is among them
    (analysis.envelope.choice.session_gpu), never this host."""
    rows = con.execute(
        "WITH busy AS (SELECT device_id, sum(duration_ns) AS kernel_ns FROM kernel_events "
        "  WHERE session_id = $sid AND category = 'Kernel' GROUP BY device_id) "
        "SELECT a.agent_id, a.name, a.product_name, a.compute_units, a.max_clock_mhz, "
        "b.kernel_ns FROM agents a LEFT JOIN busy b ON a.agent_id = 'Agent ' || b.device_id "
        "WHERE a.session_id = $sid AND upper(a.agent_type) = 'GPU' ORDER BY a.agent_id",
        {"sid": session_id},
    ).fetchall()
    keys = ("agent_id", "name", "product_name", "compute_units", "max_clock_mhz", "kernel_ns")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _sessions_row(
    bundle: SessionBundle, bundle_path: Path, span, version, trace_format, environment: dict
) -> pa.Table:
    # collectors.bundle_tables brings the generation readers and onnx: 0.1 s of every start-up
    from aaco_pipelines.collectors.bundle_tables import measured_latency_figures

    session = bundle.session
    wall = float(span[1] - span[0])
    summary = measured_latency_figures(pa.array([wall]).to_numpy(), pa.array([wall]).to_numpy())
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
        "bundle_path": str(bundle_path),
        "env_json": json.dumps(environment, default=str),
        "workload": "forward",  # a trace's span, as one forward pass
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

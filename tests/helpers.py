"""Helpers the tests import (`from tests.helpers import ...`): where the repository and the shared
samples are, the fast sidecars, and functions that put models, sessions and bytes in place."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from aaco_pipelines.analysis.envelope.record import HardwareEnvelope, ResourcePeak
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.environment import capture_environment, runtime_fingerprint
from aaco_pipelines.registry.sidecar import ModelSidecar
from tests import models

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SHARED = REPO.parent / "shared"
DATA = TESTS / "data"  # committed test data (tests/data/README.md)

FAST_SIDECAR = ModelSidecar(
    warmup_iterations=2, measured_iterations=20, profiled_iterations=5, min_measured_seconds=0.0
)
# For tests that judge a mean (throughput is 1 / mean latency): among 20 iterations of a 20 µs
# model, one preempted for milliseconds moves the mean more than a 2x slower model does.
STEADY_SIDECAR = dataclasses.replace(FAST_SIDECAR, measured_iterations=200)
# The slower MLP of the baseline and gate tests: about 5x the tiny one (40 layers made it 1.8x,
# and one 4 ms preemption among a baseline session's 200 iterations of 28 us then put the
# throughput interval across zero on CI). Throughput is 1e9 / mean, so it takes a stall of
# about 20 ms to do that now.
SLOWER_LAYERS = 200


def add_model(
    paths: AacoPaths, name: str, model, sidecar: ModelSidecar | None = FAST_SIDECAR
) -> Path:
    """Register a model (and its sidecar) in the registry folder."""
    path = models.save(model, paths.registry / f"{name}.onnx")
    if sidecar is not None:
        sidecar.save(paths.registry / f"{name}.yaml")
    return path


class MeasuredHome(NamedTuple):
    """An AACO_HOME holding measured sessions: its paths, and the bundle of the session measured
    last."""

    paths: AacoPaths
    bundle: SessionBundle


def home_paths(home: Path) -> AacoPaths:
    """The paths of an AACO_HOME laid out as AacoPaths.from_env lays one out."""
    return AacoPaths(home=home, registry=home / "registry", tracelake=home / "tracelake.duckdb")


def copy_home(paths: AacoPaths, home: Path) -> AacoPaths:
    """A copy of a whole AACO_HOME (registry, model store, session bundles, TraceLake file) at
    `home`, laid out alike: what a test writes there leaves the original as it was. Modes are
    copied too (bundles keep their read-only raw files). Session rows keep the bundle_path of
    the original."""
    shutil.copytree(paths.home, home, symlinks=True)
    return AacoPaths(
        home=home,
        registry=home / paths.registry.relative_to(paths.home),
        tracelake=home / paths.tracelake.relative_to(paths.home),
    )


def fill(disk: Path, leave_bytes: int = 0) -> None:
    """Fill a small file system until at most `leave_bytes` are free."""
    import os

    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / "filler", "wb") as handle:
        try:
            handle.write(b"\0" * max(free - leave_bytes, 0))
            handle.flush()
            while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > leave_bytes:
                handle.write(b"\0" * 4096)
                handle.flush()
        except OSError:
            pass


def store_sessions(lake, rows) -> None:
    """Add session rows (an Arrow table or a list of dicts) as complete sessions, the way a
    finished analysis leaves them: visible to history, reports, baselines and the gate."""
    import pyarrow as pa

    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    lake.append_rows("sessions", table)
    lake.append_rows("completed_sessions", table.select(["session_id"]))


def without_baselines(lake):
    """The lake, with no baselines left by an earlier test of its module."""
    with lake.connect(write=True) as con:
        con.execute("DELETE FROM baselines")
    return lake


def as_one_kernel_events_table(con) -> None:
    """Back to the shape of a lake before v10: kernel_events one table of every row."""
    con.execute("CREATE TABLE kernel_events_v9 AS SELECT * FROM kernel_events")
    con.execute("DROP VIEW kernel_events_with_family")
    con.execute("DROP VIEW kernel_events")
    con.execute("DROP TABLE kernel_events_profile")
    con.execute("DROP TABLE kernel_events_trace")
    con.execute("ALTER TABLE kernel_events_v9 RENAME TO kernel_events")


def assert_plot_texts_inside(figure) -> None:
    """Each visible text of the figure inside its image, and each axes' outer texts off the
    other axes, as the figure's own canvas draws it."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    inside = figure.bbox
    for axis in figure.axes:
        outer = (
            [axis.title, axis.xaxis.label, axis.yaxis.label, *_drawn_tick_labels(axis)]
            if axis.axison  # an empty plot's axes are off: only its message is drawn
            else []
        )
        for text in [*outer, *axis.texts]:
            if not (text.get_visible() and text.get_text()):
                continue
            box = text.get_window_extent(renderer)
            assert inside.x0 - 1 <= box.x0 and box.x1 <= inside.x1 + 1, text.get_text()
            assert inside.y0 - 1 <= box.y0 and box.y1 <= inside.y1 + 1, (
                text.get_text(),
                axis.get_title(),
                axis.get_xlabel(),
            )
            if text in outer:
                for other in figure.axes:
                    if other is not axis and other.axison:
                        frame = other.get_window_extent(renderer)
                        assert not box.overlaps(frame), (text.get_text(), "overlaps an axes")


def _drawn_tick_labels(axis) -> list:
    labels = []
    for scale_axis in (axis.xaxis, axis.yaxis):
        low, high = sorted(scale_axis.get_view_interval())
        ticks = zip(scale_axis.get_majorticklocs(), scale_axis.get_majorticklabels(), strict=False)
        labels += [label for loc, label in ticks if low <= loc <= high]
    return labels


def trust_every_measurement(lake_path: Path) -> None:
    """Judge every stored session's measurement ok (measurement_quality): for tests about
    something else (windows, baselines), whatever this host let happen while they measured.
    Suspect sessions are left out of new baselines, so a busy moment would change their sets."""
    from aaco_pipelines.tracelake.store import TraceLake

    with TraceLake(lake_path).connect(write=True) as con:
        con.execute("UPDATE measurement_quality SET verdict = 'ok', reasons_json = '[]'")


# The columns of a session's kernels as attribution's SQL reads them (iteration, runtime node,
# kernel, family, duration), for tests that hand it kernels of their own.
KERNELS_SCHEMA = pa.schema(
    [
        ("iteration", pa.int64()),
        ("node_name", pa.string()),
        ("kernel_name", pa.string()),
        ("kernel_family", pa.string()),
        ("duration_ns", pa.int64()),
    ]
)


def synthetic_envelope(
    gemm: float, dram: float, caches: dict[str, tuple[float, int]] | None = None
) -> HardwareEnvelope:
    """A CPU envelope of this host's runtime with these peaks (FLOP/s, B/s) and cache ceilings
    ({level: (B/s, capacity bytes)}): spares a test the envelope sweep, and fixes its roofs."""

    def peak(resource: str, value: float, unit: str, capacity: int | None = None):
        entry = {"kernel": "synthetic", "size": 1, "median": value, "low": value, "high": value}
        if capacity:
            entry |= {"working_set_bytes": capacity // 2, "capacity_bytes": capacity}
        return ResourcePeak(resource, value, 0.9 * value, 1.1 * value, unit, [entry])

    return HardwareEnvelope(
        target="cpu",
        providers=["CPUExecutionProvider"],
        runtime_fingerprint=runtime_fingerprint(capture_environment()),
        measured_at_ns=time.time_ns(),
        gemm=peak("gemm_flops", gemm, "FLOP/s"),
        bandwidth=peak("memory_bandwidth", dram, "B/s"),
        cache_bandwidth={
            level: peak("cache_bandwidth", value, "B/s", capacity)
            for level, (value, capacity) in (caches or {}).items()
        },
    )


@contextlib.contextmanager
def busy_loops(count: int | None = None, cores: list[int] | None = None):
    """`count` processes spinning on the CPU (default: one per core this process may use), for
    as long as the block runs: a test about contention makes its own, whatever the host does.
    With `cores`, one spins pinned to each of them instead, so exactly those cores are busy."""
    if cores is None:
        cores = [None] * (len(os.sched_getaffinity(0)) if count is None else count)
    hogs = []
    try:
        for core in cores:
            hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
            if core is not None:
                os.sched_setaffinity(hogs[-1].pid, {core})
        time.sleep(0.2)  # scheduled and spinning before the measurement starts
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def engine_query(**registered: pa.Table):
    """A callable of TraceLake.query's signature over an in-memory DuckDB that also sees these
    tables: analysis code run on kernels a test made, with no lake."""
    from aaco_pipelines.tracelake import engine

    def query(sql: str, params=None, tables: dict[str, pa.Table] | None = None) -> pa.Table:
        with engine.connect() as con:
            for name, table in {**registered, **(tables or {})}.items():
                con.register(name, table)
            return con.sql(sql, params=params).to_arrow_table()

    return query


def exact_mapping(nodes, op_type: str = "Op") -> pa.Table:
    """A node mapping in which every runtime node is the original node of its name."""
    from aaco_pipelines.analysis.attribution.mapping import NODE_MAPPING

    rows = [
        {"runtime_node": n, "runtime_op_type": op_type, "onnx_node": n, "onnx_op_type": op_type,
         "method": "exact_name", "confidence": 1.0, "share": 1.0, "split_rule": "exact"}
        for n in nodes
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=NODE_MAPPING)


def no_graph_nodes() -> pa.Table:
    """An empty graph_nodes table: a breakdown of kernels with no model graph."""
    from aaco_pipelines.tracelake.schema import GRAPH_NODES, conform

    return conform(pa.table({"model_sha256": pa.array([], pa.string())}), GRAPH_NODES)


def stamp_schema_version(con, version: int) -> None:
    """Mark a lake (an open DuckDB connection to it) as written by schema `version`: a
    migration test shapes its tables as that version had them, then lets the next write
    migrate."""
    con.execute("DELETE FROM schema_info")
    con.execute("INSERT INTO schema_info VALUES (?, now())", [version])


def replay_session(lake, source: str, new_id: str = "replay") -> str:
    """A copy of a measured session under a new id (its row, iterations and completion): the
    same measurement exactly, for a gate that must find no change."""
    with lake.connect(write=True) as con:
        for table in ("session_records", "iterations", "completed_sessions"):
            con.execute(
                f"INSERT INTO {table} SELECT * REPLACE (? AS session_id) FROM {table} "
                "WHERE session_id = ?",
                [new_id, source],
            )
    return new_id


def ort_profile(tmp: Path, model: Path, feeds: dict, runs: int) -> tuple[Path, int]:
    """A real ONNX Runtime CPU profile of `runs` runs of the model: its file (in `tmp`) and
    where it starts on the host's clock (what read_ort_profile needs)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp / "prof")
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    start_ns = session.get_profiling_start_time_ns()
    for _ in range(runs):
        session.run(None, feeds)
    return tmp / session.end_profiling(), start_ns


def simulated_gpu_trace(tmp_path: Path, runs: int = 10) -> tuple[Path, Path]:
    """(model, trace folder): the conv block run `runs` times under ONNX Runtime's profiler, and
    the rocprofv3 kernel + HIP API traces simulated from that profile, with the profile beside
    them (what `aaco ingest --model` reads as one GPU session)."""
    import numpy as np
    import pyarrow.compute as pc

    from aaco_pipelines.collectors.ort_profile import read_ort_profile
    from benchmarks.trace_simulator import SimulationSettings, simulate_rocprof_traces

    model = models.save(models.conv_block_model(), tmp_path / "conv_block.onnx")
    profile, start_ns = ort_profile(tmp_path, model, {"x": np.ones((1, 3, 32, 32), "f4")}, runs)
    trace = tmp_path / "from_gpu_node"
    events = read_ort_profile(profile, "sim", start_ns)
    # The simulated clock noise under a quarter of the median node window, as the GPU
    # attribution tests keep it (tests/analysis/test_gpu_attribution.py `simulated`): a fresh
    # profile's nodes last 2-3 us, and the default +-2 us moved launches into the neighbouring
    # node's window (a 2 us pool read 5 us in CI), a limit of the simulation, not of attribution.
    nodes = events.filter(pc.equal(events["category"], "Node"))
    window = float(np.median(nodes["duration_ns"].to_numpy()))
    jitter = min(SimulationSettings().jitter_ns, int(window // 4))
    simulate_rocprof_traces(events, trace, SimulationSettings(jitter_ns=jitter))
    shutil.copy(profile, trace / "onnxruntime_profile_run.json")
    return model, trace


def run_bisect_job(paths: AacoPaths, config: dict) -> dict:
    """The Dagster bisection job (sensors.jobs) run in process with this home's resources and
    `config` (its op's); the op's output, the stored bisections row."""
    import dagster as dg

    from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource
    from aaco_pipelines.sensors import bisect_regression_job

    with dg.instance_for_test() as instance:
        run = bisect_regression_job.execute_in_process(
            run_config={"ops": {"bisect_versions_op": {"config": config}}},
            instance=instance,
            resources={
                "tracelake": TraceLakeResource(database=str(paths.tracelake)),
                "registry": ModelRegistryResource(
                    home=str(paths.home),
                    registry=str(paths.registry),
                    tracelake=str(paths.tracelake),
                ),
            },
        )
    return run.output_for_node("bisect_versions_op")


# The first line `aaco run` and `aaco ingest` print, before their imports: what they start.
STARTED = ("aaco run: ", "aaco ingest: ")


def error_lines(err: str) -> list[str]:
    """What aaco printed on stderr besides saying what it starts and its progress bars: for a
    mistake, the one line of error."""
    return [
        line for line in err.splitlines() if line.strip() and not line.startswith(("  [", *STARTED))
    ]

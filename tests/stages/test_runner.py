"""The isolated measuring process: what a good run leaves behind, and how bad runs fail."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from aaco_pipelines.errors import AacoInputError, MeasuringFailure
from aaco_pipelines.execution.runner import MEMORY_FLOOR_MB, RunnerLimits, derived_memory_limit
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import ModelSidecar, parse_sidecar
from aaco_pipelines.stages.measure import MeasureOptions, measure
from aaco_pipelines.stages.prepare import prepare_model_version
from tests import models
from tests.helpers import add_model, busy_loops


def _version(paths, name, model, sidecar):
    path = add_model(paths, name, model, sidecar)
    version, _ = prepare_model_version(registered_model(path), paths)
    return version


def _no_staging_left(paths):
    staging = paths.sessions / ".staging"
    return not staging.exists() or not any(staging.iterdir())


def test_good_run_publishes_a_complete_bundle(aaco_paths, fast_options):
    sidecar = ModelSidecar(
        warmup_iterations=3, measured_iterations=25, profiled_iterations=4, min_measured_seconds=0.6
    )
    version = _version(aaco_paths, "mlp", models.tiny_mlp(), sidecar)
    progress: list[str] = []
    bundle = measure(version, aaco_paths, fast_options, on_progress=progress.append).bundle

    assert bundle.path.parent.parent == aaco_paths.sessions
    for name in (
        "request.json",
        "session.json",
        "env.json",
        "latencies.json",
        "ort_profile.json",
        "optimized_model.onnx",
        "host_samples.parquet",
        "worker.log",
        "graph/graph.json",
    ):
        assert bundle.file(name).is_file(), name
    latencies = bundle.read_json("latencies.json")
    assert len(latencies["warmup"]["latency_ns"]) == 3
    # at least the sidecar's 4: more when the measured pass was noisy (execution.profiled_count)
    assert len(latencies["profiled"]["latency_ns"]) >= 4
    assert "measured robust CV" in bundle.session["profiled_iterations_rule"]
    # A sub-millisecond model keeps running past 25 iterations until the 0.6 s minimum is met,
    # so the host sampler ticks many times inside the measured pass.
    assert len(latencies["measured"]["latency_ns"]) > 25
    assert all(v > 0 for v in latencies["measured"]["latency_ns"])
    session = bundle.session
    assert session["providers_used"] == ["CPUExecutionProvider"]
    measured, profiled = session["passes"]["measured"], session["passes"]["profiled"]
    assert measured[0] < measured[1] <= profiled[0] < profiled[1]
    assert measured[1] - measured[0] >= 0.6e9
    samples = pq.read_table(bundle.file("host_samples.parquet"))["timestamp_ns"].to_numpy()
    assert ((samples >= measured[0]) & (samples <= measured[1])).sum() >= 6  # >= 10 Hz
    assert session["worker_exit_code"] == 0 and session["worker_peak_rss_bytes"] > 10 << 20
    assert any("measured pass" in line for line in progress)
    assert _no_staging_left(aaco_paths)


def test_unknown_provider_is_a_user_error_naming_the_sidecar(aaco_paths, fast_options):
    sidecar = ModelSidecar(measured_iterations=2, execution_providers=("NoSuchExecutionProvider",))
    version = _version(aaco_paths, "mlp", models.tiny_mlp(), sidecar)
    with pytest.raises(AacoInputError) as err:
        measure(version, aaco_paths, fast_options)
    assert "NoSuchExecutionProvider" in str(err.value)
    assert "mlp.yaml" in str(err.value)
    assert not list(aaco_paths.sessions.glob("*/*"))  # nothing published
    assert len(list(aaco_paths.failed_sessions.glob("*/*/error.json"))) == 1


def test_the_default_memory_limit_follows_the_model_and_the_host(aaco_paths, monkeypatch):
    import psutil

    total = 24 << 30
    host = psutil.virtual_memory()._replace(total=total)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: host)
    small, rule = derived_memory_limit(5 << 20, 1 << 20)
    assert small == 3 * 6 + MEMORY_FLOOR_MB and "model 5 MiB + inputs 1 MiB" in rule
    seven_b = derived_memory_limit(5 << 30, 0)[0]  # a 7B model in 5 GB of int4/fp8 weights
    assert seven_b == 3 * 5 * 1024 + MEMORY_FLOOR_MB
    assert derived_memory_limit(13 << 30, 0)[0] == int((total >> 20) * 0.8)  # capped by the host


def test_a_run_records_its_memory_limit_and_peak(aaco_paths):
    """No limit configured: the one derived for the model, recorded with its rule beside the
    peak the measuring process reached."""
    version = _version(aaco_paths, "mlp", models.tiny_mlp(), ModelSidecar(measured_iterations=2))
    bundle = measure(version, aaco_paths, MeasureOptions()).bundle
    limits = bundle.request["limits"]
    assert limits["memory_limit_rule"].startswith("derived: 3 x (model 0 MiB")
    observed = bundle.read_json("observed.json")
    assert observed["memory_limit_bytes"] == limits["memory_limit_mb"] << 20
    assert 10 << 20 < observed["worker_peak_rss_bytes"] < observed["memory_limit_bytes"]


def test_memory_limit_kills_the_measuring_process_and_keeps_the_evidence(aaco_paths):
    version = _version(
        aaco_paths,
        "hog",
        models.memory_hog_model(),
        ModelSidecar(warmup_iterations=0, measured_iterations=1),
    )
    options = MeasureOptions(limits=RunnerLimits(timeout_s=120, memory_limit_mb=600))
    with pytest.raises(MeasuringFailure) as err:
        measure(version, aaco_paths, options)
    message = str(err.value)
    assert "memory limit of 600 MiB" in message and "memory_limit_mb" in message
    failed = list(aaco_paths.failed_sessions.glob("*/*"))
    assert len(failed) == 1
    assert json.loads((failed[0] / "failure.json").read_text())["type"] == "MeasuringFailure"
    assert list(failed[0].glob("host_samples*.parquet"))
    assert not list(aaco_paths.sessions.glob("2*/*")) and _no_staging_left(aaco_paths)


def test_timeout_kills_a_hung_measuring_process(aaco_paths):
    sidecar = ModelSidecar(warmup_iterations=0, measured_iterations=10_000)
    version = _version(aaco_paths, "slow", models.slow_model(), sidecar)
    options = MeasureOptions(limits=RunnerLimits(timeout_s=3, memory_limit_mb=4096))
    with pytest.raises(MeasuringFailure, match="timed out after 3 s"):
        measure(version, aaco_paths, options)
    assert not list(aaco_paths.sessions.glob("2*/*"))


def test_laboratory_mode_pins_the_measuring_process_and_records_what_it_could_not_do(aaco_paths):
    import os

    version = _version(
        aaco_paths,
        "mlp",
        models.tiny_mlp(),
        ModelSidecar(measured_iterations=5, profiled_iterations=2),
    )
    options = MeasureOptions(laboratory=True, limits=RunnerLimits(timeout_s=120))
    bundle = measure(version, aaco_paths, options).bundle
    allowed = os.sched_getaffinity(0)
    request = bundle.request["laboratory"]
    cores = request["cores"]  # the quietest at the time: which ones depends on the host's load
    assert set(cores) <= allowed and len(cores) == max(len(allowed) - 1, 1)
    assert request["intra_op_threads"] == len(cores) and request["inter_op_threads"] == 1
    assert set(request["core_busy"]) == {f"cpu{core}" for core in allowed}  # chosen from these
    session = bundle.session
    assert session["laboratory_affinity"]["affinity"] == cores
    cgroup = session["cgroup"]
    assert cgroup["placed"] or cgroup["reason"]  # placed, or the reason why not is recorded
    if os.sched_getaffinity(0) != set(cores):
        assert session["laboratory_affinity"]["affinity"] != sorted(os.sched_getaffinity(0))
    cpu = bundle.environment["cpu"]
    assert cpu["frequency_mhz"] and "governors" in cpu  # governor and clocks recorded


def test_a_busy_requested_laboratory_core_is_kept_said_and_judged(aaco_paths):
    """Another process spins on the one core asked for: the run keeps it (the user chose it),
    says so before measuring, and its measurement is judged suspect for it, not silently noisy."""
    import os

    from aaco_pipelines.analysis.metrics.measurement_quality import QUALITY_SQL
    from aaco_pipelines.stages.pipeline import measure_model
    from aaco_pipelines.tracelake.queries import measurement_quality_row
    from aaco_pipelines.tracelake.store import TraceLake

    core = max(os.sched_getaffinity(0))
    sidecar = ModelSidecar(
        warmup_iterations=2, measured_iterations=5, profiled_iterations=2, min_measured_seconds=2.0
    )  # a measured pass of many telemetry ticks (jiffies are coarse), all after the pinning
    path = add_model(aaco_paths, "mlp", models.tiny_mlp(), sidecar)
    options = MeasureOptions(
        laboratory=True, laboratory_cores=(core,), limits=RunnerLimits(timeout_s=60)
    )
    progress: list[str] = []
    with busy_loops(cores=[core]):
        bundle = measure_model(registered_model(path), aaco_paths, options, progress.append)
    assert bundle.session["laboratory_affinity"]["affinity"] == [core]
    warnings = [line for line in progress if line.startswith("warning: laboratory cores busy")]
    assert len(warnings) == 1 and f"cpu{core}" in warnings[0] and "as requested" in warnings[0]
    quality = measurement_quality_row(TraceLake(aaco_paths.tracelake), bundle.session_id)
    assert quality["verdict"] == "suspect"
    lake = TraceLake(aaco_paths.tracelake)
    figures = lake.query(QUALITY_SQL, {"sid": bundle.session_id, "lab": [f"cpu{core}"]})
    ticks = lake.query(
        "SELECT timestamp_ns, device, value, pass FROM telemetry WHERE session_id = ? AND "
        "metric = 'cpu_utilization' ORDER BY timestamp_ns, device",
        [bundle.session_id],
    ).to_pylist()
    assert "of the laboratory cores' time meanwhile" in quality["reasons_json"], (
        quality,
        figures.to_pylist(),
        ticks,
    )


def test_a_models_own_time_limit_stops_it_and_the_command_line_overrides_it(aaco_paths, capsys):
    """`warmup_iterations: 10^12` (or a rocprofv3 that never exits) runs into the sidecar's
    `timeout_s`, not the runner's 600 s; `aaco run --timeout` says otherwise for one run."""
    from aaco_pipelines.cli import main

    endless = ModelSidecar(warmup_iterations=10**12, timeout_s=2.0)
    add_model(aaco_paths, "slow", models.slow_model(), endless)
    started = time.monotonic()
    assert main(["run", "--model", "slow"]) == 2
    assert "timed out after 2 s" in capsys.readouterr().err
    assert main(["run", "--model", "slow", "--timeout", "1"]) == 2
    assert "timed out after 1 s" in capsys.readouterr().err
    assert time.monotonic() - started < 60  # not 600 s each
    for bad in ("0", "nan", "1e9"):
        assert main(["run", "--model", "slow", "--timeout", bad]) == 2
        assert "--timeout must be from 1 to 86400 seconds" in capsys.readouterr().err
    with pytest.raises(AacoInputError, match="timeout_s must be a number >= 1"):
        parse_sidecar({"timeout_s": 0.1}, aaco_paths.registry / "m.yaml")

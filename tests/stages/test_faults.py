"""Faults, for real: `aaco run` and `aaco sweep` killed (SIGKILL) or stopped (SIGTERM, SIGINT)
at each stage — in the measuring process, while loading, while analysing — and a full disk.

After each: no measuring process survives, nothing is left in staging, no session is partly
visible, the TraceLake opens, and the next start quarantines what the interruption left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from aaco_pipelines.cli.doctor_checks import check_interrupted, check_tracelake
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.session_folders import clean_leftovers, find_leftovers, lake_states
from aaco_pipelines.registry.sidecar import ModelSidecar
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import add_model, fill

MEASURING_MODULE = "aaco_pipelines.execution.measuring_process"
# Runs for minutes unless stopped: a 1024² MatMul chain, 100k measured iterations.
ENDLESS = ModelSidecar(warmup_iterations=1, measured_iterations=100_000, profiled_iterations=2)


def _env(paths: AacoPaths, **extra) -> dict:
    return {**os.environ, "AACO_HOME": str(paths.home), "PYTHONUNBUFFERED": "1", **extra}


def _start_aaco(paths: AacoPaths, *args: str, **env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "aaco_pipelines.cli", *args],
        env=_env(paths, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # like a shell job: a signal reaches aaco, not pytest
    )


def _wait_for_stage(process: subprocess.Popen, stage: str, timeout_s: float = 90) -> list[str]:
    """stderr lines up to and including the progress line whose message starts with `stage`
    (`  [####----]   1.2s  measured pass: ...`, or the measuring process's own
    `aaco: measured pass`)."""
    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        if re.match(rf"^(\s*\[[#-]+\]\s+[\d.]+s|aaco:)\s+{re.escape(stage)}", line):
            return seen
    raise AssertionError(f"no {stage!r} stage on stderr; saw: {''.join(seen)[-2000:]}")


def _measuring_processes(process: subprocess.Popen) -> list[psutil.Process]:
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if MEASURING_MODULE in " ".join(_cmdline(c))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _gone_within(processes: list[psutil.Process], timeout_s: float) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return not alive


def _staging_empty(paths: AacoPaths) -> bool:
    staging = paths.sessions / ".staging"
    return not staging.exists() or not any(staging.iterdir())


def _visible_sessions(paths: AacoPaths) -> list[str]:
    if not paths.tracelake.exists():
        return []
    lake = TraceLake(paths.tracelake)
    return lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist()


def _failure(paths: AacoPaths) -> dict:
    (failed,) = paths.failed_sessions.glob("*/*")
    return json.loads((failed / "failure.json").read_text())


@pytest.fixture
def endless_model(aaco_paths) -> Path:
    return add_model(aaco_paths, "endless", models.slow_model(), ENDLESS)


@pytest.mark.timeout(120)
def test_kill_9_of_aaco_run_takes_the_measuring_process_with_it(aaco_paths, endless_model):
    aaco = _start_aaco(aaco_paths, "run", "--model", str(endless_model))
    try:
        _wait_for_stage(aaco, "measured pass")
        measuring = _measuring_processes(aaco)
        assert measuring, "the measuring process should be running"
        os.kill(aaco.pid, signal.SIGKILL)
        aaco.wait(10)
        assert _gone_within(measuring, 10), "the measuring process outlived aaco run"
    finally:
        aaco.kill()
    # The killed run left its staging folder; the doctor sees it, the next start quarantines it.
    time.sleep(5.1)  # staging younger than 5 s may belong to a run that is just starting
    found = find_leftovers(aaco_paths, lake_states(TraceLake(aaco_paths.tracelake)))
    assert [o.kind for o in found] == ["staging"]
    doctor = check_interrupted(aaco_paths)
    assert doctor.status == "warning" and doctor.detail.startswith("1 staging")
    clean_leftovers(aaco_paths)
    assert _staging_empty(aaco_paths) and _visible_sessions(aaco_paths) == []
    assert _failure(aaco_paths)["type"] == "Interrupted"
    assert check_interrupted(aaco_paths).status == "OK"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_measuring_process_and_records_the_session_as_failed(
    aaco_paths, endless_model, stop
):
    aaco = _start_aaco(aaco_paths, "run", "--model", str(endless_model))
    try:
        _wait_for_stage(aaco, "measured pass")
        measuring = _measuring_processes(aaco)
        os.kill(aaco.pid, stop)
        _, err = aaco.communicate(timeout=30)
    finally:
        aaco.kill()
    assert aaco.returncode == 128 + stop
    assert f"stopped by {stop.name}" in err and "Traceback" not in err
    assert _gone_within(measuring, 5)
    assert _staging_empty(aaco_paths) and not list(aaco_paths.sessions.glob("2*/*"))
    failure = _failure(aaco_paths)
    assert failure == {"type": "Interrupted", "message": f"stopped by {stop.name}"}
    assert str(aaco_paths.failed_sessions) in err  # it says where the evidence went


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stage", ["collecting", "analysing"])
def test_kill_9_while_loading_or_analysing_leaves_no_visible_session(aaco_paths, stage):
    """SIGKILL right after the run announced the stage: the bundle is published, its rows may
    be in the lake, but the session must never be visible; the next start (past the grace)
    quarantines the bundle and removes the rows."""
    model = add_model(aaco_paths, "mlp", models.tiny_mlp())
    aaco = _start_aaco(aaco_paths, "run", "--model", str(model), "--iterations", "20")
    try:
        _wait_for_stage(aaco, stage)
        os.kill(aaco.pid, signal.SIGKILL)
        aaco.wait(10)
    finally:
        aaco.kill()
    assert _staging_empty(aaco_paths)
    assert _visible_sessions(aaco_paths) == []  # the lake opens; nothing half-done shows
    assert check_tracelake(aaco_paths).status != "problem"  # a killed writer is not damage
    (bundle,) = aaco_paths.sessions.glob("2*/*")
    lake = TraceLake(aaco_paths.tracelake)
    # Inside the grace a bundle nobody holds may be a Dagster run between two steps: kept,
    # and the doctor shows it.
    assert clean_leftovers(aaco_paths) == [] and bundle.is_dir()
    assert "not_" in check_interrupted(aaco_paths).detail
    os.environ["AACO_ORPHAN_GRACE_S"] = "0"
    try:
        found = clean_leftovers(aaco_paths)
    finally:
        del os.environ["AACO_ORPHAN_GRACE_S"]
    assert [o.kind for o in found if o.kind != "temp_file"] in (["not_loaded"], ["not_analysed"])
    assert not bundle.exists() and _failure(aaco_paths)["type"] == "Interrupted"
    assert bundle.name not in lake.session_states()  # its rows are gone too


@pytest.mark.timeout(120)
def test_sigterm_while_analysing_abandons_the_session_at_once(aaco_paths):
    model = add_model(aaco_paths, "mlp", models.tiny_mlp())
    aaco = _start_aaco(aaco_paths, "run", "--model", str(model), "--iterations", "20")
    try:
        seen = _wait_for_stage(aaco, "analysing")
        os.kill(aaco.pid, signal.SIGTERM)
        _, err = aaco.communicate(timeout=60)
        err = "".join(seen) + err
    finally:
        aaco.kill()
    assert aaco.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert not list(aaco_paths.sessions.glob("2*/*")) and _staging_empty(aaco_paths), err
    assert _failure(aaco_paths)["type"] == "Interrupted"
    assert TraceLake(aaco_paths.tracelake).session_states() == {}


@pytest.mark.timeout(180)
def test_sigterm_of_aaco_sweep_stops_the_measuring_process(aaco_paths, endless_model):
    aaco = _start_aaco(aaco_paths, "sweep", DAGSTER_HOME=str(aaco_paths.home / "dagster"))
    try:
        deadline = time.monotonic() + 120
        while not (measuring := _measuring_processes(aaco)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert measuring, "the sweep should have started a measuring process"
        os.kill(aaco.pid, signal.SIGTERM)
        _, err = aaco.communicate(timeout=60)
    finally:
        aaco.kill()
    assert aaco.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert _gone_within(measuring, 5)
    assert _staging_empty(aaco_paths) and _visible_sessions(aaco_paths) == []


@pytest.mark.timeout(120)
def test_a_process_killed_without_aaco_handlers_still_takes_its_measuring_process(
    aaco_paths, endless_model
):
    """A Dagster step process killed outright (SIGKILL, the OOM killer, a host's kill of the
    run) runs no handler at all: the lifeline alone must end the measuring process."""
    script = (
        "import sys; from pathlib import Path\n"
        "from aaco_pipelines.config import AacoPaths\n"
        "from aaco_pipelines.stages.prepare import prepare_model_version\n"
        "from aaco_pipelines.stages.measure import measure\n"
        "from aaco_pipelines.registry.scan import registered_model\n"
        "paths = AacoPaths.from_env()\n"
        "version, _ = prepare_model_version(registered_model(Path(sys.argv[1])), paths)\n"
        "measure(version, paths, on_progress=lambda m: print('aaco: ' + m, "
        "file=sys.stderr, flush=True))\n"
    )
    step = subprocess.Popen(
        [sys.executable, "-c", script, str(endless_model)],
        env=_env(aaco_paths),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_stage(step, "measured pass")
        measuring = _measuring_processes(step)
        assert measuring
        step.kill()  # no SIGTERM handler in this process: nothing runs on the way out
        step.wait(10)
        assert _gone_within(measuring, 10)
    finally:
        step.kill()


@pytest.mark.timeout(120)
def test_full_disk_under_aaco_home_is_one_line_and_leaves_nothing_half_written(
    full_disk, monkeypatch, capsys
):
    """AACO_HOME on a small real file system, filled while the model is measured: the run
    fails with one line naming AACO_HOME, and no session, staging folder or temp file stays."""
    from aaco_pipelines.cli import main

    home = full_disk / "aaco"
    monkeypatch.setenv("AACO_HOME", str(home))
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    monkeypatch.delenv("AACO_REGISTRY", raising=False)
    paths = AacoPaths.from_env()
    paths.registry.mkdir(parents=True)
    model = add_model(paths, "mlp", models.tiny_mlp())
    fill(full_disk, leave_bytes=96 << 10)  # room for the snapshot, not for the session
    assert main(["run", "--model", str(model), "--iterations", "50"]) == 2
    err = capsys.readouterr().err
    # what it starts, its progress, then one line of error
    errors = [line for line in err.splitlines() if not line.startswith(("  [", "aaco run: "))]
    assert err.startswith("aaco run: measuring mlp"), err
    assert len(errors) == 1 and errors[0].startswith("aaco: error: "), err
    assert "no space left" in errors[0] and str(home) in errors[0]
    assert _staging_empty(paths) and not list(paths.sessions.glob("2*/*"))
    assert not [p for p in home.rglob("*") if p.name.endswith((".tmp", ".partial"))]
    assert _visible_sessions(paths) == []


@pytest.mark.timeout(60)
def test_full_disk_while_ingesting_a_trace_is_one_line_and_leaves_nothing(
    full_disk, monkeypatch, capsys
):
    """The trace copy into the bundle runs out of space: one line, no bundle, no rows."""
    from aaco_pipelines.cli import main
    from tests.helpers import SHARED

    home = full_disk / "aaco"
    monkeypatch.setenv("AACO_HOME", str(home))
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    trace = SHARED / "samples" / "profilers" / "hpctraining_mi250_laplacian_rocprofv1_results.csv"
    home.mkdir()
    fill(full_disk, leave_bytes=trace.stat().st_size // 2)
    assert main(["ingest", str(trace), "--name", "laplacian"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("aaco ingest: reading "), lines  # what it starts, first
    err = [ln for ln in lines[1:] if ln.strip() and not ln.startswith("  [")]  # no progress
    assert len(err) == 1 and err[0].startswith("aaco: error: ") and "no space left" in err[0]
    assert str(home) in err[0]
    paths = AacoPaths.from_env()
    assert _staging_empty(paths) and not list(paths.sessions.glob("2*/*"))
    assert _visible_sessions(paths) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit_mib", [300, 800, 1536])
def test_a_low_address_space_limit_is_one_line_or_fits(aaco_paths, limit_mib):
    """`ulimit -v`: too low to load the native libraries (300 MiB), or too little left once they
    are loaded (800 MiB: a Parquet read hung for ever there, with no thread for Arrow's pool): one
    line naming the limit, exit 2, nothing left behind. 1.5 GiB is enough for the tiny model, its
    envelope and its profile: DuckDB, sized to the limit, fits (unsized, DuckDB 2.0 segfaulted)."""
    import resource

    model = add_model(aaco_paths, "mlp", models.tiny_mlp())
    limit = limit_mib << 20

    def ulimit_v():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "aaco_pipelines.cli", "run", "--model", str(model)],
        env=_env(aaco_paths),
        capture_output=True,
        text=True,
        preexec_fn=ulimit_v,
        timeout=100,
    )
    assert _staging_empty(aaco_paths)
    if limit_mib > 1024:
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(_visible_sessions(aaco_paths)) == 1
        return
    errors = [line for line in done.stderr.splitlines() if not line.startswith("  [")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith("aaco: error: out of memory") and f"{limit >> 10} KiB" in errors[0]
    assert _visible_sessions(aaco_paths) == []

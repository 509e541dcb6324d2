"""Shared fixtures: a temporary AACO_HOME with a registry of tiny real models."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import models  # noqa: E402

from aaco_pipelines.config import AacoPaths  # noqa: E402
from aaco_pipelines.execution.runner import RunnerLimits  # noqa: E402
from aaco_pipelines.registry.sidecar import ModelSidecar  # noqa: E402
from aaco_pipelines.stages.measure import MeasureOptions  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

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


@pytest.fixture
def aaco_paths(tmp_path, monkeypatch) -> AacoPaths:
    home = tmp_path / "aaco"
    monkeypatch.setenv("AACO_HOME", str(home))
    monkeypatch.delenv("AACO_REGISTRY", raising=False)
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    paths = AacoPaths.from_env()
    paths.registry.mkdir(parents=True)
    return paths


def add_model(
    paths: AacoPaths, name: str, model, sidecar: ModelSidecar | None = FAST_SIDECAR
) -> Path:
    """Register a model (and its sidecar) in the registry folder."""
    path = models.save(model, paths.registry / f"{name}.onnx")
    if sidecar is not None:
        sidecar.save(paths.registry / f"{name}.yaml")
    return path


@pytest.fixture
def lake(measured):
    """The TraceLake of the module's `measured` sessions (its fixture returns the lake first),
    with no baselines left by an earlier test."""
    lake = measured[0]
    with lake.connect(write=True) as con:
        con.execute("DELETE FROM baselines")
    return lake


@pytest.fixture(scope="session")
def host_envelopes() -> dict:
    """Hardware envelopes measured for real in this test run, per (target, providers)."""
    return {}


@pytest.fixture(autouse=True)
def measure_each_envelope_once(monkeypatch, host_envelopes):
    """The first analysed session of a TraceLake measures the hardware envelope (about 4 s on
    this 2-core host), and every test's lake is new: the run measures each target's envelope
    once and every lake stores that one. tests/test_envelope.py measures its own."""
    from aaco_pipelines.analysis import envelope, envelope_choice

    def once(target: str = "cpu", providers=None, **kwargs):
        key = (target, tuple(providers or ()))
        if key not in host_envelopes:
            host_envelopes[key] = envelope.measure_envelope(target, providers, **kwargs)
        return host_envelopes[key]

    monkeypatch.setattr(envelope_choice, "measure_envelope", once)


@pytest.fixture
def fast_options() -> MeasureOptions:
    return MeasureOptions(limits=RunnerLimits(timeout_s=120, memory_limit_mb=4096))


@pytest.fixture
def full_disk(tmp_path):
    """A real, small file system (a 4 MiB tmpfs) to fill up: where a write fails with ENOSPC.
    Needs root (CI and the developers' machines run as root); skipped where mounting is refused."""
    import subprocess

    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def xfs_disk(tmp_path):
    """A real XFS file system (a loop-mounted 320 MiB image, sparse): one that shares blocks
    copy-on-write, as RHEL's default file system does. Needs root and xfsprogs (`make test`
    installs it); skipped where either is missing or mounting is refused."""
    import os
    import shutil
    import subprocess

    mkfs = shutil.which("mkfs.xfs", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if mkfs is None:
        pytest.skip("mkfs.xfs missing (make services installs xfsprogs)")
    image, mount = tmp_path / "xfs.img", tmp_path / "xfs"
    mount.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(320 << 20)
    subprocess.run([mkfs, "-q", str(image)], check=True, capture_output=True)
    done = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount an XFS image here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


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


def as_one_kernel_events_table(con) -> None:
    """Back to the shape of a lake before v10: kernel_events one table of every row."""
    con.execute("CREATE TABLE kernel_events_v9 AS SELECT * FROM kernel_events")
    con.execute("DROP VIEW kernel_events_with_family")
    con.execute("DROP VIEW kernel_events")
    con.execute("DROP TABLE kernel_events_profile")
    con.execute("DROP TABLE kernel_events_trace")
    con.execute("ALTER TABLE kernel_events_v9 RENAME TO kernel_events")

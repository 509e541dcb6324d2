"""Shared fixtures: a temporary AACO_HOME, a measured session made once per run (and copies of
it), the hardware envelope measured once per run, options and small file systems. Helpers that
are no fixtures live in tests/helpers.py."""

from __future__ import annotations

import pytest

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.runner import RunnerLimits
from aaco_pipelines.stages.measure import MeasureOptions
from tests import models
from tests.helpers import MeasuredHome, add_model, copy_home, home_paths

# Where a developer's shell may point aaco at real data: no test reads or writes there.
REAL_DATA_VARIABLES = ("AACO_REGISTRY", "AACO_TRACELAKE", "AACO_DUCKLAKE_CATALOG",
                       "AACO_DUCKLAKE_DATA", "DAGSTER_HOME")  # fmt: skip


# The test files that take a minute or more each (real clusters, the UI in a browser): first
# in the order, so that with `-n 2 --dist loadfile` (make test) one worker runs them while the
# other works through the rest, instead of one of them starting last and running alone.
LONGEST_FIRST = ("test_scale_out.py", "test_scale_out_outage.py", "test_ui_e2e.py",
                 "test_local_cluster.py", "test_sweep_recovery.py",
                 "test_instance_errors.py", "test_generation.py", "test_dagster.py",
                 "test_alerts_dagster.py", "test_bisection.py", "test_faults.py",
                 "test_bottleneck.py", "test_restore.py", "test_runtime_bisection.py",
                 "test_runner.py", "test_cli_governance.py")  # fmt: skip


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: else as found


@pytest.fixture(scope="session", autouse=True)
def no_real_aaco_home(tmp_path_factory):
    """Every test runs with AACO_HOME in a temporary folder, never the user's (~/.aaco, the
    default, or one their shell sets): a test that sets no AACO_HOME of its own writes here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AACO_HOME", str(tmp_path_factory.mktemp("aaco_home")))
        for name in REAL_DATA_VARIABLES:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture
def aaco_paths(tmp_path, monkeypatch) -> AacoPaths:
    home = tmp_path / "aaco"
    monkeypatch.setenv("AACO_HOME", str(home))
    monkeypatch.delenv("AACO_REGISTRY", raising=False)
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    paths = AacoPaths.from_env()
    paths.registry.mkdir(parents=True)
    return paths


@pytest.fixture(scope="session")
def measured_mlp_template(tmp_path_factory) -> MeasuredHome:
    """One measured session of the tiny MLP (FAST_SIDECAR, registered as `mlp`), in an AACO_HOME
    made once for the whole run. Read only: a test that writes takes measured_mlp_home."""
    from aaco_pipelines.registry.scan import registered_model
    from aaco_pipelines.stages.pipeline import measure_model

    paths = home_paths(tmp_path_factory.mktemp("measured_mlp") / "aaco")
    path = add_model(paths, "mlp", models.tiny_mlp())
    return MeasuredHome(paths, measure_model(registered_model(path), paths))


@pytest.fixture
def measured_mlp_home(measured_mlp_template, tmp_path, monkeypatch) -> MeasuredHome:
    """A copy of measured_mlp_template for this test alone (its bundle too), with AACO_HOME
    pointing at it as aaco_paths does."""
    template = measured_mlp_template
    paths = copy_home(template.paths, tmp_path / "aaco")
    monkeypatch.setenv("AACO_HOME", str(paths.home))
    monkeypatch.delenv("AACO_REGISTRY", raising=False)
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    bundle = SessionBundle(paths.home / template.bundle.path.relative_to(template.paths.home))
    return MeasuredHome(paths, bundle)


@pytest.fixture(scope="session")
def host_envelopes() -> dict:
    """Hardware envelopes measured for real in this test run, per (target, providers)."""
    return {}


@pytest.fixture(autouse=True)
def measure_each_envelope_once(monkeypatch, host_envelopes):
    """The first analysed session of a TraceLake measures the hardware envelope (about 4 s on
    this 2-core host), and every test's lake is new: the run measures each target's envelope
    once and every lake stores that one. tests/analysis/test_envelope.py measures its own."""
    from aaco_pipelines.analysis.envelope import choice as envelope_choice
    from aaco_pipelines.analysis.envelope import measure as envelope

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

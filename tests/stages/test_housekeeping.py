"""Housekeeping: failed/ is pruned by age and size at each run's start (never what is being
written), a write that fails leaves no temp file, and every bundle part follows one permission
rule under the umask."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time

import pytest

from aaco_pipelines.bundle.session_bundle import write_json
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.session_folders import clean_leftovers, quarantine
from aaco_pipelines.stages.ingest_trace import ingest_trace
from tests.helpers import SHARED, fill, home_paths

SAMPLE = "sllm_r9700_decode_attn_564735_kernel_trace.csv"
KIB = 1024


def _failed(paths, day: str, name: str, age_s: float, size: int):
    """A failed session's folder of `size` bytes, last changed `age_s` ago."""
    folder = paths.failed_sessions / day / name
    folder.mkdir(parents=True)
    (folder / "trace.bin").write_bytes(os.urandom(size))
    changed = time.time() - age_s
    os.utime(folder, (changed, changed))
    return folder


def _left(paths) -> set[str]:
    return {p.name for p in paths.failed_sessions.glob("*/*")}


@pytest.fixture
def failed_runs(aaco_paths):
    """Four failed sessions, 20 days, 5 days and 3 days old, and one failing right now."""
    day = time.strftime("%Y-%m-%d")
    _failed(aaco_paths, "2020-01-01", "old", 20 * 86400, 1 * KIB)
    _failed(aaco_paths, "2020-02-01", "five_days", 5 * 86400, 2 * KIB)
    _failed(aaco_paths, "2020-02-03", "three_days", 3 * 86400, 2 * KIB)
    _failed(aaco_paths, day, "now", 0, 4 * KIB)
    return aaco_paths


def test_failed_runs_older_than_the_kept_days_are_pruned_at_a_run_start(failed_runs):
    clean_leftovers(failed_runs)  # what `aaco run` and `aaco ingest` call first
    assert _left(failed_runs) == {"five_days", "three_days", "now"}
    assert not (failed_runs.failed_sessions / "2020-01-01").exists()  # no empty day left


def test_failed_runs_over_the_size_cap_go_oldest_first_never_the_one_being_written(
    failed_runs, monkeypatch
):
    monkeypatch.setenv("AACO_FAILED_KEEP_GB", str(3 * KIB / (1 << 30)))
    clean_leftovers(failed_runs)
    assert _left(failed_runs) == {"now"}  # 4 KiB, over the cap, but written a moment ago
    monkeypatch.setenv("AACO_FAILED_KEEP_GB", "1")
    monkeypatch.setenv("AACO_FAILED_KEEP_DAYS", "0")
    clean_leftovers(failed_runs)
    assert _left(failed_runs) == {"now"}


@pytest.mark.parametrize("value", ["two", "-1", "nan"])
def test_a_malformed_limit_is_one_line_with_the_fix(failed_runs, monkeypatch, value):
    monkeypatch.setenv("AACO_FAILED_KEEP_GB", value)
    with pytest.raises(AacoInputError, match="AACO_FAILED_KEEP_GB must be a number") as error:
        clean_leftovers(failed_runs)
    assert "AACO_FAILED_KEEP_GB=2" in error.value.fix
    assert _left(failed_runs) == {"old", "five_days", "three_days", "now"}


def test_a_full_disk_leaves_no_temp_file(full_disk):
    """A session moved to failed/ when the disk is full: no `.failure.json.tmp` stays."""
    paths = home_paths(full_disk / "aaco")
    bundle = paths.sessions / "2020-01-01" / "s1"
    bundle.mkdir(parents=True)
    (bundle / "latencies.json").write_text("{}")
    fill(full_disk)
    with pytest.raises(OSError) as error:
        quarantine(bundle, paths, "no space left " * 1000)
    assert error.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        write_json(paths.home / "request.json", {"model": "x" * 100_000})
    assert not [p for p in full_disk.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_bundle_part_follows_one_permission_rule(aaco_paths, tmp_path, umask):
    trace = tmp_path / "mine" / SAMPLE
    trace.parent.mkdir()
    shutil.copy(SHARED / "samples" / "profilers" / SAMPLE, trace)
    before = os.umask(umask)
    try:
        bundle = ingest_trace(trace, aaco_paths, name="external")
    finally:
        os.umask(before)
    parts = [bundle.path, *bundle.path.rglob("*")]
    files = {p.relative_to(bundle.path).as_posix() for p in parts if p.is_file()}
    assert {
        "evidence.json",
        "tables/sessions.parquet",
        "tables/_COMPLETE",
        f"raw/{SAMPLE}",
    } <= files
    modes = {oct(stat.S_IMODE(p.stat().st_mode)) for p in parts if p.is_file()}
    assert modes == {oct(0o444 & ~umask)}
    modes = {oct(stat.S_IMODE(p.stat().st_mode)) for p in parts if p.is_dir()}
    assert modes == {oct(0o755 & ~umask)}

"""Laboratory mode on this host: core choice, real pinning, cgroup placement or its reason."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution import laboratory
from aaco_pipelines.execution.laboratory import (
    LaboratorySettings,
    cgroup2_mount,
    cpu_frequency_record,
    laboratory_settings,
    pin_current_process,
    place_in_cgroup,
    remove_cgroup,
)

ALLOWED = sorted(os.sched_getaffinity(0))


def test_default_cores_are_allowed_and_leave_one_free():
    settings = laboratory_settings()
    assert set(settings.cores) <= set(ALLOWED) and settings.cores
    assert settings.intra_op_threads == len(settings.cores)
    assert settings.inter_op_threads == 1
    if len(ALLOWED) >= 2:
        assert ALLOWED[0] not in settings.cores and len(settings.cores) == len(ALLOWED) - 1


def test_requested_cores_are_validated():
    assert laboratory_settings([ALLOWED[-1], ALLOWED[-1]]).cores == (ALLOWED[-1],)
    with pytest.raises(AacoInputError, match="not usable"):
        laboratory_settings([max(ALLOWED) + 1000])
    with pytest.raises(AacoInputError):
        laboratory_settings([])


def _pin_and_report(settings: LaboratorySettings, queue) -> None:
    record = pin_current_process(settings)
    queue.put((record, sorted(os.sched_getaffinity(0))))


def test_pinning_really_restricts_a_child():
    settings = laboratory_settings([ALLOWED[-1]])
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pin_and_report, args=(settings, queue))
    child.start()
    record, affinity = queue.get(timeout=10)
    child.join(timeout=10)
    assert record == {"affinity": [ALLOWED[-1]]} and affinity == [ALLOWED[-1]]
    assert sorted(os.sched_getaffinity(0)) == ALLOWED  # the parent is untouched


def _cgroup_writable(mount: Path | None) -> bool:
    """Whether this host lets us make a cgroup under the v2 mount (probe and clean up)."""
    if mount is None:
        return False
    probe = mount / f"aaco-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


def _expected_placement(mount: Path | None) -> bool:
    """Placement should succeed iff a cgroup can be made and cpuset or memory is handed down."""
    if not _cgroup_writable(mount):
        return False
    handed_down = set((mount / "cgroup.subtree_control").read_text().split())
    return bool(handed_down & {"cpuset", "memory"})


def test_cgroup_placement_matches_what_the_host_allows():
    mount = cgroup2_mount()
    expected = _expected_placement(mount)
    name = f"test-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record = place_in_cgroup(child.pid, name, 512 * 2**20, [ALLOWED[-1]])
        assert record["placed"] is expected, record
        if not expected:
            assert record["reason"]
            if mount is not None:
                assert not (mount / "aaco" / name).exists()  # nothing left behind
            assert f"aaco/{name}" not in Path(f"/proc/{child.pid}/cgroup").read_text()
            return
        path = Path(record["path"])
        assert path == mount / "aaco" / name and path.is_dir()
        assert str(child.pid) in (path / "cgroup.procs").read_text().split()
        assert set(record["controllers"]) | set(record["missing"]) == {"memory", "cpuset"}
        if "memory" in record["controllers"]:
            assert (path / "memory.max").read_text().strip() == str(512 * 2**20)
        if "cpuset" in record["controllers"]:
            assert (path / "cpuset.cpus").read_text().strip() == str(ALLOWED[-1])
    finally:
        child.kill()
        child.wait(timeout=10)
    remove_cgroup(record)
    assert not path.exists()


def test_partial_controllers_are_applied_and_the_rest_reported(tmp_path, monkeypatch):
    """The placed branch, on a stand-in hierarchy that hands down only the memory controller."""
    (tmp_path / "aaco").mkdir()
    (tmp_path / "aaco" / "cgroup.controllers").write_text("memory io\n")
    (tmp_path / "aaco" / "cgroup.subtree_control").write_text("\n")
    monkeypatch.setattr(laboratory, "cgroup2_mount", lambda: tmp_path)
    record = place_in_cgroup(4242, "run1", 256 * 2**20, [1, 0])
    path = tmp_path / "aaco" / "run1"
    assert record["placed"] and record["path"] == str(path)
    assert record["controllers"] == ["memory"] and set(record["missing"]) == {"cpuset"}
    assert (tmp_path / "aaco" / "cgroup.subtree_control").read_text() == "+memory"
    assert (path / "memory.max").read_text() == str(256 * 2**20)
    assert (path / "cgroup.procs").read_text() == "4242"
    assert not (path / "cpuset.cpus").exists()


def test_unplaced_record_is_ignored_by_remove():
    remove_cgroup({"placed": False, "reason": "no cgroup2 mount"})


def test_cpu_frequency_record_covers_every_cpu():
    record = cpu_frequency_record()
    assert set(record["governors"]) == set(record["frequency_mhz"])
    assert {f"cpu{cpu}" for cpu in ALLOWED} <= set(record["frequency_mhz"])

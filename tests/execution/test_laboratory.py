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
    BUSY_CORE_SHARE,
    NOTICEABLY_BUSIER,
    LaboratorySettings,
    busy_warning,
    cgroup2_mount,
    choose_cores,
    cpu_frequency_record,
    laboratory_settings,
    pin_current_process,
    place_in_cgroup,
    remove_cgroup,
)
from tests.helpers import busy_loops

ALLOWED = sorted(os.sched_getaffinity(0))
SPINNING = 0.8  # a core with a loop spinning on it is busy this much at least, whatever else runs


def test_default_cores_are_allowed_and_leave_one_free():
    settings = laboratory_settings()
    assert set(settings.cores) <= set(ALLOWED) and settings.cores
    assert settings.intra_op_threads == len(settings.cores)
    assert settings.inter_op_threads == 1
    if len(ALLOWED) >= 2:
        assert len(settings.cores) == len(ALLOWED) - 1
    assert set(settings.core_busy) == {f"cpu{core}" for core in ALLOWED}  # what it chose from


def test_the_core_left_free_is_the_lowest_unless_another_is_noticeably_busier():
    assert choose_cores([0, 1, 2, 3], {}) == [1, 2, 3]
    assert choose_cores([0, 1, 2, 3], {0: 0.0, 2: 0.05, 3: 0.04}) == [1, 2, 3]  # jiffy noise
    assert choose_cores([0, 1, 2, 3], {0: 0.1, 2: 0.95}) == [0, 1, 3]
    assert choose_cores([0, 1, 2, 3], {1: 1.0, 2: 1.0}) == [0, 2, 3]  # a tie: the lower goes
    assert choose_cores([5], {5: 1.0}) == [5]  # one core is shared, there is no better choice


def test_only_busy_worker_cores_are_warned_about():
    assert busy_warning([1, 2], {1: 0.05, 2: BUSY_CORE_SHARE}) is None
    warning = busy_warning([1, 2], {1: 0.05, 2: 0.97})
    assert warning.startswith("warning: laboratory cores busy with other work (cpu2 97%)")
    assert "for want of quieter ones" in warning
    assert "as requested" in busy_warning([2], {2: 0.97}, requested=True)


@pytest.mark.skipif(len(ALLOWED) < 2, reason="one allowed core: nothing to choose between")
def test_a_core_made_busy_is_left_out():
    """The core the old rule gave the worker (the highest) is made busy: the worker avoids it,
    unless the host keeps the lowest core as busy (then the choice is the lowest again)."""
    busy = ALLOWED[-1]
    with busy_loops(cores=[busy]):
        settings = laboratory_settings()
    shares = {int(name[3:]): share for name, share in settings.core_busy.items()}
    assert shares[busy] >= SPINNING
    assert list(settings.cores) == choose_cores(ALLOWED, shares)
    if shares[busy] - shares[ALLOWED[0]] > NOTICEABLY_BUSIER:  # as it is unless the host is busy
        assert busy not in settings.cores


def test_busy_cores_that_cannot_be_avoided_are_kept_and_said():
    """Every allowed core busy: the worker still gets its cores (same threads as ever), with a
    warning naming them; requested busy cores are kept as requested."""
    with busy_loops(cores=ALLOWED):
        chosen = laboratory_settings()
        requested = laboratory_settings([ALLOWED[-1]])
    assert chosen.warning and "for want of quieter ones" in chosen.warning
    assert all(f"cpu{core}" in chosen.warning for core in chosen.cores)
    assert requested.cores == (ALLOWED[-1],)
    assert requested.warning and "as requested" in requested.warning
    assert requested.core_busy[f"cpu{ALLOWED[-1]}"] >= SPINNING


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

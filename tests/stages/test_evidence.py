"""Raw evidence stays what it was: ingested traces are copied and hashed, a bundle whose raw files
changed is refused when it is loaded again, and bundle files name no path outside the bundle."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import mmap
import os
import shutil
import stat
import threading

import pytest

from aaco_pipelines.bundle import session_bundle as bundle_module
from aaco_pipelines.bundle.session_bundle import EVIDENCE, copy_with_digest, file_digest
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED

SAMPLE = "sllm_r9700_decode_attn_564735_kernel_trace.csv"


@pytest.fixture
def trace(tmp_path):
    """A trace file of the user's, in their own folder (a copy of the real rocprofv3 sample)."""
    path = tmp_path / "mine" / SAMPLE
    path.parent.mkdir()
    shutil.copy(SHARED / "samples" / "profilers" / SAMPLE, path)
    path.chmod(0o644)
    return path


def test_appending_to_the_original_trace_leaves_the_evidence_unchanged(aaco_paths, trace):
    bundle = ingest_trace(trace, aaco_paths, name="external")
    raw = bundle.path / "raw" / SAMPLE
    recorded = json.loads((bundle.path / EVIDENCE).read_text())
    assert recorded[f"raw/{SAMPLE}"] == file_digest(trace)
    with open(trace, "a") as original:  # the profiler's folder is written to again
        original.write('"KERNEL_DISPATCH","Agent 1",1,1,1,1,1,"late",1,1,2,0,0,0,0,0,1,1,1,1,1,1\n')
    assert raw.stat().st_ino != trace.stat().st_ino and raw.stat().st_nlink == 1
    assert file_digest(raw) == recorded[f"raw/{SAMPLE}"]
    load_session(TraceLake(aaco_paths.tracelake), bundle)  # re-reads and verifies: unchanged
    assert stat.S_IMODE(raw.stat().st_mode) == 0o444  # evidence is read-only
    assert stat.S_IMODE(trace.stat().st_mode) != 0o444  # the user's own file is untouched


def test_a_bundle_whose_raw_evidence_changed_is_refused_on_reload(aaco_paths, trace):
    bundle = ingest_trace(trace, aaco_paths, name="external")
    lake = TraceLake(aaco_paths.tracelake)
    before = lake.query("SELECT count(*) AS n FROM kernel_events")["n"][0].as_py()
    raw = bundle.path / "raw" / SAMPLE
    raw.chmod(0o644)
    with open(raw, "a") as evidence:
        evidence.write("\n")
    with pytest.raises(AacoInputError, match="changed since the session was recorded") as error:
        load_session(lake, bundle)
    assert error.value.path == str(raw) and "new session" in error.value.fix
    after = lake.query("SELECT count(*) AS n FROM kernel_events")["n"][0].as_py()
    assert after == before  # the earlier load stands
    raw.unlink()
    with pytest.raises(AacoInputError, match="missing"):
        load_session(lake, bundle)


def test_a_device_trace_path_leading_outside_the_bundle_is_refused(aaco_paths, trace):
    bundle = ingest_trace(trace, aaco_paths, name="external")
    manifest = bundle.tables_dir / "device_trace.json"
    manifest.write_text(json.dumps({"path": f"../../../../../{trace}", "iteration": 0}))
    with pytest.raises(AacoInputError, match="outside itself"):
        load_session(TraceLake(aaco_paths.tracelake), bundle, verify=False)


def test_measured_bundles_record_their_evidence_with_consistent_permissions(
    measured_mlp_template,
):
    bundle = measured_mlp_template.bundle
    recorded = json.loads((bundle.path / EVIDENCE).read_text())
    assert {"request.json", "session.json", "ort_profile.json", "latencies.json"} <= set(recorded)
    assert not [name for name in recorded if name.startswith("tables/")]  # derived, rebuilt
    for name, digest in recorded.items():
        assert file_digest(bundle.path / name) == digest
    folders = [bundle.path, *(p for p in bundle.path.rglob("*") if p.is_dir())]
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in folders} == {"0o755"}
    raw_files = [bundle.path / name for name in recorded]
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in raw_files} == {"0o444"}


def test_the_copy_is_written_past_the_page_cache_and_is_byte_for_byte_the_trace(
    tmp_path, trace, monkeypatch
):
    """The copy is written direct (the TraceLake reads the original meanwhile; caching the copy
    as well cost seconds of system time at 10M kernels), in chunks whose last one is no whole
    block and so goes through the page cache: the copy is the trace, and only its tail is
    cached."""
    if _file_system(tmp_path) in {"tmpfs", "ramfs"}:
        pytest.skip("a memory file system caches everything it holds")
    monkeypatch.setattr(bundle_module, "_CHUNK", 16 << 10)
    target = tmp_path / "copy.csv"
    copied = copy_with_digest(trace, target)
    assert trace.stat().st_size // (16 << 10) == 3 and trace.stat().st_size % 4096  # and a tail
    assert _cached_pages(target) == 1  # of 13: the tail's
    assert target.read_bytes() == trace.read_bytes()
    assert copied == file_digest(trace)


def test_on_a_file_system_that_shares_blocks_the_copy_is_a_clone(xfs_disk):
    """XFS and btrfs clone a file copy-on-write: the copy takes no room, and writing to the
    original afterwards still leaves the copy as it was."""
    original, copy = xfs_disk / "trace.csv", xfs_disk / "copy.csv"
    content = os.urandom(64 << 20)
    original.write_bytes(content)
    os.sync()
    free_before = _free_bytes(xfs_disk)
    copied = copy_with_digest(original, copy)
    os.sync()
    assert free_before - _free_bytes(xfs_disk) < 1 << 20  # not the 64 MiB a copy takes
    assert copied == file_digest(original)
    with open(original, "r+b") as handle:
        handle.write(b"edited")
    with open(original, "ab") as handle:
        handle.write(b"appended")
    assert copy.read_bytes() == content
    assert file_digest(copy) == copied


def test_a_copy_told_to_stop_stops_within_a_chunk(tmp_path, trace, monkeypatch):
    """A failed load stops the copy beside it (EvidenceCopy.cancel) instead of waiting for
    gigabytes nobody will keep."""
    monkeypatch.setattr(bundle_module, "_CHUNK", 16 << 10)
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        copy_with_digest(trace, tmp_path / "copy.csv", stop)
    assert (tmp_path / "copy.csv").stat().st_size == 16 << 10  # of 50,376 bytes


def test_a_file_system_without_direct_io_gets_a_cached_copy(tmp_path, trace, monkeypatch):
    """Where the file system refuses direct I/O (some FUSE and network file systems), the copy
    is written through the page cache, byte for byte the same."""
    real = fcntl.fcntl

    def refuses_direct(fd, command, arg=0):
        if command == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, command, arg)

    monkeypatch.setattr(fcntl, "fcntl", refuses_direct)
    copied = copy_with_digest(trace, tmp_path / "copy.csv")
    assert (tmp_path / "copy.csv").read_bytes() == trace.read_bytes()
    assert copied == file_digest(trace)


def _free_bytes(folder) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def _file_system(path) -> str:
    """The type of the file system `path` is on (the longest mount point above it)."""
    mounts = [line.split()[1:3] for line in open("/proc/mounts")]
    path = str(path.resolve())
    point, kind = max(
        ((p, k) for p, k in mounts if path == p or path.startswith(p.rstrip("/") + "/")),
        key=lambda mount: len(mount[0]),
    )
    return kind


def _cached_pages(file) -> int:
    """How many of a file's pages are in the page cache (mincore of a mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = file.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    resident = (ctypes.c_ubyte * pages)()
    with open(file, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) as m:
        address = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m)))
        if libc.mincore(address, ctypes.c_size_t(size), resident) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return sum(page & 1 for page in resident)


def test_a_trace_still_being_written_while_it_is_ingested_is_refused(
    aaco_paths, trace, monkeypatch
):
    """The TraceLake reads the original while the bundle's copy is made beside it: a profiler
    that appends to the trace meanwhile makes the two differ, so the ingest is refused, naming
    the file, and leaves no bundle and no rows."""
    from aaco_pipelines.stages import load

    real_load = load.load_trace

    def load_while_the_profiler_writes(con, path, *args, **kwargs):
        counts = real_load(con, path, *args, **kwargs)
        with open(trace, "a") as original:
            original.write(
                '"KERNEL_DISPATCH","Agent 1",1,1,1,1,1,"late",1,1,2,0,0,0,0,0,1,1,1,1,1,1\n'
            )
        return counts

    monkeypatch.setattr(load, "load_trace", load_while_the_profiler_writes)
    with pytest.raises(AacoInputError, match="changed while it was being ingested") as error:
        ingest_trace(trace, aaco_paths, name="external")
    assert str(trace) in str(error.value)
    assert not [p for p in aaco_paths.sessions.rglob("*") if p.is_file()]
    lake = TraceLake(aaco_paths.tracelake)
    assert lake.query("SELECT count(*) AS n FROM kernel_events")["n"][0].as_py() == 0

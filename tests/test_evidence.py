"""Raw evidence stays what it was: ingested traces are copied and hashed, a bundle whose raw files
changed is refused when it is loaded again, and bundle files name no path outside the bundle."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat

import models
import pytest
from conftest import SHARED, add_model

from aaco_pipelines.bundle import EVIDENCE, copy_with_digest, file_digest
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.ingest import ingest_trace
from aaco_pipelines.pipeline import measure_model
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.tracelake.store import TraceLake

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
    TraceLake(aaco_paths.tracelake).ingest_session(bundle)  # re-reads and verifies: unchanged
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
        lake.ingest_session(bundle)
    assert error.value.path == str(raw) and "new session" in error.value.fix
    after = lake.query("SELECT count(*) AS n FROM kernel_events")["n"][0].as_py()
    assert after == before  # the earlier load stands
    raw.unlink()
    with pytest.raises(AacoInputError, match="missing"):
        lake.ingest_session(bundle)


def test_a_device_trace_path_leading_outside_the_bundle_is_refused(aaco_paths, trace):
    bundle = ingest_trace(trace, aaco_paths, name="external")
    manifest = bundle.tables_dir / "device_trace.json"
    manifest.write_text(json.dumps({"path": f"../../../../../{trace}", "iteration": 0}))
    with pytest.raises(AacoInputError, match="outside itself"):
        TraceLake(aaco_paths.tracelake).ingest_session(bundle, verify=False)


def test_measured_bundles_record_their_evidence_with_consistent_permissions(aaco_paths):
    path = add_model(aaco_paths, "mlp", models.tiny_mlp())
    bundle = measure_model(registered_model(path), aaco_paths)
    recorded = json.loads((bundle.path / EVIDENCE).read_text())
    assert {"request.json", "session.json", "ort_profile.json", "latencies.json"} <= set(recorded)
    assert not [name for name in recorded if name.startswith("tables/")]  # derived, rebuilt
    for name, digest in recorded.items():
        assert file_digest(bundle.path / name) == digest
    folders = [bundle.path, *(p for p in bundle.path.rglob("*") if p.is_dir())]
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in folders} == {"0o755"}
    raw_files = [bundle.path / name for name in recorded]
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in raw_files} == {"0o444"}


def test_a_copy_the_kernel_gives_up_on_halfway_is_redone_by_chunks(tmp_path, trace, monkeypatch):
    """copy_file_range fails across file systems on older kernels (EXDEV), possibly after
    copying part of the file: the copy starts over by chunks and is byte for byte the trace."""
    real = os.copy_file_range
    calls = []

    def gives_up(src, dst, count, *args):
        calls.append(count)
        if len(calls) > 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src, dst, 1000, *args)  # a partial copy first

    monkeypatch.setattr(os, "copy_file_range", gives_up)
    copied = copy_with_digest(trace, tmp_path / "copy.csv")
    assert (tmp_path / "copy.csv").read_bytes() == trace.read_bytes()
    assert copied == file_digest(trace) and len(calls) == 2


def test_a_trace_still_being_written_while_it_is_ingested_is_refused(
    aaco_paths, trace, monkeypatch
):
    """The TraceLake reads the original while the bundle's copy is made beside it: a profiler
    that appends to the trace meanwhile makes the two differ, so the ingest is refused, naming
    the file, and leaves no bundle and no rows."""
    from aaco_pipelines.tracelake import store

    real_load = store.load_trace

    def load_while_the_profiler_writes(con, path, *args, **kwargs):
        counts = real_load(con, path, *args, **kwargs)
        with open(trace, "a") as original:
            original.write(
                '"KERNEL_DISPATCH","Agent 1",1,1,1,1,1,"late",1,1,2,0,0,0,0,0,1,1,1,1,1,1\n'
            )
        return counts

    monkeypatch.setattr(store, "load_trace", load_while_the_profiler_writes)
    with pytest.raises(AacoInputError, match="changed while it was being ingested") as error:
        ingest_trace(trace, aaco_paths, name="external")
    assert str(trace) in str(error.value)
    assert not [p for p in aaco_paths.sessions.rglob("*") if p.is_file()]
    lake = TraceLake(aaco_paths.tracelake)
    assert lake.query("SELECT count(*) AS n FROM kernel_events")["n"][0].as_py() == 0

"""Perfetto export: a session becomes a valid Chrome trace with one track per timeline."""

from __future__ import annotations

import json
from collections import defaultdict

import models
import pytest
from conftest import SHARED, add_model

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.ingest import ingest_trace
from aaco_pipelines.pipeline import measure_model
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.report import perfetto
from aaco_pipelines.report.perfetto import PHASES, export_perfetto, write_perfetto
from aaco_pipelines.tracelake.store import TraceLake

RPD = SHARED / "samples" / "profilers" / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"


def check_structure(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """Everything a trace viewer relies on; the events of each (pid, tid) track."""
    assert trace["displayTimeUnit"] == "ns"
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} <= set(PHASES)
    named_processes = {e["pid"] for e in events if e["name"] == "process_name"}
    named_threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    tracks = defaultdict(list)
    for event in events:
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["args"]
            continue
        assert event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] >= 0
        assert event["pid"] in named_processes and (event["pid"], event["tid"]) in named_threads
        tracks[(event["pid"], event["tid"])].append(event)
    for track in tracks.values():
        stamps = [e["ts"] for e in track]
        assert stamps == sorted(stamps)
    return tracks


def test_device_trace_has_kernels_per_queue_and_counters(aaco_paths, tmp_path, monkeypatch):
    ingest_trace(RPD, aaco_paths, name="vllm")
    lake = TraceLake(aaco_paths.tracelake)
    trace = export_perfetto(lake, "latest")
    tracks = check_structure(trace)
    gpu = [events for (pid, _), events in tracks.items() if pid == 3]
    assert sum(len(events) for events in gpu) == 8948  # every kernel, on its queue's track
    assert all(e["ph"] == "X" for events in gpu for e in events)
    assert any(e["ph"] == "C" for (pid, _), events in tracks.items() if pid == 4 for e in events)
    output = tmp_path / "trace.json"
    count = write_perfetto(lake, "latest", output)
    streamed = json.loads(output.read_text())  # the streamed file is the same valid JSON
    assert len(streamed["traceEvents"]) == count == len(trace["traceEvents"])

    # An export that fails half-way leaves the earlier file as it was, and nothing beside it.
    def failing_chunks(lake, session_id):
        yield ['{"ph": "M"}']
        raise OSError("disk full")

    monkeypatch.setattr(perfetto, "iter_event_chunks", failing_chunks)
    with pytest.raises(OSError, match="disk full"):
        write_perfetto(lake, "latest", output)
    assert json.loads(output.read_text()) == streamed
    assert not list(tmp_path.glob(".trace.json*"))


def test_measured_session_has_iterations_nodes_and_telemetry(aaco_paths, fast_options, tmp_path):
    path = add_model(aaco_paths, "tiny", models.tiny_mlp())
    bundle = measure_model(registered_model(path), aaco_paths, fast_options)
    trace = export_perfetto(TraceLake(aaco_paths.tracelake), bundle.session_id)
    tracks = check_structure(trace)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"iterations", "runtime phases", "counters"} <= names
    assert any(pid == 2 for pid, _ in tracks)  # ONNX nodes
    assert any(e["name"] == "model_run" for e in tracks[(1, 2)])
    output = tmp_path / "tiny.json"
    assert main(["export", "--session", bundle.session_id, "--output", str(output)]) == 0
    assert json.loads(output.read_text())["traceEvents"]


def test_unknown_session_and_missing_lake_are_input_errors(aaco_paths, tmp_path, capsys):
    lake = TraceLake(aaco_paths.tracelake)
    with pytest.raises(AacoInputError, match="no TraceLake"):
        export_perfetto(lake, "latest")
    assert not aaco_paths.tracelake.exists()  # looking did not create one
    ingest_trace(RPD, aaco_paths, name="vllm")
    with pytest.raises(AacoInputError, match="no session 'nope'"):
        export_perfetto(lake, "nope")
    output = str(tmp_path / "x.json")
    assert main(["export", "--session", "nope", "--output", output]) == 2
    assert "Fix:" in capsys.readouterr().err

"""Perfetto export: a session becomes a valid Chrome trace with one track per timeline."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.report import perfetto, perfetto_proto
from aaco_pipelines.report.perfetto import PHASES, clock_origins, export_perfetto, write_perfetto
from aaco_pipelines.report.perfetto_proto import write_perfetto_proto
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.tracelake.store import TraceLake
from benchmarks.trace_simulator import simulate_at_scale
from tests.helpers import SHARED

RPD = SHARED / "samples" / "profilers" / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"


def check_structure(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """Everything a trace viewer relies on, and the file's order (metadata, then track by
    track in (pid, tid) order, each in time order); the events of each (pid, tid) track."""
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
    phases = [e["ph"] for e in events]
    assert phases == sorted(phases, key=lambda phase: phase != "M")
    order = [(e["pid"], e["tid"]) for e in events if e["ph"] != "M"]
    assert order == sorted(order)
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
    assert len(streamed["traceEvents"]) == len(trace["traceEvents"])
    assert count == sum(e["ph"] != "M" for e in streamed["traceEvents"])  # track names aside

    # An export that fails half-way leaves the earlier file as it was, and nothing beside it.
    def failing_chunks(lake, session_id):
        yield ['{"ph": "M"}']
        raise OSError("disk full")

    monkeypatch.setattr(perfetto, "iter_event_chunks", failing_chunks)
    with pytest.raises(OSError, match="disk full"):
        write_perfetto(lake, "latest", output)
    assert json.loads(output.read_text()) == streamed
    assert not list(tmp_path.glob(".trace.json*"))


def test_measured_session_has_iterations_nodes_and_telemetry(measured_mlp_home, tmp_path):
    aaco_paths, bundle = measured_mlp_home
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


def read_proto(path) -> dict:
    """A protobuf trace as Perfetto's importer reads it, parsed with Perfetto's published
    schema: interned names resolved, each track's begins and ends paired as a stack (an end
    closes the innermost open slice). Slices and counter samples per track name."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    names, tracks, open_slices = {}, {}, defaultdict(list)
    slices, counters = defaultdict(list), defaultdict(list)
    for packet in trace.packet:
        names.update((n.iid, n.name) for n in packet.interned_data.event_names)
        if packet.HasField("track_descriptor"):
            track = packet.track_descriptor
            tracks[track.uuid] = track.name or track.process.process_name
        if not packet.HasField("track_event"):
            continue
        assert packet.trusted_packet_sequence_id == perfetto_proto.SEQUENCE
        event, ts = packet.track_event, packet.timestamp
        track = tracks[event.track_uuid]  # declared before its first event
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_slices[track].append((names[event.name_iid], ts))
        elif event.type == TrackEvent.TYPE_SLICE_END:
            name, start = open_slices[track].pop()
            slices[track].append((name, start, ts - start))
        elif event.type == TrackEvent.TYPE_INSTANT:
            slices[track].append((names[event.name_iid], ts, 0))
        else:
            assert event.type == TrackEvent.TYPE_COUNTER
            counters[track].append((ts, event.double_counter_value))
    assert not any(open_slices.values())  # every begin ended
    return {"slices": slices, "counters": counters, "tracks": set(tracks.values())}


def test_protobuf_trace_holds_every_kernel_once_as_the_json_does(aaco_paths, tmp_path, monkeypatch):
    ingest_trace(RPD, aaco_paths, name="vllm")
    lake = TraceLake(aaco_paths.tracelake)
    output = tmp_path / "trace.perfetto-trace"
    count = write_perfetto_proto(lake, "latest", output)
    proto = read_proto(output)
    gpu = [s for track, found in proto["slices"].items() if track.startswith("gpu") for s in found]
    with lake.connect() as con:
        [session] = con.execute("SELECT session_id FROM sessions").fetchall()[0]
        origin = clock_origins(con, session)["device"]
        kernels = con.execute(
            "SELECT coalesce(kernel_name, event_name), start_ns - ?, coalesce(duration_ns, 0) "
            "FROM kernel_events WHERE category = 'Kernel'",
            [origin],
        ).fetchall()
    assert len(kernels) == 8948
    assert sorted(gpu) == sorted(kernels)  # each once: its name, start and duration in ns
    # 4 kernels cross their neighbour on the queue: a track is a stack, so they get a lane
    assert sorted(t for t in proto["tracks"] if t.startswith("gpu")) == [
        "gpu 2 queue 0",
        "gpu 2 queue 0 (overlap 1)",
    ]
    assert len(proto["slices"]["gpu 2 queue 0 (overlap 1)"]) == 4

    json_trace = export_perfetto(lake, "latest")
    events = [e for e in json_trace["traceEvents"] if e["ph"] != "M"]
    assert (
        count
        == len(events)
        == sum(map(len, proto["slices"].values())) + sum(map(len, proto["counters"].values()))
    )
    threads = {e["args"]["name"] for e in json_trace["traceEvents"] if e["name"] == "thread_name"}
    lanes = {t for t in proto["slices"] if "(overlap" in t}
    assert set(proto["slices"]) - lanes == threads - {"counters"}  # named as in the JSON
    json_counters = Counter((e["name"], round(e["ts"] * 1000), e["args"]["value"]) for e in events
                            if e["ph"] == "C")  # fmt: skip
    assert json_counters == Counter(
        (track, ts, value) for track, samples in proto["counters"].items() for ts, value in samples
    )
    assert len(json_counters) == 81

    # An export that fails half-way leaves the earlier file as it was, and nothing beside it.
    written = output.read_bytes()

    def failing(edges):
        raise OSError("disk full")

    monkeypatch.setattr(perfetto_proto, "event_packets", failing)
    with pytest.raises(OSError, match="disk full"):
        write_perfetto_proto(lake, "latest", output)
    assert output.read_bytes() == written
    assert not list(tmp_path.glob(".trace.perfetto-trace*"))


def test_protobuf_trace_of_a_measured_session(measured_mlp_home, tmp_path):
    aaco_paths, bundle = measured_mlp_home
    output = tmp_path / "tiny.pftrace"
    command = ["export", "--session", bundle.session_id, "--format", "perfetto-proto"]
    assert main([*command, "--output", str(output)]) == 0
    proto = read_proto(output)
    json_trace = export_perfetto(TraceLake(aaco_paths.tracelake), bundle.session_id)
    events = [e for e in json_trace["traceEvents"] if e["ph"] != "M"]
    slices = Counter(
        (track, name, start, dur)
        for track, found in proto["slices"].items()
        for name, start, dur in found
    )
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in json_trace["traceEvents"]
              if e["name"] == "thread_name"}  # fmt: skip
    assert slices == Counter(
        (thread[(e["pid"], e["tid"])], e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000))
        for e in events
        if e["ph"] == "X"
    )  # iterations, runtime phases and ONNX nodes per thread, as in the JSON
    assert {"iterations", "runtime phases"} <= set(proto["slices"])
    assert any(track.startswith("thread ") for track in proto["slices"])
    assert sum(map(len, proto["counters"].values())) == sum(e["ph"] == "C" for e in events) > 0


def test_a_trace_larger_than_duckdbs_memory_exports_whole(aaco_paths, tmp_path, monkeypatch):
    """600,000 kernels make about 150 MB of JSON events to sort, under a 128 MiB memory
    limit for DuckDB: the sorts spill to disk, both files hold every kernel. (A window over all
    the kernels, and one sort over every source at once, ran out of memory here.)"""
    monkeypatch.setenv("AACO_DUCKDB_MEMORY_MB", "128")
    truth = simulate_at_scale(600_000, tmp_path / "sim")
    ingest_trace(truth.kernel_trace.parent, aaco_paths, name="big")
    lake = TraceLake(aaco_paths.tracelake)
    assert lake.query("SELECT current_setting('memory_limit') AS m")["m"][0].as_py() == "128.0 MiB"

    output = tmp_path / "big.json"
    count = write_perfetto(lake, "latest", output)
    assert output.stat().st_size > 128 << 20
    events = json.loads(output.read_text())["traceEvents"]
    kernels = [e for e in events if e["ph"] == "X" and e["pid"] == 3]
    assert len(kernels) == 600_000 and count == sum(e["ph"] != "M" for e in events)
    stamps = [(e["tid"], e["ts"]) for e in kernels]
    assert stamps == sorted(stamps)
    proto = tmp_path / "big.pftrace"
    assert write_perfetto_proto(lake, "latest", proto) == sum(e["ph"] != "M" for e in events)

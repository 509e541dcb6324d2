"""One session as a Chrome trace-event file, for ui.perfetto.dev or chrome://tracing.

Tracks: host iterations and ONNX Runtime session phases, ONNX nodes (one track per runtime
thread), GPU kernels (one track per device queue/stream) and telemetry counters. DuckDB renders
every event as JSON text (`to_json`) and the writer streams it in record batches, so a trace with
millions of kernels never becomes one Python list. Times are microseconds (floats) relative to
the session's first event; a device trace on another clock (rocprofv3's monotonic clock beside
the host's epoch clock) gets its own origin, since the two cannot be placed on one axis by a
simple subtraction.

The tracks are declared once (`SOURCES`); Perfetto's protobuf format (`perfetto_proto`) reads
the same declarations, so both files hold the same events.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.report.output_file import replacing
from aaco_pipelines.tracelake.queries import resolve_session
from aaco_pipelines.tracelake.store import TraceLake

FORMATS = ("perfetto", "perfetto-proto")
PHASES = ("X", "C", "M")
SAME_CLOCK_NS = 3600 * 10**9  # device times within an hour of the host's share its clock
BATCH_ROWS = 65_536
PROCESSES = {1: "Host", 2: "ONNX nodes", 3: "GPU", 4: "Telemetry"}


@dataclass(frozen=True)
class Source:
    """One kind of track, as SQL over the TraceLake ($sid: the session): where its rows come
    from, which track each row is on (pid, tid, name) and what its event says. `dur` is in ns;
    a source with a `counter` value instead is a counter. `args` are (key, SQL, kind) with kind
    "int" or "str": the protobuf writer encodes the two differently."""

    pid: int
    tid: str
    track: str
    time: str
    name: str
    rows: str
    cat: str | None = None
    dur: str | None = None
    counter: str | None = None
    args: tuple[tuple[str, str, str], ...] = ()
    clock: str = "host"


def numbered_tracks(rows: str, keys: tuple[str, ...]) -> str:
    """`rows` (a FROM clause) with `tid`: its track's number, 1, 2, ... in the order of `keys`
    (nulls last). Numbered once per distinct key and joined back: a window over every row held
    the whole session in memory (the export of 2 * 10^7 kernels peaked at 11 GB)."""
    listed = ", ".join(keys)
    same = " AND ".join(f"e.{key} IS NOT DISTINCT FROM k.{key}" for key in keys)
    return f"""(SELECT e.*, k.tid FROM (SELECT * FROM {rows}) e
        JOIN (SELECT {listed}, row_number() OVER (ORDER BY {listed}) AS tid
              FROM (SELECT DISTINCT {listed} FROM {rows})) k ON {same})"""


DURATION = "coalesce(duration_ns, 0)"
# In track order (pid, then tid): the writers read one source after another, each sorted on its
# own; one sort over all of them did not spill (DuckDB 2.0 ran out of memory at its limit).
SOURCES = {
    "iterations": Source(
        pid=1, tid="1", track="'iterations'", time="start_ns", cat="'iteration'",
        name="\"pass\" || ' ' || iteration", dur="latency_ns",
        args=(("pass", '"pass"', "str"), ("iteration", "iteration", "int"),
              ("latency_ns", "latency_ns", "int")),
        rows="iterations WHERE session_id = $sid AND start_ns IS NOT NULL",
    ),
    "session": Source(
        pid=1, tid="2", track="'runtime phases'", time="start_ns", cat="'session'",
        name="event_name", dur=DURATION,
        args=(("iteration", "iteration", "int"), ("source", "source", "str")),
        rows="kernel_events WHERE session_id = $sid AND category = 'Session'",
    ),
    "nodes": Source(
        pid=2, tid="tid", track="'thread ' || coalesce(thread_id::VARCHAR, '?')",
        time="start_ns", cat="coalesce(op_type, 'node')", name="coalesce(node_name, event_name)",
        dur=DURATION,
        args=(("op_type", "op_type", "str"), ("provider", "provider", "str"),
              ("iteration", "iteration", "int")),
        rows=numbered_tracks(
            "kernel_events WHERE session_id = $sid AND category = 'Node'", ("thread_id",)
        ),
    ),
    "kernels": Source(
        pid=3, tid="tid", clock="device", time="start_ns",
        track="""'gpu ' || coalesce(device_id::VARCHAR, '?') || ' queue '
                 || coalesce(queue_id::VARCHAR, '?') || coalesce(' stream ' || stream_id, '')""",
        cat="coalesce(kernel_family, 'kernel')", name="coalesce(kernel_name, event_name)",
        dur=DURATION,
        args=(("kernel_family", "kernel_family", "str"), ("dispatch_id", "dispatch_id", "int"),
              ("correlation_id", "correlation_id", "int"), ("node", "node_name", "str"),
              ("grid_size", "grid_size", "int"), ("workgroup_size", "workgroup_size", "int")),
        rows=numbered_tracks(
            "kernel_events_with_family WHERE session_id = $sid AND category = 'Kernel'",
            ("device_id", "queue_id", "stream_id"),
        ),
    ),
    "telemetry": Source(
        pid=4, tid="0", track="'counters'", time="timestamp_ns", counter="value",
        name="concat_ws(' ', source, device, metric, '(' || unit || ')')",
        rows="telemetry WHERE session_id = $sid AND isfinite(value)",
    ),
}  # fmt: skip


def _json_event(source: Source) -> str:
    """The source's event as a DuckDB struct for to_json, keys in Chrome's usual order."""
    ts = f"(({source.time}) - ${source.clock}) / 1000.0"
    fields = [f"'ph': '{'C' if source.counter else 'X'}'"]
    fields += [f"'cat': {source.cat}"] if source.cat else []
    fields += [f"'name': {source.name}", f"'pid': {source.pid}", f"'tid': {source.tid}"]
    fields += [f"'ts': {ts}"] + ([f"'dur': ({source.dur}) / 1000.0"] if source.dur else [])
    args = [("value", source.counter)] if source.counter else [a[:2] for a in source.args]
    fields.append("'args': {" + ", ".join(f"'{key}': {sql}" for key, sql in args) + "}")
    return "to_json({" + ", ".join(fields) + "})"


def track_names(con, session_id: str, counters: bool = True) -> list[tuple[int, int, str]]:
    """(pid, tid, name) of every track the session has events on, in track order; without the
    counter tracks for `counters=False`."""
    sql = " UNION ALL ".join(
        f"SELECT DISTINCT {s.pid} AS pid, {s.tid} AS tid, {s.track} AS track FROM {s.rows}"
        for s in SOURCES.values()
        if counters or not s.counter
    )
    return con.execute(f"SELECT * FROM ({sql}) ORDER BY pid, tid", {"sid": session_id}).fetchall()


ORIGINS_SQL = """
WITH host AS (
    SELECT start_ns AS t FROM iterations WHERE session_id = $sid
    UNION ALL SELECT start_ns FROM kernel_events WHERE session_id = $sid AND category <> 'Kernel'
    UNION ALL SELECT timestamp_ns FROM telemetry WHERE session_id = $sid)
SELECT (SELECT min(t) FROM host), (SELECT max(t) FROM host),
       (SELECT min(start_ns) FROM kernel_events WHERE session_id = $sid AND category = 'Kernel')
"""


def clock_origins(con, session_id: str) -> dict[str, int]:
    """Host and device origins (ns): one shared origin when both look like the same clock."""
    [(host_min, host_max, device_min)] = con.execute(ORIGINS_SQL, {"sid": session_id}).fetchall()
    if host_min is None:
        return {"host": device_min or 0, "device": device_min or 0}
    if device_min is None:
        return {"host": host_min, "device": host_min}
    same = host_min - SAME_CLOCK_NS <= device_min <= host_max + SAME_CLOCK_NS
    first = min(host_min, device_min)
    return {"host": first, "device": first} if same else {"host": host_min, "device": device_min}


def iter_event_chunks(lake: TraceLake, session_id: str) -> Iterator[list[str]]:
    """The session's events as lists of JSON texts: track names first, then each track in
    time order (tracks ordered by pid, tid), one record batch at a time."""
    with lake.connect() as con:
        origins = clock_origins(con, session_id)
        params = {"sid": session_id, **origins}
        yield list(_metadata(track_names(con, session_id)))
        for source in SOURCES.values():
            sql = (
                f"SELECT {_json_event(source)} AS event, {source.tid} AS tid, {source.time} AS t "
                f"FROM {source.rows} ORDER BY tid, t"
            )
            reader = con.sql(sql, params=source_params(source, params))
            for batch in reader.to_arrow_reader(BATCH_ROWS):
                yield batch.column(0).to_pylist()


def source_params(source: Source, params: dict) -> dict:
    """Of the session's parameters, those a source's SQL uses (DuckDB refuses the others)."""
    return {"sid": params["sid"], source.clock: params[source.clock]}


def _metadata(names: list[tuple[int, int, str]]) -> Iterator[str]:
    for pid in sorted({pid for pid, _, _ in names}):
        yield _meta("process_name", pid, 0, PROCESSES[pid])
        yield _meta("process_sort_index", pid, 0, pid, key="sort_index")
    for pid, tid, track in names:
        yield _meta("thread_name", pid, tid, track)


def _meta(name: str, pid: int, tid: int, value, key: str = "name") -> str:
    return json.dumps({"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {key: value}})


def write_perfetto(lake: TraceLake, session_id: str, output: Path) -> int:
    """Stream the session's trace to `output`; returns the number of its events (slices and
    counter samples), as `perfetto_proto.write_perfetto_proto` counts them: the track-naming
    metadata records before them are no events of the timeline, and the protobuf carries
    their names in track descriptors instead. The file appears whole or not at all, and only a
    new path or a regular file is replaced (`output_file.replacing`)."""
    session_id = resolve_session(lake, session_id)
    written = events = 0
    with replacing(output) as out:
        out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
        for number, chunk in enumerate(iter_event_chunks(lake, session_id)):
            if chunk:
                out.write((",\n" if written else "") + ",\n".join(chunk))
                written += len(chunk)
                events += len(chunk) if number else 0  # chunk 0: the track names
        out.write("\n]}\n")
    return events


def export_perfetto(lake: TraceLake, session_id: str) -> dict:
    """The whole trace as one dict (small sessions; write_perfetto streams big ones)."""
    session_id = resolve_session(lake, session_id)
    chunks = iter_event_chunks(lake, session_id)
    events = [json.loads(event) for chunk in chunks for event in chunk]
    return {"traceEvents": events, "displayTimeUnit": "ns"}

"""One session as Perfetto's native protobuf trace (.perfetto-trace), for traces too big for JSON.

A 10-million-kernel session is a 2.68 GB Chrome JSON, more than the Perfetto UI's JSON importer
takes in a browser. This writes the same tracks and events (`perfetto.SOURCES`, the same clock
origins) as TracePackets of TrackEvents, the format Perfetto records itself:

- one packet of interned data first: every event name, category, argument name and string
  argument value once, with an id; events then carry the ids (a kernel name is written once,
  not once per launch);
- one TrackDescriptor per track: a process per pid, a named child track per JSON thread, a
  counter track per telemetry counter;
- a slice is a SLICE_BEGIN packet (name, category, arguments) and a SLICE_END packet, a
  zero-length one an INSTANT, a counter sample a COUNTER with its double value. Timestamps are
  integer ns from the clock origin, exact where the JSON has float µs.

Columnar, like the JSON path: DuckDB sorts the events and turns every string into its id (one
join with the small table of distinct strings), and each record batch is encoded by numpy, a
protobuf field at a time over all rows (`encode_rows`); no Python loop runs per event. A track's
slices are a stack in Perfetto, so a begin and an end at the same time are written end first,
and the ends of a batch are merged into its begins in time order (`_edges`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.report.output_file import replacing
from aaco_pipelines.report.perfetto import (
    BATCH_ROWS,
    PROCESSES,
    SOURCES,
    clock_origins,
    source_params,
    track_names,
)
from aaco_pipelines.tracelake.queries import resolve_session
from aaco_pipelines.tracelake.store import TraceLake

SUFFIXES = (".perfetto-trace", ".pftrace")
SEQUENCE = 1  # trusted_packet_sequence_id: interned ids hold within one sequence
CLEARED, NEEDS_STATE = 1, 2  # TracePacket.sequence_flags
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4  # TrackEvent.type
INT_SLOTS, STR_SLOTS = 4, 2  # argument columns: the most any source has of each kind
COUNTER_UUID = 1 << 32  # counter tracks: COUNTER_UUID + the counter's name id


# --- protobuf wire format, one message at a time (descriptors, interned data) -----------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64: ten bytes, as protobuf writes them
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def int_field(field: int, value: int) -> bytes:
    return key(field, 0) + varint(value)


def bytes_field(field: int, payload: bytes | str) -> bytes:
    payload = payload.encode() if isinstance(payload, str) else payload
    return key(field, 2) + varint(len(payload)) + payload


# --- protobuf wire format, a field over all rows at once (events) -------------------------------


@dataclass
class Column:
    """One field's bytes in every row: `size` per row (0 where the row lacks it) and how to
    write them, given each row's position in the output."""

    size: np.ndarray
    write: Callable[[np.ndarray, np.ndarray], None]


_LIMITS = np.array([1 << shift for shift in range(7, 64, 7)], np.uint64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each uint64's varint: 1 below 2**7, 2 below 2**14, ... 10."""
    return np.searchsorted(_LIMITS, values, side="right").astype(np.int64) + 1


def _varint_bytes(out: np.ndarray, at: np.ndarray, values: np.ndarray, size: np.ndarray) -> None:
    """Write each value's varint at `at`: byte j of every value that has one, j = 0, 1, ..."""
    for j in range(int(size.max(initial=0))):
        if j:
            rows = np.flatnonzero(size > j)
            at, values, size = at[rows], values[rows], size[rows]
        group = (values >> np.uint64(7 * j)) & np.uint64(0x7F)
        out[at + j] = np.where(size > j + 1, group | np.uint64(0x80), group).astype(np.uint8)


def varint_field(field: int, values, present: np.ndarray) -> Column:
    """Field `field` with each row's integer (int64 or uint64, as protobuf's varint types)."""
    return _tagged_varint(key(field, 0), values, present)


def _tagged_varint(tag: bytes, values, present: np.ndarray) -> Column:
    values = np.broadcast_to(np.asarray(values).astype(np.int64), present.shape)
    rows = np.flatnonzero(present)
    values = values[rows].view(np.uint64)
    sizes = varint_sizes(values)
    size = np.zeros(len(present), np.int64)
    size[rows] = len(tag) + sizes

    def write(out: np.ndarray, pos: np.ndarray) -> None:
        at = pos[rows]
        for j, byte in enumerate(tag):
            out[at + j] = byte
        _varint_bytes(out, at + len(tag), values, sizes)

    return Column(size, write)


def double_field(field: int, values: np.ndarray, present: np.ndarray) -> Column:
    """Field `field` with each row's float64, 8 little-endian bytes (fixed64)."""
    tag = np.frombuffer(key(field, 1), np.uint8)
    rows = np.flatnonzero(present)
    raw = values[rows].astype("<f8").view(np.uint8).reshape(-1, 8)
    cells = np.concatenate([np.broadcast_to(tag, (len(rows), len(tag))), raw], axis=1)
    size = np.where(present, cells.shape[1], 0).astype(np.int64)

    def write(out: np.ndarray, pos: np.ndarray) -> None:
        out[pos[rows, None] + np.arange(cells.shape[1])] = cells

    return Column(size, write)


def message_field(field: int, columns: list[Column], present: np.ndarray) -> list[Column]:
    """A length-delimited sub-message: its key and length, then its fields."""
    length = sum((column.size for column in columns), np.zeros(len(present), np.int64))
    return [_tagged_varint(key(field, 2), length, present), *columns]


def encode_rows(columns: list[Column], n: int) -> np.ndarray:
    """The rows' bytes one after another, each row its columns in order: sizes first, so every
    byte is written once, straight to its place."""
    total = sum((column.size for column in columns), np.zeros(n, np.int64))
    pos = np.cumsum(total) - total
    out = np.empty(int(total.sum()), np.uint8)
    for column in columns:
        column.write(out, pos)
        pos += column.size
    return out


# --- the session's events as columns --------------------------------------------------------


def _slots(source, kind: str, count: int) -> list[str]:
    sqls = [sql for _, sql, k in source.args if k == kind]
    return sqls + ["NULL"] * (count - len(sqls))


def events_sql() -> str:
    """Every source's events (`source_events_sql`), one after another."""
    return " UNION ALL ".join(source_events_sql(number) for number in range(len(SOURCES)))


def source_events_sql(number: int) -> str:
    """One source's events: the JSON's pid and tid (their order), the time from the clock
    origin and the duration in ns, the strings to intern and the argument slots."""
    source = list(SOURCES.values())[number]
    ints = [f"({sql})::BIGINT AS i{k}" for k, sql in enumerate(_slots(source, "int", 4))]
    strs = [f"({sql})::VARCHAR AS s{k}" for k, sql in enumerate(_slots(source, "str", 2))]
    return (
        f"SELECT {number}::UTINYINT AS src, {source.pid} AS pid, {source.tid} AS tid, "
        f"({source.time}) - ${source.clock} AS t, "
        f"{f'({source.dur})' if source.dur else 'NULL'}::BIGINT AS dur, "
        f"({source.name})::VARCHAR AS name, ({source.cat or 'NULL'})::VARCHAR AS cat, "
        f"({source.counter or 'NULL'})::DOUBLE AS value, {', '.join(ints + strs)} "
        f"FROM {source.rows}"
    )


STRINGS = ("name", "cat", "s0", "s1")  # the strings an event carries, all interned


@dataclass
class Interned:
    """The session's distinct strings, each with its id: `keys` has a row per distinct
    combination of (src, name, cat, s0, s1) with their ids, to join the events with."""

    names: list[str]
    cats: list[str]
    values: list[str]
    keys: pa.Table


def intern(con, params: dict) -> Interned:
    strings = ", ".join(("src",) + STRINGS)
    keys = con.sql(
        f"SELECT DISTINCT {strings} FROM ({events_sql()})", params=params
    ).to_arrow_table()
    vocab = {
        "names": _distinct([keys["name"]]),
        "cats": _distinct([keys["cat"]]),
        "values": _distinct([keys["s0"], keys["s1"]]),
    }
    ids = {"name": "names", "cat": "cats", "s0": "values", "s1": "values"}
    for column, table in ids.items():
        found = pc.index_in(keys[column], value_set=pa.array(vocab[table], pa.string()))
        keys = keys.append_column(f"{column}_iid", pc.add(found, 1))  # ids start at 1
    return Interned(keys=keys, **vocab)


def _distinct(columns: list[pa.ChunkedArray]) -> list[str]:
    values = pa.chunked_array([c for column in columns for c in column.chunks], pa.string())
    return sorted(pc.unique(values).drop_null().to_pylist())


def ordered_events_sql(number: int) -> str:
    """One source's events with their strings' ids, in the JSON's order (track, then time); at
    one time the longer slice first, so a slice's children follow it."""
    on = " AND ".join(f"e.{c} IS NOT DISTINCT FROM k.{c}" for c in ("src",) + STRINGS)
    ints = ", ".join(f"e.i{k}" for k in range(INT_SLOTS))
    return f"""
        SELECT e.src, e.pid, e.tid, e.t, e.dur, e.value, {ints},
               k.name_iid, k.cat_iid, k.s0_iid, k.s1_iid
        FROM ({source_events_sql(number)}) e JOIN interned_keys k ON {on}
        ORDER BY e.tid, e.t, e.dur DESC NULLS LAST"""


def ordered_events(con, params: dict) -> Iterator[pa.RecordBatch]:
    """Every source's events in order, a batch at a time: the sources one after another
    (SOURCES is in track order), each sorted on its own."""
    for number, source in enumerate(SOURCES.values()):
        sql = ordered_events_sql(number)
        yield from con.sql(sql, params=source_params(source, params)).to_arrow_reader(BATCH_ROWS)


# --- begins and ends in time order, a batch at a time -----------------------------------------

_SLICE_FIELDS = ("type", "uuid", "name_iid", "cat_iid", "value", "src")


LANE_SHIFT = 40  # a track's further lanes: its uuid + lane << LANE_SHIFT


class Lanes:
    """Which lane of its track each slice goes on. Perfetto keeps a track's slices as a stack
    (an end closes the innermost open slice), so two that cross (one begins inside the other
    and ends after it: 4 of the 8,948 kernels of the real RPD sample's queue) cannot share a
    track; the later one goes to the first further lane where it nests or follows. Only a
    slice that begins before every earlier slice on its track has ended needs the stacks: any
    other (nearly every kernel) finds every lane empty, a vectorized test."""

    def __init__(self) -> None:
        self.trk, self.reach, self.stacks = -1, 0, [[]]

    def assign(self, trk: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Lanes of a batch of slices sorted by (track, start, longer first), carrying each
        track's open slices over to the next batch (a batch of counters alone has none)."""
        lanes = np.zeros(len(trk), np.int64)
        if len(trk) == 0:
            return lanes
        bounds = np.flatnonzero(np.diff(trk)) + 1
        for first, stop in zip(np.r_[0, bounds], np.r_[bounds, len(trk)], strict=True):
            if trk[first] != self.trk:
                self.trk, self.reach, self.stacks = trk[first], 0, [[]]
            s, e = start[first:stop], end[first:stop]
            reach = np.maximum.accumulate(np.r_[self.reach, e])  # [k]: max end before slice k
            alone = s >= reach[:-1]  # every earlier slice on the track has ended
            heads = np.flatnonzero(alone[:-1] & ~alone[1:])  # slices that others overlap
            for k in np.union1d(heads, np.flatnonzero(~alone)):
                if alone[k]:
                    self.stacks = [[int(e[k])]]
                else:
                    lanes[first + k] = self._place(int(s[k]), int(e[k]))
            if alone[-1]:
                self.stacks = [[int(e[-1])]]
            self.reach = int(reach[-1])
        return lanes

    def _place(self, start: int, end: int) -> int:
        for lane, stack in enumerate(self.stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                return lane
        self.stacks.append([end])
        return len(self.stacks) - 1


def _starts(batch: pa.RecordBatch, counters: set[int]) -> dict[str, np.ndarray]:
    """One edge per event: a slice's begin, an instant or a counter sample."""
    col = {name: batch.column(name) for name in batch.schema.names}
    src = _ints(col["src"])
    dur, has_dur = _ints(col["dur"]), _valid(col["dur"])
    counter = np.isin(src, list(counters))
    edge = {
        "trk": _ints(col["pid"]) << 24 | _ints(col["tid"]),
        "t": _ints(col["t"]),
        "rank": np.ones(len(src), np.int64),
        "tie": -dur,
        "src": src,
        "type": np.select([counter, has_dur & (dur > 0)], [COUNTER, SLICE_BEGIN], INSTANT),
        "value": pc.fill_null(col["value"], 0.0).to_numpy(),
        "dur": dur,
    }
    for name in ("name_iid", "cat_iid", "s0_iid", "s1_iid") + tuple(
        f"i{k}" for k in range(INT_SLOTS)
    ):
        edge[name], edge[f"has_{name}"] = _ints(col[name]), _valid(col[name])
    edge["uuid"] = np.where(counter, COUNTER_UUID + edge["name_iid"], edge["trk"])
    return edge


def _ends(starts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A SLICE_END per slice begun: at its end, before anything that begins then, the inner
    of two slices that end together first."""
    rows = np.flatnonzero(starts["type"] == SLICE_BEGIN)
    return {
        "trk": starts["trk"][rows],
        "t": _end(starts, rows),
        "rank": np.zeros(len(rows), np.int64),
        "tie": -starts["t"][rows],
        "uuid": starts["uuid"][rows],
        "type": np.full(len(rows), SLICE_END),
    }


def _end(starts: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    return starts["t"][rows] + starts["dur"][rows]


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Edges of several kinds as one table; a field an edge lacks is 0 and absent."""
    n = [len(part["t"]) for part in parts]
    names = {name for part in parts for name in part}
    return {
        name: np.concatenate(
            [part.get(name, np.zeros(k, bool if name.startswith("has_") else np.int64))
             for part, k in zip(parts, n, strict=True)]
        )
        for name in names
    }  # fmt: skip


def _take(edges: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {name: values[rows] for name, values in edges.items()}


def _edges(batches: Iterable[pa.RecordBatch], counters: set[int]) -> Iterator[dict]:
    """Each batch's edges sorted by (track, time, end before begin, nesting). Ends later than
    the batch's last begin wait for the next batch: the events arrive sorted by (track, time),
    so nothing that follows can sort before what is given out."""
    waiting: dict[str, np.ndarray] | None = None
    lanes = Lanes()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        starts = _starts(batch, counters)
        slices = np.flatnonzero(starts["type"] == SLICE_BEGIN)
        lane = lanes.assign(starts["trk"][slices], starts["t"][slices], _end(starts, slices))
        starts["uuid"][slices] += lane << LANE_SHIFT
        parts = [starts, _ends(starts)] + ([waiting] if waiting else [])
        edges = _concat(parts)
        edges = _take(edges, np.lexsort((edges["tie"], edges["rank"], edges["t"], edges["trk"])))
        last_trk, last_t = starts["trk"][-1], starts["t"][-1]
        later = (edges["trk"] == last_trk) & (edges["t"] > last_t) & (edges["rank"] == 0)
        waiting = _take(edges, np.flatnonzero(later))
        yield _take(edges, np.flatnonzero(~later))
    if waiting is not None and len(waiting["t"]):
        yield waiting


def _ints(column) -> np.ndarray:
    return pc.fill_null(column, 0).to_numpy().astype(np.int64)


def _valid(column) -> np.ndarray:
    return pc.is_valid(column).to_numpy(zero_copy_only=False)


# --- packets --------------------------------------------------------------------------------


def arg_names() -> list[str]:
    return sorted({name for source in SOURCES.values() for name, _, _ in source.args})


def _arg_name_ids(kind: str, slots: int) -> np.ndarray:
    """[source number, slot] -> the interned id of that argument's name (0: no argument)."""
    ids = {name: iid for iid, name in enumerate(arg_names(), 1)}
    table = np.zeros((len(SOURCES), slots), np.int64)
    for number, source in enumerate(SOURCES.values()):
        names = [name for name, _, k in source.args if k == kind]
        table[number, : len(names)] = [ids[name] for name in names]
    return table


# Argument slots: (edge column, DebugAnnotation value field, kind, slot of that kind).
ARG_SLOTS = [(f"i{k}", 4, "int", k) for k in range(INT_SLOTS)] + [
    (f"s{k}_iid", 17, "str", k)
    for k in range(STR_SLOTS)  # int_value = 4, string_value_iid = 17
]


def _annotations(edges: dict[str, np.ndarray], named: np.ndarray) -> list[Column]:
    """TrackEvent.debug_annotations: {name_iid, int_value | string_value_iid} per argument."""
    columns = []
    names = {"int": _arg_name_ids("int", INT_SLOTS), "str": _arg_name_ids("str", STR_SLOTS)}
    for column, field, kind, slot in ARG_SLOTS:
        name_ids = names[kind][edges["src"], slot]
        present = named & edges[f"has_{column}"] & (name_ids > 0)
        annotation = [
            varint_field(1, name_ids, present),
            varint_field(field, edges[column], present),
        ]
        columns += message_field(4, annotation, present)
    return columns


def event_packets(edges: dict[str, np.ndarray]) -> np.ndarray:
    """The edges as Trace.packet fields: TracePackets of TrackEvents, encoded column-wise."""
    n = len(edges["t"])
    every = np.ones(n, bool)
    kind = edges["type"]
    named = (kind == SLICE_BEGIN) | (kind == INSTANT)
    event = [
        varint_field(9, kind, every),  # type
        varint_field(11, edges["uuid"], every),  # track_uuid
        varint_field(10, edges["name_iid"], named & edges["has_name_iid"]),
        varint_field(3, edges["cat_iid"], named & edges["has_cat_iid"]),  # category_iids
        *_annotations(edges, named),
        double_field(44, edges["value"].astype(np.float64), kind == COUNTER),
    ]
    packet = [
        varint_field(8, edges["t"], every),  # timestamp
        *message_field(11, event, every),  # track_event
        varint_field(10, SEQUENCE, every),  # trusted_packet_sequence_id
        varint_field(13, NEEDS_STATE, every),  # sequence_flags
    ]
    return encode_rows(message_field(1, packet, every), n)


def _packet(*fields: bytes) -> bytes:
    return bytes_field(1, b"".join(fields))


def interned_packet(interned: Interned) -> bytes:
    """Every string the events refer to, with its id; clears the sequence's state first."""
    entries = [
        (1, interned.cats, 2),  # event_categories: EventCategory{iid, name}
        (2, interned.names, 2),  # event_names: EventName{iid, name}
        (3, arg_names(), 2),  # debug_annotation_names: DebugAnnotationName{iid, name}
        (29, interned.values, 2),  # debug_annotation_string_values: InternedString{iid, str}
    ]
    data = b"".join(
        bytes_field(field, int_field(1, iid) + bytes_field(text_field, text))
        for field, texts, text_field in entries
        for iid, text in enumerate(texts, 1)
    )
    return _packet(int_field(10, SEQUENCE), int_field(13, CLEARED), bytes_field(12, data))


def track_packets(tracks: list[tuple[int, int, str]], counters: list[str]) -> bytes:
    """A TrackDescriptor per process, per named track (the JSON's threads) and per counter."""
    descriptors = [
        int_field(1, pid) + bytes_field(3, int_field(1, pid) + bytes_field(6, PROCESSES[pid]))
        for pid in sorted({pid for pid, _, _ in tracks} | ({_counter_pid()} if counters else set()))
    ]
    descriptors += [
        int_field(1, pid << 24 | tid) + int_field(5, pid) + bytes_field(2, name)
        for pid, tid, name in tracks
    ]
    descriptors += [
        int_field(1, COUNTER_UUID + iid) + int_field(5, _counter_pid()) + bytes_field(2, name)
        + bytes_field(8, b"")
        for iid, name in counters
    ]  # fmt: skip
    return b"".join(_packet(int_field(10, SEQUENCE), bytes_field(60, d)) for d in descriptors)


def lane_packets(uuids: np.ndarray, names: dict[int, str], declared: set[int]) -> bytes:
    """Descriptors of the further lanes (`Lanes`) that these events are the first to use:
    "<track> (overlap N)", beside their track."""
    new = set(np.unique(uuids[uuids >= 1 << LANE_SHIFT]).tolist()) - declared
    declared |= new
    descriptors = []
    for uuid in sorted(new):
        trk, lane = uuid & ((1 << LANE_SHIFT) - 1), uuid >> LANE_SHIFT
        name = f"{names[trk]} (overlap {lane})"
        descriptors.append(int_field(1, uuid) + int_field(5, trk >> 24) + bytes_field(2, name))
    return b"".join(_packet(int_field(10, SEQUENCE), bytes_field(60, d)) for d in descriptors)


def _counter_sources() -> set[int]:
    return {number for number, source in enumerate(SOURCES.values()) if source.counter}


def _counter_pid() -> int:
    return next(source.pid for source in SOURCES.values() if source.counter)


def write_perfetto_proto(lake: TraceLake, session_id: str, output: Path) -> int:
    """Stream the session's trace to `output` in Perfetto's protobuf format; returns the number
    of events (slices, instants and counter samples, as the JSON's non-metadata events). The
    file appears whole or not at all (`output_file.replacing`)."""
    session_id = resolve_session(lake, session_id)
    count = 0
    with replacing(output) as text, lake.connect() as con:
        out = text.buffer  # the protobuf is bytes; nothing is written as text
        params = {"sid": session_id, **clock_origins(con, session_id)}
        interned = intern(con, params)
        con.register("interned_keys", interned.keys)
        out.write(interned_packet(interned))
        tracks = track_names(con, session_id, counters=False)  # counters: from `interned`
        out.write(track_packets(tracks, _counters(interned)))
        names, declared = {pid << 24 | tid: name for pid, tid, name in tracks}, set()
        for edges in _edges(ordered_events(con, params), _counter_sources()):
            out.write(lane_packets(edges["uuid"], names, declared))
            out.write(event_packets(edges).data)
            count += int(np.count_nonzero(edges["type"] != SLICE_END))
        con.unregister("interned_keys")
    return count


def _counters(interned: Interned) -> list[tuple[int, str]]:
    """(name id, name) of each counter: its track's name, and its uuid's offset."""
    keys = interned.keys.filter(pc.is_in(interned.keys["src"], pa.array(_counter_sources())))
    pairs = zip(keys["name_iid"].to_pylist(), keys["name"].to_pylist(), strict=True)
    return sorted(set(pairs))

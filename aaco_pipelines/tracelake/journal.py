"""The TraceLake's journal: the little of a lake that no session bundle holds, kept beside it so
`aaco restore` (stages.restore) can rebuild a lost or damaged lake from the bundles.

Every session's rows are recomputed from its bundle. What cannot be is written here by the code
that writes it to the lake, one JSON line per change:

- `envelope`: a hardware envelope stored (its row). A measured envelope measures the host at
  that moment, not any session.
- `baselines`: every baseline of one model and target after one of them was created or pinned
  (their rows). A baseline is a user's choice of sessions at a moment.
- `judged_against`: the envelope a session was diagnosed against and the note saying why.
  Which stored envelope was newest, quiet and of today's runtime depended on the moment.
- `loaded_complete`: a session made visible without analysis (measure_model without
  `analyze`, a benchmark), so a restore does not analyse it.
- `fdr_sweep`: the sessions of one sweep or night whose drift verdicts went through
  Benjamini-Hochberg together.
- `alerts`: every alert of one model and target after one of them changed (their rows), and
  the events of that change. People's acknowledgements live nowhere else.
- `bundle`: the digest of a session's bundle manifest as the session was loaded. A restore
  checks each bundle against it: a bundle whose manifest was deleted, or rewritten together
  with the files it lists, no longer matches what the lake vouched for.

The file is `<lake stem>.journal` beside the lake file (AACO_HOME/tracelake.journal by
default), so moving the lake aside (`mv tracelake.duckdb tracelake.damaged`) leaves it in
place. A line is appended under an exclusive flock with one write, then fsynced. A line that a
kill cut short is skipped when the journal is read, and the next append starts on a new line.
A shared lake (DuckLake) keeps no journal: its catalog is a database with its own backups.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from aaco_pipelines.tracelake import ducklake
from aaco_pipelines.tracelake.schema import TABLES

ENVELOPE = "envelope"
BASELINES = "baselines"
JUDGED_AGAINST = "judged_against"
LOADED_COMPLETE = "loaded_complete"
FDR_SWEEP = "fdr_sweep"
ALERTS = "alerts"
BUNDLE = "bundle"


@dataclass
class JournalState:
    """What a journal says, folded: the last word on each thing it records."""

    envelopes: dict[str, dict] = field(default_factory=dict)  # envelope_id -> row
    baselines: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (slug, target)
    judged_against: dict[str, dict] = field(default_factory=dict)  # session_id -> record
    not_analysed: set[str] = field(default_factory=set)  # sessions loaded complete, last
    sweeps: list[dict] = field(default_factory=list)  # {"session_ids", "q"}, in order
    alerts: dict[tuple[str, str], list[dict]] = field(default_factory=dict)  # (slug, target)
    alert_events: list[dict] = field(default_factory=list)  # in order
    bundle_digests: dict[str, str | None] = field(default_factory=dict)  # session -> manifest
    unreadable_lines: int = 0
    found: bool = False  # whether there was a journal at all

    def add(self, entry: dict) -> None:
        kind = entry.get("kind")
        if kind == ENVELOPE:
            self.envelopes[entry["row"]["envelope_id"]] = entry["row"]
        elif kind == BASELINES:
            self.baselines[(entry["model_slug"], entry["target"])] = entry["rows"]
        elif kind == JUDGED_AGAINST:
            self.judged_against[entry["session_id"]] = entry
            self.not_analysed.discard(entry["session_id"])
        elif kind == LOADED_COMPLETE:
            self.not_analysed.add(entry["session_id"])
        elif kind == FDR_SWEEP:
            self.sweeps.append(entry)
        elif kind == ALERTS:
            self.alerts[(entry["model_slug"], entry["target"])] = entry["rows"]
            self.alert_events += entry["events"]
        elif kind == BUNDLE:  # the last load's: a bundle collected again is loaded again
            self.bundle_digests[entry["session_id"]] = entry["manifest_sha256"]

    def baseline_rows(self) -> list[dict]:
        return [row for rows in self.baselines.values() for row in rows]

    def alert_rows(self) -> list[dict]:
        return [row for rows in self.alerts.values() for row in rows]


@dataclass(frozen=True)
class LakeJournal:
    lake: Path  # the lake file this journal belongs to

    @property
    def path(self) -> Path:
        return self.lake.with_name(f"{self.lake.stem}.journal")

    def record(self, kind: str, **fields) -> None:
        """Append one record. Nothing for a shared lake."""
        if ducklake.shared_lake() is not None:
            return
        entry = {"kind": kind, "recorded_at": dt.datetime.now(dt.timezone.utc), **fields}
        line = json.dumps(entry, default=_json_value, sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut short by a kill
                line = "\n" + line
            data = memoryview(line.encode())
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def state(self) -> JournalState:
        """The journal folded (an empty state when there is none)."""
        state = JournalState()
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return state
        state.found = True
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                _check(entry)
                state.add(entry)
            except (ValueError, KeyError, TypeError, AttributeError):
                state.unreadable_lines += 1
        return state


def table_of(name: str, rows: Iterable[dict]) -> pa.Table:
    """Journal rows back as a table of TABLES[name], times parsed back exactly."""
    schema = TABLES[name]
    times = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    parsed = [
        {**row, **{t: dt.datetime.fromisoformat(row[t]) for t in times if row.get(t)}}
        for row in rows
    ]
    return pa.Table.from_pylist(parsed, schema=schema)


def _check(entry: dict) -> None:
    """Raise for a record a restore could not use (a line edited by hand, another program's):
    the journal is data, read like any file."""
    kind = entry["kind"]
    if kind == ENVELOPE:
        table_of("hardware_envelopes", [entry["row"]])
        _strings(entry["row"]["envelope_id"])
    elif kind == BASELINES:
        table_of("baselines", entry["rows"])
        _strings(entry["model_slug"], entry["target"])
    elif kind == JUDGED_AGAINST:
        _strings(entry["session_id"])
        _strings(*(v for v in (entry.get("envelope_id"), entry.get("note")) if v is not None))
    elif kind == LOADED_COMPLETE:
        _strings(entry["session_id"])
    elif kind == ALERTS:
        table_of("alerts", entry["rows"])
        table_of("alert_events", entry["events"])
        _strings(entry["model_slug"])
    elif kind == BUNDLE:
        _strings(entry["session_id"])
        if entry["manifest_sha256"] is not None:
            _strings(entry["manifest_sha256"])
    elif kind == FDR_SWEEP:
        _strings(*entry["session_ids"])
        if not 0.0 < float(entry["q"]) < 1.0:
            raise ValueError(f"q {entry['q']} is not in (0, 1)")


def _strings(*values) -> None:
    if not all(isinstance(value, str) for value in values):
        raise TypeError("a string was expected")


def _json_value(value):
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")

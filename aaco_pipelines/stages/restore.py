"""Restore (`aaco restore`): a lost or damaged TraceLake rebuilt from the session bundles, each
session as itself: its id, slug, model version, rows, drift verdicts, and the envelopes and
baselines it was judged with.

What a bundle holds is loaded and analysed again by the stages that made it, one session at a
time in the order history was made; what no bundle holds (envelopes, baselines, which envelope
judged each session, the sweeps) comes from the lake's journal. A bundle the journal does not
vouch for is skipped and named. The lake is built beside its path and linked into place only
once complete: a failure leaves no lake. Nothing is measured again.

Entry point: `restore_lake`.

Docs: docs/how-to/restore-a-lake.md.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from aaco_pipelines.analysis.envelope.choice import (
    EXTERNAL_TARGET,
    latest_envelope,
    session_envelope,
    stored_envelope,
)
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.bundle.manifest import MANIFEST, manifest_digest
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.session_folders import failed_folders, is_held, published_bundles
from aaco_pipelines.governance.drift.fdr import control_sweep
from aaco_pipelines.stages.attribute import attribute
from aaco_pipelines.stages.critical_path import find_critical_path
from aaco_pipelines.stages.diagnose import judge_against_envelope
from aaco_pipelines.stages.judge_drift import judge_drift
from aaco_pipelines.stages.load import load, load_session
from aaco_pipelines.tracelake import ducklake
from aaco_pipelines.tracelake.journal import JournalState, LakeJournal, table_of
from aaco_pipelines.tracelake.locking import LockWait, lock_timeout, writer_lock
from aaco_pipelines.tracelake.store import TraceLake, insert_rows

Progress = Callable[[str], None]
WORK_PREFIX = ".restoring-"  # the folder a restore builds in: .<lake name>.restoring-XXXX
NO_ENVELOPE_KEPT = (
    "No hardware envelope: the session was restored, and no envelope of its target and runtime "
    "is kept. Roofline and utilization are not judged."
)


@dataclass(frozen=True)
class Skipped:
    session_id: str
    reason: str


@dataclass(frozen=True)
class Restored:
    lake: Path
    sessions: list[str]  # restored, in the order they were
    baselines: int
    envelopes: int
    skipped: list[Skipped]
    unverified: list[str]  # restored, marked unverified (asked for: --unverified)
    failed: int  # folders in failed/: runs that never completed, never restored
    unreadable_journal_lines: int
    journal: Path | None  # None: there was none

    def summary(self) -> str:
        """One line: what came back, and what did not and why."""
        line = (
            f"restored {_count(len(self.sessions), 'session')}, "
            f"{_count(self.baselines, 'baseline')} and "
            f"{_count(self.envelopes, 'hardware envelope')} into {self.lake}"
        )
        if self.unverified:
            line += (
                f"; {_count(len(self.unverified), 'session')} marked UNVERIFIED (no record of "
                "its bundle in the journal): " + ", ".join(self.unverified)
            )
        if self.skipped:
            line += f"; skipped {_count(len(self.skipped), 'bundle')}: " + "; ".join(
                f"{s.session_id} ({s.reason})" for s in self.skipped
            )
        if self.failed:
            line += f"; {self.failed} in failed/ not restored (runs that never completed)"
        if self.unreadable_journal_lines:
            line += f"; {self.unreadable_journal_lines} unreadable journal lines ignored"
        if self.journal is None:
            line += (
                "; no journal beside the lake: no envelopes or baselines to restore, every "
                "session analysed again"
            )
        return line


def restore_lake(
    paths: AacoPaths, on_progress: Progress | None = None, *, unverified: bool = False
) -> Restored:
    """Rebuild the TraceLake at paths.tracelake from the bundles under AACO_HOME and the lake's
    journal (docs/how-to/restore-a-lake.md); refused when a lake is there. `unverified`: restore the
    bundles the journal has no record of too, marked unverified."""
    say = on_progress or (lambda line: None)
    target = paths.tracelake
    refuse_to_replace(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(target, LockWait(target, lock_timeout(), None)):
        refuse_to_replace(target)  # a writer may have made one before we held the lock
        _remove_abandoned(target)
        journal, (bundles, skipped) = LakeJournal(target).state(), _bundles_in_order(paths)
        if not (bundles or skipped or journal.found):
            raise AacoInputError(
                "nothing to restore the TraceLake from: no session bundles, and no journal",
                path=paths.sessions,
                fix="point AACO_HOME at the folder holding sessions/ (and AACO_TRACELAKE at the "
                "lake's path, if it was moved)",
            )
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}{WORK_PREFIX}", dir=target.parent))
        try:
            lake = TraceLake(work / target.name)
            restored = _rebuild(lake, paths, journal, bundles, skipped, say, unverified)
            with lake.connect(write=True) as con:
                con.execute("CHECKPOINT")  # everything in the file: no write-ahead log to move
            _put_in_place(lake.path, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return restored


def refuse_to_replace(target: Path) -> None:
    """A restore never overwrites a lake, and rebuilds a lake file, not the shared lake."""
    if ducklake.shared_lake() is not None:
        raise AacoInputError(
            "aaco restore rebuilds a TraceLake file, and this process uses the shared TraceLake "
            f"({ducklake.CATALOG_ENV})",
            fix="restore the shared lake's catalog database from its backup, or unset "
            f"{ducklake.CATALOG_ENV} to rebuild a lake file",
        )
    wal = target.with_name(target.name + ".wal")
    if target.exists() or wal.exists():
        raise AacoInputError(
            "a TraceLake is already here; aaco restore never overwrites one",
            path=target,
            fix=f"move it aside first (mv {target} {target}.damaged, and its .wal if there is "
            "one), then run aaco restore again",
        )


def _rebuild(
    lake: TraceLake,
    paths: AacoPaths,
    journal: JournalState,
    bundles: list[SessionBundle],
    skipped: list[Skipped],
    say: Progress,
    unverified: bool = False,
) -> Restored:
    envelopes = table_of("hardware_envelopes", journal.envelopes.values())
    with lake.transaction() as con:  # the envelopes first: sessions are judged against them
        insert_rows(con, "hardware_envelopes", envelopes)
        # and the alerts: an invalid one's sessions leave their metric's baseline
        insert_rows(con, "alerts", table_of("alerts", journal.alert_rows()))
        insert_rows(con, "alert_events", table_of("alert_events", journal.alert_events))
    restored, marked = [], []
    for number, bundle in enumerate(bundles, 1):
        say(f"restoring bundle {number} of {len(bundles)}: {bundle.session_id}")
        doubt = _unverifiable(bundle, journal)
        if doubt is not None and not unverified:
            skipped.append(Skipped(bundle.session_id, f"{doubt}; aaco restore --unverified "
                                   "restores it, marked unverified"))  # fmt: skip
            continue
        problem = _restore_session(lake, bundle, journal, paths.scratch, doubt)
        if problem is None:
            restored.append(bundle.session_id)
            marked += [bundle.session_id] if doubt else []
        else:
            skipped.append(Skipped(bundle.session_id, problem))
    baselines = journal.baseline_rows()
    if baselines:
        with lake.transaction() as con:
            insert_rows(con, "baselines", table_of("baselines", baselines))
    present = set(restored)
    for sweep in journal.sweeps:
        swept = [sid for sid in sweep["session_ids"] if sid in present]
        if swept:
            control_sweep(lake, swept, sweep["q"])
    return Restored(
        paths.tracelake,
        restored,
        len(baselines),
        len(journal.envelopes),
        skipped,
        marked,
        len(failed_folders(paths)),
        journal.unreadable_lines,
        LakeJournal(paths.tracelake).path if journal.found else None,
    )


def _bundles_in_order(paths: AacoPaths) -> tuple[list[SessionBundle], list[Skipped]]:
    """The published bundles to restore, oldest session first (as history orders them), and
    those that cannot be."""
    dated, skipped = [], []
    for folder in published_bundles(paths.sessions):
        bundle = SessionBundle(folder)
        if not bundle.has_tables():
            skipped.append(Skipped(bundle.session_id, "never collected: its run was stopped"))
        elif is_held(folder):
            skipped.append(Skipped(bundle.session_id, "in use by a running aaco process"))
        elif (started := _started_at(bundle)) is None:
            skipped.append(Skipped(bundle.session_id, "tables/sessions.parquet has no start time"))
        else:
            dated.append((started, bundle.session_id, bundle))
    dated.sort(key=lambda found: (found[0], found[1]))
    return [bundle for _, _, bundle in dated], skipped


def _started_at(bundle: SessionBundle) -> dt.datetime | None:
    """When the session started, as its row says (None when its table cannot tell)."""
    try:
        table = pq.read_table(bundle.table_path("sessions"), columns=["started_at"])
        return table["started_at"][0].as_py() if table.num_rows else None
    except (OSError, ValueError, KeyError):
        return None


def _unverifiable(bundle: SessionBundle, journal: JournalState) -> str | None:
    """Why the bundle cannot be shown to be the one loaded, when the journal has no record of
    it (None when it has: _restore_session then checks the bundle against that record)."""
    if bundle.session_id in journal.bundle_digests:
        return None
    if not journal.found:
        return "not verifiable: there is no journal beside the lake to check its bundle against"
    return "not verifiable: the journal has no record of its bundle (loaded before it kept them)"


def _restore_session(
    lake: TraceLake, bundle: SessionBundle, journal: JournalState, scratch: Path, doubt: str | None
) -> str | None:
    """One session verified, loaded and, unless the journal says it never was, analysed as it
    was; why it was skipped, or None. An error about the bundle (its manifest not the one the
    journal recorded, its evidence changed, a file of it unreadable) skips it, its rows
    removed; any other (the lake's disk full) stops the restore. `doubt`: why it cannot be
    verified, when restoring it unverified was asked for (it is marked so)."""
    try:
        if doubt is None:
            _check_against_journal(bundle, journal.bundle_digests[bundle.session_id])
        bundle.verify_evidence()
        bundle.verify_manifest(None)
        _load_and_analyse(lake, bundle, journal, scratch, doubt)
    except AacoInputError as exc:
        if not _about(exc, bundle):
            raise
        lake.delete_sessions([bundle.session_id])
        return exc.problem
    return None


def _check_against_journal(bundle: SessionBundle, recorded: str | None) -> None:
    """The bundle's manifest is the one the journal recorded when the session was loaded."""
    own = manifest_digest(bundle.path)
    if own == recorded:
        return
    if own is None:
        problem = f"its {MANIFEST} is missing; the journal recorded one when it was loaded"
    elif recorded is None:
        problem = f"it has a {MANIFEST} it did not have when it was loaded"
    else:
        problem = (
            f"its {MANIFEST} is not the one the journal recorded when it was loaded: the bundle "
            "was rewritten"
        )
    raise AacoInputError(
        problem,
        path=bundle.path,
        fix="restore the bundle's files from a backup, or measure the model again",
    )


def _about(exc: AacoInputError, bundle: SessionBundle) -> bool:
    """Whether an error names a file of the bundle (as given, or resolved)."""
    named = Path(exc.path) if exc.path else None
    return named is not None and any(
        named.is_relative_to(folder) for folder in (bundle.path, bundle.path.resolve())
    )


def _load_and_analyse(
    lake: TraceLake, bundle: SessionBundle, journal: JournalState, scratch: Path, doubt: str | None
) -> None:
    session_id = bundle.session_id
    analysed = session_id not in journal.not_analysed
    try:
        ingested = "ingested_from" in bundle.session
    except (OSError, ValueError) as exc:
        raise AacoInputError(f"session.json is unreadable ({exc})", path=bundle.path) from exc
    # vouch=False: the journal keeps what was vouched for when the session was first loaded
    if ingested:  # `aaco ingest` judges no measurement of its own: none to judge again
        load_session(
            lake, bundle, verify=False, complete=not analysed, scratch=scratch, vouch=False
        )
    else:
        load(lake, bundle, complete=not analysed, verify=False, scratch=scratch, vouch=False)
    if doubt is not None:  # marked before its drift is judged: no baseline rests on it
        lake.mark_unverified(session_id, doubt)
    if analysed:
        attribution = attribute(lake, bundle)
        find_critical_path(lake, bundle)
        envelope_id, envelope, note = judged_against(lake, session_id, journal)
        judge_against_envelope(
            lake, session_id, attribution.metrics, envelope_id, envelope, note=note
        )
        judge_drift(lake, bundle, alerts=False)  # the journal's alerts are the record


def judged_against(
    lake: TraceLake, session_id: str, journal: JournalState
) -> tuple[str | None, HardwareEnvelope | None, str | None]:
    """(envelope id, envelope, note) a restored session is judged against: those the journal
    recorded; for a session it does not know, a trace's GPU's as diagnose chooses it, or this
    host's stored envelope of the session's target and runtime. Never one measured now: the
    host restoring is not the host of then."""
    recorded = journal.judged_against.get(session_id)
    if recorded is not None:
        envelope_id = recorded.get("envelope_id")
        envelope = stored_envelope(lake, envelope_id) if envelope_id else None
        if envelope_id is None or envelope is not None:
            return envelope_id, envelope, recorded.get("note")
    session = lake.query(
        "SELECT target, runtime_fingerprint FROM session_records WHERE session_id = ?",
        [session_id],
    ).to_pylist()[0]
    if session["target"] == EXTERNAL_TARGET:  # never this host's, never measured
        choice = session_envelope(lake, session_id, session["target"])
        return choice.envelope_id, choice.envelope, choice.note
    found = latest_envelope(lake, session["target"], session["runtime_fingerprint"])
    if found is not None:
        return found[0], found[1], f"{found[1].describe()} (this host)"
    return None, None, NO_ENVELOPE_KEPT


def _remove_abandoned(target: Path) -> None:
    """Work folders of restores killed outright (kill -9): nobody else restores this lake
    while we hold its writer lock."""
    for folder in target.parent.glob(f".{target.name}{WORK_PREFIX}*"):
        shutil.rmtree(folder, ignore_errors=True)


def _put_in_place(built: Path, target: Path) -> None:
    """The built lake under its final name, never over another: a hard link is made or fails
    whole (where the file system has none, a rename after a last look)."""
    try:
        os.link(built, target)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            refuse_to_replace(target)
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        refuse_to_replace(target)
        os.replace(built, target)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"

"""What an interrupted run leaves behind: found on the next start, quarantined, reported.

A run that is killed (`kill -9`, a full disk, a lock timeout, a Dagster run terminated between
steps) can leave
- a staging folder under sessions/.staging/ (the worker's output, never published),
- a published bundle whose session never reached the TraceLake, or was loaded but never
  analysed (its rows stay invisible: readers only see completed sessions),
- temp files (`.*.tmp`, `.tables-*`) inside a bundle.

Whoever works on a session holds a shared flock on its folder while it works on it
(`session_folder_held`: each stage for its own work); the lock goes with the process, however
it ends. So a folder nobody holds is an orphan: staging at once (a few seconds of age rule out a run that has just created it), a
published but incomplete session once AACO_ORPHAN_GRACE_S have passed since its last change
(Dagster runs each step in its own process, so between steps nobody holds a live run's bundle;
the grace, an hour by default, also keeps a failed run's bundle for re-execution from failure).

`clean_leftovers` moves orphans to failed/<date>/<session_id>/ with a failure.json saying what
was found (evidence is kept, never ingested) and deletes the rows of incomplete sessions (and,
in a shared lake, the data files a killed writer left uncommitted); it runs at the start of
every new session. `find_leftovers` lists them for `aaco doctor`.

failed/ is pruned then too (`prune_failed`): oldest first, the folders older than
AACO_FAILED_KEEP_DAYS (14) and, while the rest is larger than AACO_FAILED_KEEP_GB GiB (2), the
oldest of the rest; never one changed in the last minute (being written now) or held.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.bundle.session_bundle import write_json
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError, Interrupted
from aaco_pipelines.foundation.stopping import stop_requested
from aaco_pipelines.tracelake.journal import LakeJournal
from aaco_pipelines.tracelake.store import TraceLake

GRACE_VARIABLE = "AACO_ORPHAN_GRACE_S"
DEFAULT_GRACE_S = 3600.0
STAGING_MIN_AGE_S = 5.0
FAILED_KEEP_DAYS = ("AACO_FAILED_KEEP_DAYS", 14.0)
FAILED_KEEP_GB = ("AACO_FAILED_KEEP_GB", 2.0)  # GiB
FAILED_MIN_AGE_S = 60.0  # a failed folder changed more recently may be being written
_held: dict[str, tuple[int, int]] = {}  # session id -> (locked folder descriptor, depth)


@dataclass(frozen=True)
class Leftover:
    session_id: str
    kind: str  # staging | not_loaded | not_analysed | temp_file
    path: Path
    age_s: float

    def line(self) -> str:
        what = {
            "staging": "an unfinished run's staging folder",
            "not_loaded": "a bundle whose session never reached the TraceLake",
            "not_analysed": "a session loaded but never analysed (invisible to readers)",
            "temp_file": "a temp file of an interrupted write",
        }[self.kind]
        return f"{what}: {self.path} ({self.age_s / 60:.0f} min old)"


def hold_session_folder(folder: Path, session_id: str) -> None:
    """Mark a session folder as worked on by this process until as many
    `release_session_folder` calls or exit (the lock follows the folder when it is renamed from
    staging into sessions/). Nested holds of one session count: the folder is let go by the
    outermost release."""
    if session_id in _held:
        fd, depth = _held[session_id]
        _held[session_id] = (fd, depth + 1)
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _held[session_id] = (fd, 1)


def release_session_folder(session_id: str) -> None:
    fd, depth = _held.pop(session_id, (None, 0))
    if depth > 1:
        _held[session_id] = (fd, depth - 1)
    elif fd is not None:
        os.close(fd)


@contextlib.contextmanager
def session_folder_held(folder: Path, session_id: str | None = None) -> Iterator[None]:
    """The folder held while the block works on it (each stage holds what it works on, and
    lets go when it is done: no hold crosses from one stage to the next)."""
    session_id = session_id or folder.name
    hold_session_folder(folder, session_id)
    try:
        yield
    finally:
        release_session_folder(session_id)


def is_held(folder: Path) -> bool:
    """Whether a live process holds the folder (this one included: a lock held through
    another descriptor conflicts too)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock just taken
    return False


def grace_s() -> float:
    try:
        return float(os.environ.get(GRACE_VARIABLE, DEFAULT_GRACE_S))
    except ValueError:
        return DEFAULT_GRACE_S


def find_leftovers(
    paths: AacoPaths, lake_sessions: dict[str, bool] | None, grace: float | None = None
) -> list[Leftover]:
    """Orphans under AACO_HOME. `lake_sessions` is {session_id: completed} from the TraceLake,
    None when it cannot be read (then only staging folders are judged); `grace` overrides
    AACO_ORPHAN_GRACE_S (the doctor lists every unfinished session nobody holds)."""
    now, grace = time.time(), grace_s() if grace is None else grace
    found = []
    for folder in _children(paths.sessions / ".staging"):
        age = now - folder.stat().st_mtime
        if age >= STAGING_MIN_AGE_S and not is_held(folder):
            found.append(Leftover(folder.name, "staging", folder, age))
    for folder in published_bundles(paths.sessions):
        age = now - _last_change(folder)
        if age < grace or is_held(folder):
            continue
        found += [Leftover(folder.name, "temp_file", temp, age) for temp in _temp_files(folder)]
        if lake_sessions is None or lake_sessions.get(folder.name):
            continue
        kind = "not_loaded" if folder.name not in lake_sessions else "not_analysed"
        found.append(Leftover(folder.name, kind, folder, age))
    return found


CLEANUP_LOCK_WAIT_S = 2.0


def clean_leftovers(paths: AacoPaths) -> list[Leftover]:
    """Quarantine every orphan (see the module docstring); what was done, one per orphan.
    Hygiene never stops a run: a TraceLake busy for more than a moment is judged next time."""
    keep_s, keep_bytes = failed_limits()  # a malformed limit stops the run before any work
    lake = TraceLake(paths.tracelake, CLEANUP_LOCK_WAIT_S, on_wait=lambda *_: None)
    states = lake_states(lake)
    found = find_leftovers(paths, states)
    abandoned = [o.session_id for o in found if o.kind in ("staging", "not_analysed")]
    for orphan in found:
        if orphan.kind == "temp_file":
            _remove(orphan.path)
        else:
            quarantine(orphan.path, paths, f"found by clean-up: {orphan.line()}")
    if states is not None:
        incomplete = [sid for sid, done in states.items() if not done and sid in abandoned]
        try:
            incomplete += _rows_without_bundle(paths, lake)
            if incomplete:
                lake.delete_sessions(incomplete)
            lake.delete_orphaned_files()
        except AacoInputError:  # busy: the rows stay invisible until the next clean-up
            pass
    prune_failed(paths, keep_s, keep_bytes)
    return found


def failed_limits() -> tuple[float, float]:
    """(seconds, bytes) failed/ keeps, from AACO_FAILED_KEEP_DAYS and AACO_FAILED_KEEP_GB."""
    days, gib = (_limit(*setting) for setting in (FAILED_KEEP_DAYS, FAILED_KEEP_GB))
    return days * 86400.0, gib * float(1 << 30)


def _limit(variable: str, default: float) -> float:
    text = os.environ.get(variable, "").strip()
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value >= 0.0 or value == float("inf"):
        raise AacoInputError(
            f"{variable} must be a number of {'days' if 'DAYS' in variable else 'GiB'} (0 or "
            f"more), not {text!r}",
            fix=f"set {variable}={default:g} (the default), or unset it",
        )
    return value


def prune_failed(paths: AacoPaths, keep_s: float, keep_bytes: float) -> list[Path]:
    """Delete failed/<date>/<session>/ folders, oldest first: those older than `keep_s`, then
    more while the rest holds more than `keep_bytes`; never one changed in the last
    FAILED_MIN_AGE_S or held by a live process. What was deleted."""
    now = time.time()
    changed = {folder: _mtime(folder) for folder in failed_folders(paths)}
    folders = sorted(changed, key=changed.get)
    sizes = {folder: _size(folder) for folder in folders}
    total, pruned = sum(sizes.values()), []
    for folder in folders:
        age = now - changed[folder]
        if age <= keep_s and total <= keep_bytes:
            break
        if age < FAILED_MIN_AGE_S or is_held(folder):
            continue
        _remove(folder)
        total -= sizes[folder]
        pruned.append(folder)
    _remove_empty_days(paths)
    return pruned


def failed_folders(paths: AacoPaths) -> list[Path]:
    """failed/<date>/<session_id>/ folders."""
    return [folder for day in _children(paths.failed_sessions) for folder in _children(day)]


def _mtime(folder: Path) -> float:
    """When the folder last changed; a folder gone meanwhile (another run's clean-up) counts
    as new, so it is left alone."""
    try:
        return folder.stat().st_mtime
    except OSError:
        return float("inf")


def _size(folder: Path) -> int:
    """Bytes of the files under a folder (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _remove_empty_days(paths: AacoPaths) -> None:
    """failed/<date>/ folders left empty; never today's, which a failing run may be entering."""
    today = dt.date.today().isoformat()
    for day in _children(paths.failed_sessions):
        if day.name != today:
            with contextlib.suppress(OSError):  # not empty
                day.rmdir()


def quarantine(folder: Path, paths: AacoPaths, reason: str, kind: str = "Interrupted") -> Path:
    """Move a session folder to failed/<date>/<id>/ with failure.json: kept, never ingested."""
    target = paths.failed_sessions / dt.date.today().isoformat() / folder.name
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder, target)
    for temp in _temp_files(target):
        _remove(temp)
    write_json(target / "failure.json", {"type": kind, "message": reason})
    return target


def abandon(folder: Path, paths: AacoPaths, lake, exc: BaseException) -> Path | None:
    """A session that failed after its bundle was published (a kill, a full disk, a lock
    timeout, bad data in analysis): its rows go (where the lake can be written now; else they
    stay invisible and the next clean-up removes them) and the bundle moves to failed/ with
    the reason. Returns where the evidence went, None where it could not be moved."""
    try:
        lake.delete_sessions([folder.name])
    except Exception:  # noqa: BLE001 - incomplete rows are invisible; clean-up retries
        pass
    try:
        target = quarantine(folder, paths, str(exc) or type(exc).__name__, type(exc).__name__)
    except OSError:
        return None
    if hasattr(exc, "evidence_dir"):
        exc.evidence_dir = str(target)
    return target


@contextlib.contextmanager
def quarantine_on_failure(folder: Path, paths: AacoPaths, lake) -> Iterator[None]:
    """The stages that take a published session to complete, in this process, with its folder
    held: on any failure or stop signal the folder is let go and the session abandoned."""
    try:
        with session_folder_held(folder):
            yield
    except BaseException as exc:
        name = stop_requested()
        if name is not None and not isinstance(exc, Interrupted):
            # a library caught the stop signal's exception and raised its own (DuckDB: "Query
            # interrupted"): the session was stopped, not broken
            stopped = Interrupted(name)
            abandon(folder, paths, lake, stopped)
            raise stopped from exc
        abandon(folder, paths, lake, exc)
        raise


def lake_states(lake) -> dict[str, bool] | None:
    """{session_id: completed} of every session row in the TraceLake; None when unreadable, or
    when the lake file is gone but its journal is there: a lake lost or moved aside, whose
    bundles are what `aaco restore` rebuilds it from, never orphans to quarantine. (No lake
    and no journal: no session has been loaded yet.)"""
    if not lake.exists():
        return None if LakeJournal(lake.path).path.exists() else {}
    try:
        return lake.session_states()
    except Exception:  # noqa: BLE001 - a lake that cannot be read now is judged next time
        return None


def _rows_without_bundle(paths: AacoPaths, lake) -> list[str]:
    """Incomplete sessions of this AACO_HOME whose bundle is gone (quarantined, deleted by
    hand). A lake shared by several homes keeps the others' sessions: their runs are theirs."""
    rows = lake.query(
        "SELECT session_id, bundle_path FROM session_records "
        "WHERE session_id NOT IN (SELECT session_id FROM completed_sessions)"
    ).to_pylist()
    return [
        row["session_id"]
        for row in rows
        if row["bundle_path"]
        and Path(row["bundle_path"]).is_relative_to(paths.sessions)
        and not Path(row["bundle_path"]).is_dir()
    ]


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
    except FileNotFoundError:
        return []


def published_bundles(sessions: Path) -> list[Path]:
    """sessions/<date>/<session_id>/ folders."""
    return [
        bundle
        for day in _children(sessions)
        if not day.name.startswith(".")
        for bundle in _children(day)
    ]


def _temp_files(bundle: Path) -> list[Path]:
    """What an interrupted atomic write leaves: `.name.tmp` files and `.tables-*` folders."""
    found = []
    for folder in (bundle, bundle / "tables"):
        if folder.is_dir():
            found += [
                p
                for p in folder.iterdir()
                if (p.name.startswith(".") and p.name.endswith(".tmp"))
                or p.name.startswith(".tables-")
            ]
    return sorted(found)


def _last_change(folder: Path) -> float:
    """The newest mtime of the folder, its tables/ and their direct entries."""
    times = [folder.stat().st_mtime]
    for sub in (folder, folder / "tables"):
        if sub.is_dir():
            times += [entry.stat().st_mtime for entry in os.scandir(sub)]
    return max(times)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)

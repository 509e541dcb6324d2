"""A session bundle's manifest: every file it holds with its size, mtime and sha256, so that a
change to any part of it (raw evidence, evidence.json, the tables/ that get loaded) is seen.

manifest.json lists every file of the bundle but itself. Whoever writes the bundle keeps it:
publishing records it whole, collection refreshes tables/. Its own sha256 goes into the
TraceLake's session row when the session is loaded (session_records.manifest_sha256): the lake
vouches for the manifest, the manifest for every file. Two depths of check:

- cheap (`aaco report`, `export`, `diff`, `doctor`): the manifest against the lake's digest,
  then each file's size and mtime; a file whose mtime alone differs is hashed (a copy that
  did not keep times is no change);
- full (`aaco verify`): every file hashed.

A session loaded before manifests has no digest in the lake: "not covered", passed by the
cheap check. A bundle folder that is not there at all (a lake shared with other hosts) is
passed by the cheap check and failed by `aaco verify`.

Which folder is checked: the session's folder in this AACO_HOME (sessions/<date>/<id>) when it
has one, else the path the lake recorded. The lake records absolute paths, so a copied home's
lake names the original's bundles: checking those would vouch for files the copy does not use.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.atomic_file import write_atomically

MANIFEST = "manifest.json"
_CHUNK = 8 << 20
_FORMAT = 1


def file_digest(path: Path) -> dict:
    """{"bytes", "sha256"} of a file, read in large chunks into one reused buffer."""
    digest, size = hashlib.sha256(), 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
            size += count
    return {"bytes": size, "sha256": digest.hexdigest()}


def write_manifest(folder: Path, known: dict[str, dict] | None = None) -> None:
    """manifest.json of every file of the folder; `known` digests (taken while copying) are
    not computed again."""
    known = known or {}
    _write(folder, {name: _entry(folder / name, known.get(name)) for name in _files(folder)})


def refresh_manifest(folder: Path, under: str) -> None:
    """After the files under `under` were replaced: their entries taken anew, every other one
    kept as recorded. A folder without a manifest (not published yet, or published before
    manifests) is left without one."""
    recorded = read_manifest(folder)
    if recorded is None:
        return
    kept = {name: entry for name, entry in recorded.items() if not _is_under(name, under)}
    fresh = {name: _entry(folder / name) for name in _files(folder) if _is_under(name, under)}
    _write(folder, kept | fresh)


def read_manifest(folder: Path) -> dict[str, dict] | None:
    """{relative path: {"bytes", "mtime_ns", "sha256"}}; None when there is no manifest."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        return _parse(path.read_bytes())
    except ValueError:
        raise AacoInputError(
            f"{MANIFEST} is not a manifest",
            path=path,
            fix="restore the bundle from a backup; `aaco verify` checks the others",
        ) from None


def manifest_digest(folder: Path) -> str | None:
    """The sha256 of the folder's manifest.json (what the TraceLake keeps); None without one."""
    path = folder / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def changes(folder: Path, digest: str, *, hashed: tuple[str, ...] = ()) -> list[str]:
    """What differs from the manifest whose sha256 is `digest`, one phrase each ("tables/
    sessions.parquet changed"); empty when nothing does. Files whose path starts with one of
    `hashed` ("" for all) are hashed; the others only when their mtime differs."""
    path = folder / MANIFEST
    if not path.is_file():
        return [f"{MANIFEST} is missing"]
    text = path.read_bytes()
    if hashlib.sha256(text).hexdigest() != digest:
        return [f"{MANIFEST} changed"]
    try:
        recorded = _parse(text)
    except ValueError:
        return [f"{MANIFEST} is not a manifest"]
    found = [
        _file_change(folder, name, entry, name.startswith(hashed))
        for name, entry in sorted(recorded.items())
    ]
    found += [f"{name} was added" for name in _files(folder) if name not in recorded]
    return [phrase for phrase in found if phrase]


@dataclass(frozen=True)
class BundleCheck:
    """One session's bundle against the manifest the TraceLake vouches for."""

    session_id: str
    bundle: str | None
    state: str  # ok | changed | not_covered | no_bundle | unverified
    changes: tuple[str, ...] = ()  # what changed; for `unverified`, why

    @property
    def failed(self) -> bool:
        """Failed for `aaco verify`: its evidence cannot be shown unchanged."""
        return self.state in ("changed", "no_bundle", "unverified")

    def line(self) -> str:
        if self.state == "unverified":
            return f"UNVERIFIED: restored without a record of its bundle ({self.changes[0]})"
        if self.state == "changed":
            more = f" (and {len(self.changes) - 1} more)" if len(self.changes) > 1 else ""
            return self.changes[0] + more
        return {
            "ok": "ok",
            "not_covered": "not covered (written before manifests)",
            "no_bundle": f"bundle not found ({self.bundle})",
        }[self.state]


SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a folder name, never a path


def home_bundle(sessions: Path, session_id: str) -> Path | None:
    """sessions/<date>/<session_id> in this home, when there is one (found by the session's
    id, never by a path a file names)."""
    if not SESSION_ID.fullmatch(session_id) or not sessions.is_dir():
        return None
    found = [day / session_id for day in sessions.iterdir() if (day / session_id).is_dir()]
    return found[0] if len(found) == 1 else None


def home_bundles(sessions: Path) -> dict[str, Path]:
    """{session_id: sessions/<date>/<session_id>} of every bundle in this home, in one listing
    (a session id found under two dates names neither)."""
    found: dict[str, list[Path]] = {}
    days = [d for d in sessions.iterdir() if d.is_dir()] if sessions.is_dir() else []
    for day in days:
        for folder in day.iterdir():
            if folder.is_dir() and SESSION_ID.fullmatch(folder.name):
                found.setdefault(folder.name, []).append(folder)
    return {sid: folders[0] for sid, folders in found.items() if len(folders) == 1}


def check_bundles(
    lake,
    session_ids: list[str] | None = None,
    *,
    full: bool = False,
    sessions: Path | None = None,
):
    """The BundleCheck of each of these sessions (every complete one when None), cheap or
    `full` (every file hashed). `lake`: a TraceLake (tracelake.store); `sessions`: this home's
    sessions folder, whose copy of a bundle is checked before the path the lake recorded."""
    recorded = lake.manifest_digests(session_ids)
    unverified = lake.unverified_sessions(session_ids)

    local = home_bundles(sessions) if sessions is not None else {}

    def folder(sid: str, path: str | None) -> str | None:
        return str(local[sid]) if sid in local else path

    return [
        BundleCheck(sid, folder(sid, path), "unverified", (unverified[sid],))
        if sid in unverified
        else check_bundle(sid, folder(sid, path), digest, full=full)
        for sid, (path, digest) in recorded.items()
    ]


def check_bundle(session_id: str, bundle: str | None, digest: str | None, *, full: bool):
    if digest is None:
        return BundleCheck(session_id, bundle, "not_covered")
    if not bundle or not Path(bundle).is_dir():
        return BundleCheck(session_id, bundle, "no_bundle")
    found = changes(Path(bundle), digest, hashed=("",) if full else ())
    return BundleCheck(session_id, bundle, "changed" if found else "ok", tuple(found))


def require_unchanged(lake, session_ids: list[str], sessions: Path | None = None) -> None:
    """Refuse to use the numbers of a session whose bundle changed since it was loaded (a
    report or a verdict would no longer follow back to its evidence): one line naming the
    session and the file. The cheap check."""
    for check in check_bundles(lake, session_ids, sessions=sessions):
        if check.state == "changed":
            raise AacoInputError(
                f"the evidence of session {check.session_id} changed since it was recorded "
                f"({check.line()}): its numbers are not used",
                path=check.bundle,
                fix="restore the bundle's files from a backup, or measure the model again; "
                f"`aaco verify {check.session_id}` hashes every file",
            )


def _entry(file: Path, known: dict | None = None) -> dict:
    stat = file.stat()
    if known is None or known["bytes"] != stat.st_size:
        known = file_digest(file)
    return {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": known["sha256"]}


def _file_change(folder: Path, name: str, entry: dict, hashed: bool) -> str | None:
    """A phrase when the file differs from its entry; None when it is as recorded."""
    if Path(name).is_absolute() or ".." in Path(name).parts:
        return f"{MANIFEST} names a path outside the bundle ({name!r})"
    file = folder / name
    if not file.is_file():  # gone, or no longer a regular file (never read: a FIFO blocks)
        return f"{name} is missing"
    stat = file.stat()
    if stat.st_size != entry["bytes"]:
        return f"{name} changed"
    if (hashed or stat.st_mtime_ns != entry["mtime_ns"]) and file_digest(file)["sha256"] != entry[
        "sha256"
    ]:
        return f"{name} changed"
    return None


def _files(folder: Path) -> list[str]:
    """Every file of the folder, relative, but the manifest and what a write in progress
    holds (`.name.tmp` files, `.tables-*` folders)."""
    return sorted(
        name
        for path in folder.rglob("*")
        if (name := path.relative_to(folder).as_posix()) != MANIFEST
        and not _in_flight(name)
        and path.is_file()
    )


def _in_flight(name: str) -> bool:
    return any(
        (part.startswith(".") and part.endswith(".tmp")) or part.startswith(".tables-")
        for part in name.split("/")
    )


def _is_under(name: str, folder: str) -> bool:
    return name.startswith(folder.rstrip("/") + "/")


def _write(folder: Path, entries: dict[str, dict]) -> None:
    text = json.dumps({"format": _FORMAT, "files": entries}, indent=1, sort_keys=True)
    write_atomically(folder / MANIFEST, text)


def _parse(text: bytes) -> dict[str, dict]:
    """The manifest's entries; ValueError when the text is not a manifest."""
    try:
        files = json.loads(text)["files"]
        whole = all(
            isinstance(entry["bytes"], int)
            and isinstance(entry["mtime_ns"], int)
            and isinstance(entry["sha256"], str)
            for entry in files.values()
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a manifest: {exc}") from exc
    if not whole:
        raise ValueError("not a manifest: an entry lacks bytes, mtime_ns or sha256")
    return files

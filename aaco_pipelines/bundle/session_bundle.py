"""The session bundle: the immutable on-disk evidence of one measured session.

    sessions/<YYYY-MM-DD>/<session_id>/
      request.json          what was asked (model, inputs, iterations, providers, limits)
      session.json          what happened (passes with their times, providers used, outcome)
      env.json              the environment the worker measured in
      worker.log            everything the worker and ONNX Runtime printed
      latencies.json        raw per-iteration latencies (ns) of every pass
      ort_profile.json      ONNX Runtime's own profile of the profiled pass
      optimized_model.onnx  the graph after ONNX Runtime's fusions (for attribution)
      host_samples.parquet  raw host counters sampled during the run
      graph/                the graph extraction of the exact model file (nodes, edges, summary)
      rocprof/              rocprofv3's output of the traced pass (GPU hosts; or raw/ for an
                            ingested trace)
      evidence.json         sha256 and size of every file above, taken when the bundle was
                            published and checked whenever the bundle is loaded again
      tables/               normalized TraceLake tables, written by collection; a device trace
                            is not copied into them but named by tables/device_trace.json and
                            loaded from its raw file straight into the TraceLake
      manifest.json         size, mtime and sha256 of every other file, tables/ included; its
                            own sha256 is kept in the TraceLake (aaco_pipelines.bundle.manifest)

Raw files are written once, by the run, and never modified; `tables/` is derived from them and
can be rebuilt at any time (replaced whole, never edited). A bundle only appears under sessions/
once the run succeeded: work in progress lives under sessions/.staging/ and failures are moved
to failed/ with their evidence. One permission rule for every part: files read-only (0444),
folders 0755, both less the umask (so a private umask keeps bundles private).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import mmap
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aaco_pipelines.bundle.manifest import (
    MANIFEST,
    changes,
    file_digest,
    manifest_digest,
    refresh_manifest,
    write_manifest,
)
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.atomic_file import replacing, write_atomically
from aaco_pipelines.foundation.redaction import redact, redact_values

DEVICE_TRACE = "device_trace.json"
EVIDENCE = "evidence.json"
FILE_MODE, FOLDER_MODE = 0o444, 0o755  # of every bundle part, less the umask
_CHUNK = 8 << 20
_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
# Derived from the evidence and rebuilt at will, so not part of it.
_DERIVED = ("tables",)


@dataclass(frozen=True)
class SessionBundle:
    path: Path

    @property
    def session_id(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    def optimized_model(self):
        """The graph ONNX Runtime ran (an onnx.ModelProto, structure only, its weights left
        out), when the bundle has it: attribution and the critical path read its nodes."""
        import onnx

        path = self.file("optimized_model.onnx")
        return onnx.load(str(path), load_external_data=False) if path.is_file() else None

    def read_json(self, name: str) -> dict:
        return json.loads(self.file(name).read_text())

    @property
    def session(self) -> dict:
        return self.read_json("session.json")

    @property
    def request(self) -> dict:
        return self.read_json("request.json")

    @property
    def environment(self) -> dict:
        return self.read_json("env.json")

    @property
    def graph_dir(self) -> Path:
        return self.path / "graph"

    @property
    def tables_dir(self) -> Path:
        return self.path / "tables"

    def table_path(self, table: str) -> Path:
        return self.tables_dir / f"{table}.parquet"

    def has_tables(self) -> bool:
        return (self.tables_dir / "_COMPLETE").is_file()

    @property
    def device_trace(self) -> dict | None:
        """{"path": bundle-relative trace file or folder, "iteration": int | None}, when the
        session has a device trace to load into the TraceLake."""
        manifest = self.tables_dir / DEVICE_TRACE
        return json.loads(manifest.read_text()) if manifest.is_file() else None

    def write_tables(self, tables: dict[str, pa.Table], device_trace: dict | None = None) -> None:
        """Replace tables/ as a whole: written beside it, then swapped in, never half there;
        the manifest then lists the new files."""
        staging = Path(tempfile.mkdtemp(prefix=".tables-", dir=self.path))
        try:
            for name, table in tables.items():
                pq.write_table(table, staging / f"{name}.parquet", compression="zstd")
            if device_trace is not None:
                (staging / DEVICE_TRACE).write_text(json.dumps(device_trace, sort_keys=True))
            (staging / "_COMPLETE").write_text(json.dumps(sorted(tables)))
            set_modes(staging, *staging.iterdir())  # mkdtemp's folder is 0700
            if self.tables_dir.exists():
                shutil.rmtree(self.tables_dir)
            os.replace(staging, self.tables_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._refresh_manifest()

    def add_tables(self, tables: dict[str, pa.Table]) -> None:
        """Add or replace single tables in tables/ (rows derived once the trace is loaded),
        each file swapped in whole."""
        for name, table in tables.items():
            with replacing(self.table_path(name)) as partial:
                pq.write_table(table, partial, compression="zstd")
                set_modes(partial)
        listed = json.loads((self.tables_dir / "_COMPLETE").read_text())
        complete = self.tables_dir / "_COMPLETE"
        write_atomically(complete, json.dumps(sorted({*listed, *tables})))
        set_modes(complete)
        self._refresh_manifest()

    def _refresh_manifest(self) -> None:
        refresh_manifest(self.path, "tables")
        if (self.path / MANIFEST).is_file():
            set_modes(self.path / MANIFEST)

    def read_table(self, table: str) -> pa.Table:
        return pq.read_table(self.table_path(table))

    def inside(self, relative: str) -> Path:
        """A path a bundle file names (device_trace.json's), refused when it leads outside the
        bundle: a file's content is data, never a way out of its folder."""
        target = (self.path / relative).resolve()
        if not target.is_relative_to(self.path.resolve()):
            raise AacoInputError(
                f"the bundle names a path outside itself ({relative!r})",
                path=self.path,
                fix="the bundle was edited by hand; restore it or re-ingest the trace",
            )
        return target

    def verify_evidence(self) -> None:
        """Every file recorded when the bundle was published still has its size and sha256:
        raw evidence that changed since (a trace appended to, a profile edited) is refused."""
        manifest = self.path / EVIDENCE
        if not manifest.is_file():
            return  # published before evidence was recorded
        recorded = json.loads(manifest.read_text())
        for relative, expected in sorted(recorded.items()):
            file = self.inside(relative)
            actual = file_digest(file) if file.is_file() else None
            if actual != expected:
                raise AacoInputError(
                    f"raw evidence {relative} changed since the session was recorded "
                    f"({'missing' if actual is None else 'different content'})",
                    path=file,
                    fix="restore the original file; a changed trace is new evidence: "
                    "ingest it as a new session",
                )

    def verify_manifest(self, recorded: str | None) -> None:
        """At a load: the bundle agrees with its own manifest (tables/, what gets loaded, and
        evidence.json hashed; raw files are hashed by verify_evidence). A bundle missing the
        manifest the TraceLake has a digest of (`recorded`) was tampered with."""
        own = manifest_digest(self.path)
        if own is not None:
            found = changes(self.path, own, hashed=("tables/", EVIDENCE))
        elif recorded is not None:
            found = [f"{MANIFEST} is missing"]
        else:
            return  # published before manifests
        if found:
            raise AacoInputError(
                f"the bundle changed since the session was recorded ({found[0]})",
                path=self.path,
                fix="restore the bundle's files from a backup, or measure the model again",
            )


def record_evidence(folder: Path, known: dict[str, dict] | None = None) -> None:
    """Write evidence.json (the size and sha256 of every raw file of a bundle about to be
    published; tables/ is derived and left out) and the manifest of every file; `known`
    digests, taken while copying, are not computed twice. Every part then gets the bundle's
    modes, whatever mode the tools that wrote it chose (mkdtemp's 0700, a snapshot's 0600)."""
    known = known or {}
    digests = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = file.relative_to(folder).as_posix()
        if relative in (EVIDENCE, MANIFEST) or relative.split("/")[0] in _DERIVED:
            continue
        digests[relative] = known.get(relative) or file_digest(file)
    write_json(folder / EVIDENCE, digests)
    write_manifest(folder, digests)
    set_modes(folder, *folder.rglob("*"))


def set_modes(*paths: Path) -> None:
    """The bundle's permission rule on each part: a file read-only (0444), a folder 0755, less
    the umask (the owner always keeps reading, and entering folders)."""
    mask = _umask()
    for path in paths:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(FOLDER_MODE & ~mask | 0o700)
        else:
            path.chmod(FILE_MODE & ~mask | 0o400)


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells (/proc), else set and
    set back at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def copy_with_digest(source: Path, target: Path, stop: threading.Event | None = None) -> dict:
    """Copy a regular file and hash it: the bundle's own copy of a trace, so nothing done to the
    original later changes the evidence. Where the file system shares blocks copy-on-write (XFS,
    btrfs) the copy is a clone: no time, no space. Elsewhere each chunk is read once into one
    page-aligned buffer, hashed there and written past the page cache (O_DIRECT) where the file
    system allows: the TraceLake reads the original at the same time, and caching a 2.8 GB copy
    cost this VM 4.8-7 s of system time (new page-cache pages) against 0.5-0.9 s written direct.
    `stop` ends it between chunks (InterruptedError), for a copy made beside other work."""
    digest, size, stop = hashlib.sha256(), 0, stop or threading.Event()
    with open(source, "rb", buffering=0) as reader, open(target, "xb", buffering=0) as writer:
        if _clone(reader, writer):
            return file_digest(target)
        buffer = mmap.mmap(-1, _CHUNK)
        view = memoryview(buffer)
        direct = _set_direct(writer, True)
        while count := reader.readinto(buffer):
            digest.update(view[:count])
            size += count
            direct = _write_all(writer, view[:count], direct)
            _check(stop)
    return {"bytes": size, "sha256": digest.hexdigest()}


def _clone(reader, writer) -> bool:
    """Make `writer` share `reader`'s blocks copy-on-write (Linux's FICLONE), if the file
    system can: later writes to either file leave the other as it was."""
    try:
        fcntl.ioctl(writer, _FICLONE, reader.fileno())
    except OSError:  # EOPNOTSUPP (ext4, tmpfs), EXDEV (two file systems), ENOTTY (not Linux)
        return False
    return True


def _set_direct(writer, on: bool) -> bool:
    """Switch direct I/O on or off for a file being written; whether it is now on (not where
    the file system, or the platform, has none)."""
    flag = getattr(os, "O_DIRECT", 0)  # Linux only
    if not flag:
        return False
    flags = fcntl.fcntl(writer, fcntl.F_GETFL)
    try:
        fcntl.fcntl(writer, fcntl.F_SETFL, flags | flag if on else flags & ~flag)
    except OSError:
        return False
    return on


def _write_all(writer, data: memoryview, direct: bool) -> bool:
    """Write all of `data`; a direct write the device cannot take (EINVAL: a tail that is not a
    whole block, an offset a short write left unaligned) goes through the page cache instead,
    and so does the rest of the file. Returns whether writes are still direct."""
    while data:
        try:
            written = writer.write(data)
        except OSError as exc:
            if not (direct and exc.errno == errno.EINVAL):
                raise
            direct = _set_direct(writer, False)
            continue
        data = data[written:]
    return direct


def _check(stop: threading.Event) -> None:
    if stop.is_set():
        raise InterruptedError("the copy was stopped")


def copy_folder(source: Path, target: Path) -> None:
    """Copy a folder file by file. The first write that fails raises its own OSError, errno
    kept, so a full disk is named as one (errors.out_of_space): shutil.copytree gathers every
    failure into one shutil.Error that carries no errno."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.rglob("*")):
        copy = target / path.relative_to(source)
        if path.is_dir():
            copy.mkdir(parents=True, exist_ok=True)
        else:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename, none left on a failure) so a reader never
    sees half a file. Its strings are redacted: a failure's message may quote a connection
    string."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    if redact(text) != text:  # rare: walk the values only then (latencies are long lists)
        text = json.dumps(redact_values(data), indent=2, sort_keys=True, default=str)
    write_atomically(path, text)

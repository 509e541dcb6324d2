"""Model versions: a registry file frozen at one content hash, with its graph extracted once.

The registry file may be overwritten at any time, so the first stage copies it to
`models/<sha256>.onnx` (hashing the copy, not the original) and every later stage measures that
exact copy. The graph extraction is stored beside it in `graphs/<sha256>/`; both are immutable and
shared by every session of that version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import out_of_space
from aaco_pipelines.registry.external_data import external_files, model_sha256
from aaco_pipelines.registry.scan import RegisteredModel, file_sha256
from aaco_pipelines.registry.sidecar import (
    InputSpec,
    ModelSidecar,
    input_specs_from_json,
    parse_sidecar,
)

SNAPSHOT_TEMP_PREFIX = ".incoming-"  # models/.incoming-*.tmp: a snapshot being copied
SNAPSHOT_MODEL_NAME = "model.onnx"  # the model file in a snapshot folder (external weights)


@dataclass(frozen=True)
class ModelVersion:
    name: str
    slug: str
    sha256: str
    snapshot_path: Path  # models/<sha256>.onnx: the exact file that is measured
    registry_path: Path
    sidecar_path: Path | None
    sidecar: ModelSidecar
    input_specs: dict[str, InputSpec]
    graph_dir: Path
    generation: dict | None = None  # a decoder's generation plan (generation.decoder_io)

    def to_record(self) -> dict:
        """Plain JSON-able form, for passing between pipeline stages and processes."""
        return {
            "name": self.name,
            "slug": self.slug,
            "sha256": self.sha256,
            "snapshot_path": str(self.snapshot_path),
            "registry_path": str(self.registry_path),
            "sidecar_path": str(self.sidecar_path) if self.sidecar_path else None,
            "sidecar": self.sidecar.to_dict(),
            "graph_dir": str(self.graph_dir),
            "input_specs": {
                name: dataclasses.asdict(spec) for name, spec in self.input_specs.items()
            },
            "generation": self.generation,
        }

    @classmethod
    def from_record(cls, record: dict) -> ModelVersion:
        sidecar_path = Path(record["sidecar_path"]) if record["sidecar_path"] else None
        sidecar = parse_sidecar(record["sidecar"], sidecar_path or Path(record["registry_path"]))
        return cls(
            name=record["name"],
            slug=record["slug"],
            sha256=record["sha256"],
            snapshot_path=Path(record["snapshot_path"]),
            registry_path=Path(record["registry_path"]),
            sidecar_path=sidecar_path,
            sidecar=sidecar,
            input_specs=input_specs_from_json(record["input_specs"]),
            graph_dir=Path(record["graph_dir"]),
            generation=record.get("generation"),
        )


@contextlib.contextmanager
def writing_store(paths: AacoPaths, model: RegisteredModel) -> Iterator[None]:
    """Writes into models/ and graphs/, under a shared lock on models/ held until they are done.

    Every write goes to a temp file or folder beside its target and is renamed into place, so a
    target is complete or absent. A process killed mid-write leaves its temp behind and its lock
    goes with it: whoever finds the lock free of other writers removes those temps first. A full
    or read-only disk becomes one line naming AACO_HOME.
    """
    try:
        store = paths.home / "models"
        store.mkdir(parents=True, exist_ok=True)
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _alone(fd):
                _remove_partial_writes(paths)
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)
    except OSError as exc:
        where = OSError(exc.errno, exc.strerror, f"the measured copy of {model.path.name}")
        problem = out_of_space(where, paths.home)
        if problem is None:
            raise
        raise problem from exc


def _alone(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _remove_partial_writes(paths: AacoPaths) -> None:
    """Temp files of model snapshots and temp folders of graphs (GraphExtract.save's)."""
    for temp in (paths.home / "models").glob(f"{SNAPSHOT_TEMP_PREFIX}*"):
        if temp.is_dir():
            shutil.rmtree(temp, ignore_errors=True)
        else:
            temp.unlink(missing_ok=True)
    for temp in paths.graphs.glob(".*"):
        shutil.rmtree(temp, ignore_errors=True)


def remove_snapshot(snapshot: Path) -> None:
    """A snapshot file, or the folder of a snapshot with external weights."""
    if snapshot.name == SNAPSHOT_MODEL_NAME:
        shutil.rmtree(snapshot.parent, ignore_errors=True)
    else:
        snapshot.unlink(missing_ok=True)


def stored_snapshot(store: Path, sha256: str) -> Path | None:
    """The snapshot of a content hash in the store (one file, or a folder's model.onnx with its
    external weights), None when the store has none. The hash is checked to be one, so a hash
    read from a file cannot name a path outside the store."""
    if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
        return None
    for candidate in (store / f"{sha256}.onnx", store / sha256 / SNAPSHOT_MODEL_NAME):
        if candidate.is_file():
            return candidate
    return None


def snapshot_model_file(source: Path, store: Path) -> tuple[Path, str]:
    """Copy `source` into the content-addressed store; returns (snapshot path, sha256).

    A model with external weight files becomes a folder, `<sha256>/model.onnx` with its files
    beside it as the model names them (ONNX Runtime reads them relative to the model); other
    models stay one file, `<sha256>.onnx`. An existing snapshot file of another size is a
    partial copy (from a writer that did not rename into place) and is replaced."""
    store.mkdir(parents=True, exist_ok=True)
    files = external_files(source)  # refused here, naming the user's model, before any copy
    if files:
        return _snapshot_with_weights(source, files, store)
    fd, tmp_name = tempfile.mkstemp(prefix=SNAPSHOT_TEMP_PREFIX, suffix=".tmp", dir=store)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copyfile(source, tmp)
        sha = file_sha256(tmp)
        target = store / f"{sha}.onnx"
        if target.is_file() and target.stat().st_size == tmp.stat().st_size:
            tmp.unlink()
        else:
            os.replace(tmp, target)
        return target, sha
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _snapshot_with_weights(source: Path, files: list[str], store: Path) -> tuple[Path, str]:
    """The model and its external files copied into a temp folder, hashed there (the copies,
    not the originals, which may change meanwhile) and renamed into place whole."""
    tmp = Path(tempfile.mkdtemp(prefix=SNAPSHOT_TEMP_PREFIX, suffix=".tmp", dir=store))
    try:
        shutil.copyfile(source, tmp / SNAPSHOT_MODEL_NAME)
        for location in files:
            (tmp / location).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source.parent / location, tmp / location)
        sha = model_sha256(tmp / SNAPSHOT_MODEL_NAME)
        target = store / sha
        if (target / SNAPSHOT_MODEL_NAME).is_file():
            shutil.rmtree(tmp)  # a folder is renamed in whole: one that exists is complete
        else:
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        return target / SNAPSHOT_MODEL_NAME, sha
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

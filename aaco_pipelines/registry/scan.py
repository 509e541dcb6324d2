"""Scanning the registry folder: which models exist, their partition slugs and content hashes.

A model's identity is its name (the file stem), and its slug is the key of its Dagster partition
and of its drift series in the TraceLake, so the slug must depend on the name alone and never on
which other files exist (otherwise adding a file could rename another model's partition and hand
it that model's history). The rule:

- a name in ASCII keeps the slug it always had: lowercase, every run of characters outside
  [a-z0-9_] becomes `_` (`ResNet-50` -> `resnet_50`), so every existing series keeps its key;
- a name with any other character (`模型`, `Café`, `net🚀`) would lose what tells it apart, so
  its slug ends in the first 8 hex digits of the sha256 of its NFC form, after what is left of
  it in ASCII (`模型` -> `model_c98e118e`, `网络` -> `model_97b31b5d`, `Café` -> `cafe_73473dcc`);
- a name longer than MAX_SLUG_CHARS keeps a prefix and the same hash, so a slug always fits in
  a file name (session ids and folders are built from it).

Two registry files whose names still give one slug (`Foo-Bar.onnx` and `foo_bar.onnx`) are
ambiguous: neither is measured and both are reported (`slug_conflicts`) until one is renamed;
neither takes the other's key.

Each file is checked on its own (`read_registry`): one that cannot be measured (two files of
one slug, external data named wrongly, an offset that is not a number, a sidecar that would be
refused, an unreadable file) is reported with its fix and skipped. It never stops the scan, so
`aaco registry list`, `aaco run` of another model, `aaco sweep` and the registry sensor go on
with every other model.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.external_data import hashed_model, model_sha256
from aaco_pipelines.registry.sidecar import load_sidecar, sidecar_path_for

_UNSAFE = re.compile(r"[^a-z0-9_]+")
MAX_SLUG_CHARS = 100
NAME_HASH_CHARS = 8


@dataclass(frozen=True)
class RegisteredModel:
    name: str  # file stem as the user wrote it
    slug: str  # safe partition key
    path: Path
    sha256: str
    sidecar: Path | None


def model_slug(name: str) -> str:
    """A safe Dagster partition key for a model name: lowercase [a-z0-9_], never empty, the same
    for the same name wherever it is used (see the module's rule).

    Dynamic partition keys are never validated and `|`, `,` or `/` break multi-partition parsing,
    so everything outside [a-z0-9_] collapses to `_`.
    """
    name = unicodedata.normalize("NFC", name)
    if name.isascii():
        slug = _safe(name)
        if len(slug) <= MAX_SLUG_CHARS:
            return slug
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    prefix = _safe(ascii_name)[: MAX_SLUG_CHARS - NAME_HASH_CHARS - 1].rstrip("_")
    return f"{prefix}_{hashlib.sha256(name.encode()).hexdigest()[:NAME_HASH_CHARS]}"


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name.lower()).strip("_") or "model"


def file_sha256(path: Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def registered_model(path: Path, slug: str | None = None) -> RegisteredModel:
    """One model file as the registry sees it (also for files outside the registry)."""
    path = path.absolute()
    return RegisteredModel(
        name=path.stem,
        slug=slug or model_slug(path.stem),
        path=path,
        sha256=model_sha256(path),
        sidecar=sidecar_path_for(path),
    )


@dataclass(frozen=True)
class RegistryScan:
    """What the registry folder holds: the models that can be measured, sorted by slug, and,
    for each other model file, why not (the error naming the file and the fix)."""

    models: list[RegisteredModel]
    problems: dict[str, AacoInputError]  # slug -> why that model is not measured


def read_registry(registry: Path) -> RegistryScan:
    """Every `*.onnx` file in the registry folder (not recursive), each checked on its own.

    Other files (sidecars, notes, partial downloads) are ignored; a model file that cannot be
    measured is in `problems`, never an exception that would hide every other model."""
    models, problems = [], {}
    for slug, files in sorted(_files_by_slug(registry).items()):
        if len(files) > 1:
            problems[slug] = _conflict(slug, files, registry)
            continue
        try:
            models.append(checked_model(files[0]))
        except AacoInputError as exc:
            problems[slug] = exc
    return RegistryScan(models, problems)


def scan_registry(registry: Path) -> list[RegisteredModel]:
    """The registry's models that can be measured, sorted by slug (`read_registry`)."""
    return read_registry(registry).models


def checked_model(path: Path) -> RegisteredModel:
    """A registry file as `registered_model` sees it, refused (one AacoInputError naming it and
    the fix) when it could not be measured: an unreadable file, external data named wrongly,
    or a sidecar the measurement would refuse. Said now, the model is skipped and reported
    instead of failing a run later."""
    try:
        sha, problem = hashed_model(path)
    except OSError as exc:
        raise AacoInputError(
            f"the model file cannot be read ({exc.strerror or exc})",
            path=path,
            fix="make it readable by the user aaco runs as, or take it out of the registry",
        ) from None
    if problem is not None:
        raise problem
    load_sidecar(path)
    path = path.absolute()
    return RegisteredModel(
        name=path.stem, slug=model_slug(path.stem), path=path, sha256=sha,
        sidecar=sidecar_path_for(path),
    )  # fmt: skip


def slug_conflicts(registry: Path) -> dict[str, AacoInputError]:
    """{slug: the error naming every file that claims it} for slugs several files claim."""
    return {
        slug: _conflict(slug, files, registry)
        for slug, files in sorted(_files_by_slug(registry).items())
        if len(files) > 1
    }


def _conflict(slug: str, files: list[Path], registry: Path) -> AacoInputError:
    return AacoInputError(
        f"{' and '.join(f.name for f in files)} are both model '{slug}', so neither is measured",
        path=registry,
        fix="rename all but one of them (the file name is the model's identity)",
    )


def _files_by_slug(registry: Path) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    if registry.is_dir():
        for path in sorted(registry.glob("*.onnx")):
            if path.is_file():
                groups.setdefault(model_slug(path.stem), []).append(path)
    return groups


def find_model(registry: Path, slug: str) -> RegisteredModel:
    """The registry model of this slug, checked like the scan checks it; only its own file is
    read, so a bad file elsewhere in the registry never stops it."""
    files = _files_by_slug(registry).get(slug, [])
    if len(files) > 1:
        raise _conflict(slug, files, registry)
    if files:
        return checked_model(files[0])
    raise not_in_registry(slug, registry)


def not_in_registry(slug: str, registry: Path) -> AacoInputError:
    """The error for a model the registry lacks: most often a misspelling (the closest name
    then comes first), else a model taken out of the registry that a partition still names."""
    names = {s: files[0].stem for s, files in _files_by_slug(registry).items()}
    close = spelled_like(slug, names)
    if close is not None:
        fix = f"did you mean {names[close]!r}? (aaco registry list names every model)"
    elif names:
        fix = (
            f"choose one of the {len(names)} models aaco registry list names; a model taken "
            "out of the registry: put its .onnx file back, or delete its partition in the "
            "Dagster UI"
        )
    else:
        fix = "the registry is empty: aaco zoo build writes the bundled zoo, or add .onnx files"
    return AacoInputError(f"no model {slug!r} in the registry", path=registry, fix=fix)


def spelled_like(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to `name` when one is close enough to be a misspelling of it
    (difflib's ratio at least 0.6: `bert_encodr` -> `bert_encoder`), else None."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return close[0] if close else None

"""One drift series per model: a slug already holding another model's sessions is refused.

`model_slug` keeps different names apart, but not every pair (`Foo-Bar` and `foo_bar` give one
slug), and sessions measured before its hash rule may hold a slug that a new name now gives. A
session added to another model's series would be compared with that model's history and could
raise a false regression, so before a session is measured or ingested its slug is checked
against the model names the TraceLake already holds under it. The check lives here, called by
the pipeline before each benchmark (so `aaco run` and the Dagster assets both get it) and by
`aaco ingest` when it picks the slug.

A model's identity is its registry entry, not its file name: `model_at` gives a model file
passed by path (`aaco run --model PATH`) the registry entry's series only when the file is
that entry, and a series of its own otherwise.
"""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.scan import (
    MAX_SLUG_CHARS,
    NAME_HASH_CHARS,
    RegisteredModel,
    find_model,
    model_slug,
    registered_model,
)

OWNERS_SQL = """
SELECT DISTINCT model_name FROM sessions
WHERE model_slug = ? AND model_name IS NOT NULL ORDER BY model_name
"""


def check_series_owner(tracelake: Path, slug: str, name: str, model_file: Path) -> None:
    """Refuse to add a session of model `name` under `slug` when the TraceLake's sessions under
    that slug belong to another model name; `model_file` is the user's file the error names."""
    owners = _series_owners(tracelake, slug)
    others = [owner for owner in owners if _same_name(owner) != _same_name(name)]
    if others:
        raise AacoInputError(
            f"model '{name}' would share the drift series '{slug}' with model '{others[0]}', "
            "whose sessions it already holds, and be judged against that model's history",
            path=model_file,
            fix="rename the model file, or pass another --name to aaco ingest",
        )


def claim_series(tracelake: Path, name: str, source: Path) -> str:
    """The slug of model `name` once `check_series_owner` allows it (for `aaco ingest`, whose
    session is stored under exactly this name)."""
    slug = model_slug(name)
    check_series_owner(tracelake, slug, name, source)
    return slug


def model_at(path: Path, registry: Path) -> RegisteredModel:
    """The model a file given by path is: the registry's entry when the file is in the registry
    folder (checked as the scan checks it, in that entry's series), else a model of its own.

    A file outside the registry with a registry model's name (`/elsewhere/bert.onnx`) is most
    often another export, quantization or candidate of it, or another model altogether. Put in
    the entry's series, it would be judged against that history and raise a false regression
    (or hide a real one). Refusing it would make every quick look at a candidate need a rename,
    so it is measured in a series of its own: `outside_slug`. The digest is of where the file
    is, not of its bytes, so editing a candidate in place and measuring it again continues its
    own history (each content is a version, as in the registry), while a copy elsewhere starts
    another. Every file outside gets its own series, not only one whose name a registry model
    has now: a model added to the registry later would otherwise inherit its sessions. To
    measure a file as the registry model's next version, put it in the registry.

    The registry's own file may be a link (to a store of large weights), and a link elsewhere
    may name a registry file: both are that entry."""
    path = path.absolute()
    folder = registry.resolve()
    for named in (path.parent.resolve() / path.name, path.resolve()):
        if named.parent == folder:
            return find_model(registry, model_slug(named.stem))
    return registered_model(path, outside_slug(path))


def outside_slug(path: Path) -> str:
    """The series of a model file outside the registry: its name's slug, then the first 8 hex
    digits of the sha256 of its resolved path (`bert` -> `bert_3fa2c1d0`), within the slug
    length limit. Stable for the file, never a registry entry's."""
    where = str(path.resolve()).encode("utf-8", "surrogateescape")
    digest = hashlib.sha256(where).hexdigest()[:NAME_HASH_CHARS]
    prefix = model_slug(path.stem)[: MAX_SLUG_CHARS - NAME_HASH_CHARS - 1].rstrip("_")
    return f"{prefix}_{digest}"


def _series_owners(tracelake: Path, slug: str) -> list[str]:
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(tracelake)
    if not lake.exists():
        return []
    return lake.query(OWNERS_SQL, [slug])["model_name"].to_pylist()


def _same_name(name: str) -> str:
    """Names compare in NFC: macOS file systems hand back `Café` decomposed."""
    return unicodedata.normalize("NFC", name)

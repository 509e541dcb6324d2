"""One drift series per model: a slug already holding another model's sessions is refused.

`model_slug` keeps different names apart, but not every pair (`Foo-Bar` and `foo_bar` give one
slug), and sessions measured before its hash rule may hold a slug that a new name now gives. A
session added to another model's series would be compared with that model's history and could
raise a false regression, so before a session is measured or ingested its slug is checked
against the model names the TraceLake already holds under it. The check lives here, called by
the pipeline before each benchmark (so `aaco run` and the Dagster assets both get it) and by
`aaco ingest` when it picks the slug.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.scan import model_slug

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


def _series_owners(tracelake: Path, slug: str) -> list[str]:
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(tracelake)
    if not lake.exists():
        return []
    return lake.query(OWNERS_SQL, [slug])["model_name"].to_pylist()


def _same_name(name: str) -> str:
    """Names compare in NFC: macOS file systems hand back `Café` decomposed."""
    return unicodedata.normalize("NFC", name)

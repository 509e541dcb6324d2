"""Scanning the registry folder: which models exist, their partition slugs and content hashes."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.sidecar import sidecar_path_for

_UNSAFE = re.compile(r"[^a-z0-9_]+")


@dataclass(frozen=True)
class RegisteredModel:
    name: str  # file stem as the user wrote it
    slug: str  # safe partition key
    path: Path
    sha256: str
    sidecar: Path | None


def model_slug(name: str) -> str:
    """A safe Dagster partition key for a model name: lowercase [a-z0-9_], never empty.

    Dynamic partition keys are never validated and `|`, `,` or `/` break multi-partition parsing,
    so everything outside [a-z0-9_] collapses to `_`.
    """
    slug = _UNSAFE.sub("_", name.lower()).strip("_")
    return slug or "model"


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
        sha256=file_sha256(path),
        sidecar=sidecar_path_for(path),
    )


def scan_registry(registry: Path) -> list[RegisteredModel]:
    """Every `*.onnx` file in the registry folder (not recursive), sorted by slug.

    Other files (sidecars, notes, partial downloads) are ignored. Two files whose names collapse to
    the same slug get a numeric suffix in name order, so each keeps its own partition.
    """
    if not registry.is_dir():
        return []
    models: list[RegisteredModel] = []
    seen: dict[str, int] = {}
    for path in sorted(registry.glob("*.onnx")):
        if not path.is_file():
            continue
        slug = model_slug(path.stem)
        seen[slug] = seen.get(slug, 0) + 1
        if seen[slug] > 1:
            slug = f"{slug}_{seen[slug]}"
        models.append(registered_model(path, slug))
    return sorted(models, key=lambda m: m.slug)


def find_model(registry: Path, slug: str) -> RegisteredModel:
    for model in scan_registry(registry):
        if model.slug == slug:
            return model
    raise AacoInputError(
        f"no model with partition key '{slug}' in the registry",
        path=registry,
        fix="put the .onnx file back, or delete the partition in the Dagster UI",
    )

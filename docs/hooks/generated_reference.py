"""MkDocs hook: the reference pages, generated from the code as the site builds.

Adds every page of docs/reference_pages.py (the command line, sidecar keys, Dagster definitions,
TraceLake tables, environment variables, bottleneck rules) to the site's files, so they are never
committed and cannot drift from the code; and fails the build, naming each one, when the code has
an entry without documentation. docs/ is no package: reference_pages.py is imported from its
folder, put on sys.path, and loaded afresh for every build (`mkdocs serve` rebuilds).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

DOCS = Path(__file__).resolve().parent.parent


def reference_pages():
    """docs/reference_pages.py, imported by its folder's path; no __pycache__ is written into
    docs/, where MkDocs would publish it."""
    if str(DOCS) not in sys.path:
        sys.path.insert(0, str(DOCS))
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        import reference_pages

        return importlib.reload(reference_pages)
    finally:
        sys.dont_write_bytecode = writes


def on_files(files, config):
    with warnings.catch_warnings():  # the code's own deprecations are its tests' business
        warnings.simplefilter("ignore", DeprecationWarning)
        pages, missing = reference_pages().build()
    if missing:
        raise PluginError(
            f"{len(missing)} entries of the code have no documentation (see "
            "docs/reference_pages.py):\n  " + "\n  ".join(missing)
        )
    for src_uri, content in pages.items():
        existing = files.get_file_from_path(src_uri)
        if existing is not None:  # generated pages win over a stale file of the same name
            files.remove(existing)
        files.append(File.generated(config, src_uri, content=content))
    return files

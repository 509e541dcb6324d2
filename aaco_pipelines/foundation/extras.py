"""The optional parts of the installation (pyproject's extras), and the one-line error when one
is needed and missing.

ONNX Runtime comes from the `cpu` extra (onnxruntime) or the `rocm` one (onnxruntime-rocm),
chosen per host, never both: the two install the same module. Scaling out's packages
(dagster-postgres, psycopg2, dagster-celery and its redis client) come from `cluster`, needed
only by an instance on PostgreSQL or with runs routed to device workers.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from aaco_pipelines.errors import AacoInputError

# the top-level module -> (the extra that installs it, what it is needed for)
EXTRAS = {
    "onnxruntime": (
        "cpu",
        "ONNX Runtime, to measure and analyse models ('rocm' on an AMD GPU host)",
    ),
    "dagster_postgres": ("cluster", "the Dagster instance on PostgreSQL"),
    "psycopg2": ("cluster", "the Dagster instance on PostgreSQL"),
    "dagster_celery": ("cluster", "runs routed to device workers"),
    "celery": ("cluster", "runs routed to device workers"),
    "redis": ("cluster", "runs routed to device workers"),
}


def missing_extra(name: str | None) -> AacoInputError | None:
    """The one-line error for a module of an extra that is not installed (None for another)."""
    top = (name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    extra, purpose = EXTRAS[top]
    return AacoInputError(
        f"{top} is not installed: it is needed for {purpose}",
        fix=f"pip install -e '.[{extra}]' in this checkout's environment (make setup installs "
        "what this host needs)",
    )


def needed(module: str) -> ModuleType:
    """Import `module`, or say in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        error = missing_extra(exc.name)
        if error is None:
            raise
        raise error from None

"""The one error type for mistakes a user can cause, always naming the file and the fix."""

from __future__ import annotations

from pathlib import Path


class AacoInputError(Exception):
    """Bad input: a corrupt model, a missing input spec, an unreadable trace, an unknown provider.

    The message always says which file, what is wrong with it and what to do about it, so the
    Dagster UI, the CLI and the logs show one actionable line instead of a traceback.
    """

    def __init__(self, problem: str, *, path: str | Path | None = None, fix: str | None = None):
        self.problem = problem
        self.path = str(path) if path is not None else None
        self.fix = fix
        super().__init__(self.describe())

    def describe(self) -> str:
        where = f"{self.path}: " if self.path else ""
        how = f" Fix: {self.fix}" if self.fix else ""
        return f"{where}{self.problem}.{how}"


class WorkerFailure(Exception):
    """The isolated benchmark worker crashed, timed out or ran out of memory.

    Raised in the parent process; the worker's own output is kept in the failed bundle named by
    `evidence_dir` so nothing is lost.
    """

    def __init__(self, message: str, *, evidence_dir: str | Path | None = None):
        self.evidence_dir = str(evidence_dir) if evidence_dir is not None else None
        suffix = f" (worker output kept in {self.evidence_dir})" if self.evidence_dir else ""
        super().__init__(message + suffix)

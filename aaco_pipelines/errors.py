"""The one error type for mistakes a user can cause, always naming the file and the fix."""

from __future__ import annotations

import errno
from pathlib import Path

from aaco_pipelines.foundation.redaction import redact


class AacoInputError(Exception):
    """Bad input: a corrupt model, a missing input spec, an unreadable trace, an unknown provider.

    The message always says which file, what is wrong with it and what to do about it, so the
    Dagster UI, the CLI and the logs show one actionable line instead of a traceback. Each part
    is redacted: a connection string quoted in it keeps no password.
    """

    def __init__(self, problem: str, *, path: str | Path | None = None, fix: str | None = None):
        self.problem = redact(problem)
        self.path = redact(str(path)) if path is not None else None
        self.fix = redact(fix) if fix is not None else None
        super().__init__(self.describe())

    def describe(self) -> str:
        where = f"{self.path}: " if self.path else ""
        how = f" Fix: {self.fix}" if self.fix else ""
        return f"{where}{self.problem}.{how}"


class MeasuringFailure(Exception):
    """The measuring process crashed, timed out or ran out of memory.

    Raised in the parent process; the measuring process's own output is kept in the failed
    bundle named by `evidence_dir` so nothing is lost.
    """

    def __init__(self, message: str, *, evidence_dir: str | Path | None = None):
        self.evidence_dir = str(evidence_dir) if evidence_dir is not None else None
        suffix = f" (its output kept in {self.evidence_dir})" if self.evidence_dir else ""
        super().__init__(redact(message + suffix))


WorkerFailure = MeasuringFailure  # old name, kept for a while


# Write failures a user fixes on the machine, not in aaco: a full or read-only file system.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def out_of_space(exc: BaseException, where: str | Path) -> AacoInputError | None:
    """The one-line error for a write that failed because `where` (a folder the user chose, such
    as AACO_HOME or the TraceLake's) is full or read-only; None for any other error."""
    if not isinstance(exc, OSError) or exc.errno not in NO_SPACE_ERRNOS:
        return None
    problem = "read-only file system" if exc.errno == errno.EROFS else "no space left"
    return AacoInputError(
        f"{problem} while writing {exc.filename or 'here'}",
        path=where,
        fix="free space on that file system (or make it writable), or point AACO_HOME / "
        "AACO_TRACELAKE at another one; nothing half-written was kept",
    )


class Interrupted(BaseException):
    """aaco was told to stop (SIGTERM, SIGINT, SIGHUP).

    A BaseException like KeyboardInterrupt, so every `finally` on the way out runs (the measuring
    process's group is killed, an unfinished session is kept as failed evidence) and no
    `except Exception` swallows it."""

    def __init__(self, signal_name: str):
        self.signal_name = signal_name
        self.evidence_dir: str | None = None
        super().__init__(f"stopped by {signal_name}")

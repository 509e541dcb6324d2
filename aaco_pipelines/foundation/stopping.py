"""Stop signals: SIGTERM, SIGINT and SIGHUP end `aaco` cleanly wherever it is.

Each raises `Interrupted` at the point aaco has reached, so the measuring process's group is
killed and the unfinished session kept as failed evidence on the way out. Further stop signals
are ignored meanwhile: the clean-up runs once, to the end (SIGKILL still works, and the measuring
process dies with aaco through its lifeline). Code that runs others' code which may swallow the
exception (a Dagster run executed in process) asks `stop_requested` before going on.
"""

from __future__ import annotations

import signal

from aaco_pipelines.errors import Interrupted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_received: list[str] = []


def stop_on_signals() -> None:
    def stop(signum, frame):
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        _received.append(signal.Signals(signum).name)
        raise Interrupted(_received[0])

    for each in STOP_SIGNALS:
        signal.signal(each, stop)


def stop_requested() -> str | None:
    """The stop signal received, if any (its name)."""
    return _received[0] if _received else None


def raise_if_stopped() -> None:
    """Interrupted, when a stop signal arrived: for code whose stop went through a library that
    swallows exceptions (SQLite aborts a statement whose progress handler raised)."""
    name = stop_requested()
    if name is not None:
        raise Interrupted(name)


def exit_code(exc: Interrupted) -> int:
    """128 + the signal's number, as a shell reports a process ended by it."""
    return 128 + signal.Signals[exc.signal_name].value

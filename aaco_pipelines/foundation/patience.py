"""Trying again while a service is away for a moment: a PostgreSQL server restarting, a redis
broker failing over. Bounded: past its patience the last failure stands (or the caller's one-line
error for it), so a service that stays down is reported, not waited for in silence.

Hand-written rather than tenacity's or backoff's decorators: the two callers need the deadline
and the final error in their own words, which is about all either library would do here.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
# How long a service may be away before the operation that needs it fails: AACO_SERVICE_PATIENCE_S
# seconds (default 60: a restart, a failover), read by every process that uses the instance.
PATIENCE_ENV = "AACO_SERVICE_PATIENCE_S"
FIRST_PAUSE_S = 0.25
LONGEST_PAUSE_S = 5.0  # back within 5 s of the service
log = logging.getLogger(__name__)


def patiently(
    action: Callable[[], T],
    transient: Callable[[Exception], bool],
    *,
    patience_s: float,
    what: str,
    give_up: Callable[[Exception], Exception] | None = None,
) -> T:
    """`action()`, tried again while it fails with an error `transient` accepts (0.25 s apart,
    doubling, at most 5 s) for up to `patience_s`. Any other error at once; a transient one past
    the patience as `give_up(error)` (or itself)."""
    deadline = time.monotonic() + patience_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            return action()
        except Exception as exc:
            if not transient(exc):
                raise
            if time.monotonic() + pause > deadline:
                if give_up is None:
                    raise
                raise give_up(exc) from None
            level = logging.WARNING if pause == FIRST_PAUSE_S else logging.DEBUG  # once aloud
            log.log(level, "%s is unreachable; trying again for up to %.0f s", what, patience_s)
            time.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_S)


def service_patience_s() -> float:
    """AACO_SERVICE_PATIENCE_S, or 60 s."""
    raw = os.environ.get(PATIENCE_ENV)
    try:
        return max(0.0, float(raw)) if raw else 60.0
    except ValueError:
        return 60.0

"""A fixed-rate loop for the telemetry samplers' background threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def tick_until(
    stopping: threading.Event,
    interval_s: float,
    action: Callable[[], None],
    on_error: Callable[[Exception], None],
) -> None:
    """Call `action` every `interval_s` until `stopping` is set.

    Ticks follow a fixed schedule, so a slow read does not shift every later sample, and a
    schedule that fell behind skips the missed ticks instead of bursting. One failing call is
    reported to `on_error` and does not end the recording."""
    next_tick = time.monotonic()
    while not stopping.is_set():
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported, and the recording goes on
            on_error(exc)
        next_tick += interval_s
        now = time.monotonic()
        if next_tick < now:
            next_tick = now
        stopping.wait(next_tick - now)

"""The telemetry samplers' background thread: a fixed-rate loop, started and stopped once."""

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


class BackgroundSampler:
    """Calls the subclass's `sample_once` every `interval_s` on a daemon thread between
    `start()` and `_join()`; a failing tick is kept in `errors` so a gap is explained."""

    def __init__(self, interval_s: float, thread_name: str):
        self.interval_s = interval_s
        self.thread_name = thread_name
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick_until(self._stopping, self.interval_s, self.sample_once, self._note_failure)

    def _note_failure(self, exc: Exception) -> None:
        self.errors.append(f"{type(exc).__name__}: {exc}")

    def _join(self) -> bool:
        """Stop the thread and wait for it; whether it had been started."""
        self._stopping.set()
        if self._thread is None:
            return False
        self._thread.join()
        return True

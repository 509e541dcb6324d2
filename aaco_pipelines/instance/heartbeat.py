"""A device worker's sign of life while it runs a run: a key in the result backend, kept fresh.

The Celery task of a run stays STARTED in the result backend after its worker was killed, and a
busy worker answers no ping or inspect (its solo pool runs the run in the thread that would
answer), so neither tells the head node that a run's worker died. While the worker executes a
run, a small process of its own (this module's `main`) writes `alive_key(task_id)` every
`BEAT_S` seconds, each write valid `ALIVE_FOR_S` seconds; the launcher's health check on the head
node (launcher.py) reads it. A separate process, not a thread: a long call that holds the
worker's GIL (ONNX shape inference of a large model) must not look like a death.

The beating process stops when the worker is gone (its parent pid changes), and the key then
lapses by itself: nothing needs to survive the worker to say it died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

# AACO_HEARTBEAT_S shortens the beat for a test cluster (its daemon and workers alike); every
# other time follows from it.
BEAT_S = float(os.environ.get("AACO_HEARTBEAT_S") or 5)
ALIVE_FOR_S = int(6 * BEAT_S)  # a write is valid this long: 5 missed beats, or a 25 s blip
URL_ENV = "AACO_HEARTBEAT_URL"  # the backend's URL reaches the beating process here, not in argv


def alive_key(task_id: str) -> str:
    return f"aaco-run-worker-alive-{task_id}"


def start(url: str, task_id: str) -> subprocess.Popen:
    """The beating process for the run of Celery task `task_id`, child of this worker."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__, task_id, str(os.getpid())],
        env={**os.environ, URL_ENV: url},
        stdin=subprocess.DEVNULL,
    )


def stop(beating: subprocess.Popen, client, task_id: str) -> None:
    """The run is over (its result is stored before this): stop beating, drop the key (with
    the broker away, the key lapses by itself)."""
    import redis

    beating.terminate()
    try:
        beating.wait(timeout=BEAT_S * 2)
    except subprocess.TimeoutExpired:
        beating.kill()
        beating.wait()
    with contextlib.suppress(redis.RedisError):
        client.delete(alive_key(task_id))


def beat(client, task_id: str, parent: int) -> None:
    """Keep the key fresh while the worker `parent` lives; a broker that is away is tried
    again at the next beat (each write outlives five beats: a short blip is not a death)."""
    import redis

    while os.getppid() == parent:
        with contextlib.suppress(redis.RedisError):
            client.set(alive_key(task_id), str(parent), ex=ALIVE_FOR_S)
        time.sleep(BEAT_S)


def main(argv: list[str]) -> None:
    import redis

    task_id, parent = argv[0], int(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    client = redis.Redis.from_url(
        os.environ[URL_ENV], socket_timeout=BEAT_S, socket_connect_timeout=BEAT_S
    )
    beat(client, task_id, parent)


if __name__ == "__main__":
    main(sys.argv[1:])

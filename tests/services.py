"""Real services for tests: a PostgreSQL server and redis started from Debian's binaries on free
loopback ports, in folders of their own (instance/local_services.py, as `aaco cluster up` starts
them), stopped by their PIDs; away() stops one for a while as a restart would.

`make test` installs the packages (like chromium). Where they are missing the tests that need
them skip with the reason, except in CI (`AACO_SERVICES_REQUIRED=1`), where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from aaco_pipelines.instance import local_services as services

REQUIRED = os.environ.get("AACO_SERVICES_REQUIRED") == "1"
POSTGRES_USER = services.POSTGRES_USER
free_port = services.free_port


def missing(service: str, reason: str) -> None:
    """Skip (fail in CI) a test whose service cannot run here."""
    message = f"{service} unavailable: {reason} (make test installs it)"
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


@contextlib.contextmanager
def postgres_server(password: str | None = None) -> Iterator[str]:
    """A fresh server with one database (instance/local_services.py, as `aaco cluster up`
    starts it); yields its SQLAlchemy URL (psycopg2, explicit). With `password`, connections
    over TCP must give it (scram-sha-256; the URL carries it), else every connection is
    trusted."""
    if services.postgres_bin() is None:
        missing("PostgreSQL", "initdb not found (Debian package postgresql)")
    base = Path(tempfile.mkdtemp(prefix="aaco-pg-"))
    port = free_port()
    server: dict = {"pid": None}
    auth, login = None, {}
    if password is not None:
        secret = base / "password"
        secret.write_text(password + "\n")
        services.own_for_postgres(secret)
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={secret}"]
        login = {"PGPASSWORD": password}
    try:
        services.init_postgres(base, auth)
        # a handle, not a bare PID: a server that died is never "stopped" through a PID reused
        # by another test's process (a SIGINT once reached an `aaco run` that way)
        server["pid"] = services.identified(services.start_postgres(base, port))
        services.create_database(port, login)
        user = POSTGRES_USER if password is None else f"{POSTGRES_USER}:{quote(password, safe='')}"
        url = services.postgres_url(port, user)

        def stop_then_start() -> Iterator[None]:
            services.stop_process(server["pid"])
            yield
            server["pid"] = services.identified(services.start_postgres(base, port))

        _OUTAGES[url] = stop_then_start
        try:
            yield url
        finally:
            _OUTAGES.pop(url, None)
    finally:
        if server["pid"] is not None:
            services.stop_process(server["pid"])
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def redis_server(persist: bool = False) -> Iterator[str]:
    """A redis server on a free loopback port (instance/local_services.py); yields its URL.
    Nothing persisted, or with `persist` what Debian's redis does: a snapshot saved when it
    stops, loaded when it starts (queued tasks outlive a restart)."""
    if shutil.which("redis-server") is None:
        missing("redis", "redis-server not found (Debian package redis-server)")
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="aaco-redis-"))
    url = services.redis_url(port)
    server = {"process": services.start_redis(folder, port, persist=persist)}

    def stop_then_start() -> Iterator[None]:
        services.stop_process(server["process"].pid, signal.SIGTERM)
        yield
        server["process"] = services.start_redis(folder, port, persist=persist)

    _OUTAGES[url] = stop_then_start
    try:
        yield url
    finally:
        _OUTAGES.pop(url, None)
        services.stop_process(server["process"].pid, signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


# url -> a generator that stops the server, and starts it again (same port, same data) when
# resumed: what away() runs.
_OUTAGES: dict = {}


@contextlib.contextmanager
def away(url: str) -> Iterator[None]:
    """The server of `url` (a postgres_server's or redis_server's, running) is down inside the
    block: stopped as a restart or a failover would (fast shutdown, connections dropped), and
    started again on the same port with the same data when the block ends."""
    outage = _OUTAGES[url]()
    next(outage)
    try:
        yield
    finally:
        next(outage, None)


@contextlib.contextmanager
def delayed(port: int, delay_s: float) -> Iterator[int]:
    """A loopback TCP proxy to `port` that holds every chunk `delay_s` in each direction: a
    database across a network (the catalog latency under which DuckLake's races appear). It
    runs in a process of its own: DuckDB holds this process's GIL while it waits on the
    catalog. Yields the proxy's port."""
    process = subprocess.Popen(
        [sys.executable, __file__, str(port), str(delay_s)], stdout=subprocess.PIPE, text=True
    )
    try:
        yield int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()


def _proxy(port: int, delay_s: float) -> None:
    """delayed()'s process: forward every connection to `port`, one thread per direction."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(1 << 16):
                time.sleep(delay_s)
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", port))
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=pump, args=(source, sink), daemon=True).start()


if __name__ == "__main__":
    _proxy(int(sys.argv[1]), float(sys.argv[2]))

"""Real services for tests: a PostgreSQL server started from Debian's binaries on a free loopback
port, in a folder of its own, and stopped by its PID.

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

REQUIRED = os.environ.get("AACO_SERVICES_REQUIRED") == "1"
POSTGRES_USER = "aaco"


def missing(service: str, reason: str) -> None:
    """Skip (fail in CI) a test whose service cannot run here."""
    message = f"{service} unavailable: {reason} (make test installs it)"
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of initdb and pg_ctl (Debian keeps them out of PATH, per version)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent  # a symlink in PATH: its real folder has createdb
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


def _as_postgres(command: list[str]) -> list[str]:
    """Postgres refuses to run as root: as root, run it as Debian's `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def postgres_server(password: str | None = None) -> Iterator[str]:
    """A fresh server with one database; yields its SQLAlchemy URL (psycopg2, explicit). With
    `password`, connections over TCP must give it (scram-sha-256; the URL carries it), else
    every connection is trusted."""
    binaries = postgres_bin()
    if binaries is None:
        missing("PostgreSQL", "initdb not found (Debian package postgresql)")
    base = Path(tempfile.mkdtemp(prefix="aaco-pg-"))
    base.chmod(0o755)
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
    port = free_port()
    pid = None
    auth, login = ["--auth=trust"], {}
    if password is not None:
        secret = base / "password"
        secret.write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(secret, "postgres")
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={secret}"]
        login = {"PGPASSWORD": password}
    try:
        subprocess.run(
            _as_postgres([str(binaries / "initdb"), "-D", str(data), "-U", POSTGRES_USER,
                          *auth, "-E", "UTF8"]),
            check=True, capture_output=True,
        )  # fmt: skip
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"

        def start() -> int:
            subprocess.run(
                _as_postgres([str(binaries / "pg_ctl"), "-D", str(data), "-o", options,
                              "-l", str(base / "server.log"), "-w", "-t", "60", "start"]),
                check=True, capture_output=True,
            )  # fmt: skip
            return int((data / "postmaster.pid").read_text().split()[0])

        pid = start()

        subprocess.run(
            [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U",
             POSTGRES_USER, "dagster"],
            check=True, capture_output=True, env={**os.environ, **login},
        )  # fmt: skip
        user = POSTGRES_USER if password is None else f"{POSTGRES_USER}:{quote(password, safe='')}"
        url = f"postgresql+psycopg2://{user}@127.0.0.1:{port}/dagster"
        server = {"pid": pid}

        def stop_then_start() -> Iterator[None]:
            _stop(server["pid"])
            yield
            server["pid"] = start()

        _OUTAGES[url] = stop_then_start
        try:
            yield url
        finally:
            _OUTAGES.pop(url, None)
            pid = server["pid"]
    except subprocess.CalledProcessError as exc:
        log = base / "server.log"
        detail = log.read_text()[-2000:] if log.is_file() else ""
        raise RuntimeError(f"{exc.cmd} failed: {exc.stderr!r} {detail}") from exc
    finally:
        if pid is not None:
            _stop(pid)
        shutil.rmtree(base, ignore_errors=True)


def _stop(pid: int, timeout_s: float = 30.0) -> None:
    """Fast shutdown (SIGINT) by PID, then SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def redis_server(persist: bool = False) -> Iterator[str]:
    """A redis server on a free loopback port; yields its URL. Nothing persisted, or with
    `persist` what Debian's redis does: a snapshot saved when it stops, loaded when it starts
    (queued tasks outlive a restart)."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis", "redis-server not found (Debian package redis-server)")
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="aaco-redis-"))
    saving = ["--save", "3600 1", "--dir", str(folder)] if persist else ["--save", ""]
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", *saving, "--appendonly", "no"]
    url = f"redis://127.0.0.1:{port}/0"
    server = {"process": _start_redis(command, port)}

    def stop_then_start() -> Iterator[None]:
        _stop_redis(server["process"])
        yield
        server["process"] = _start_redis(command, port)

    _OUTAGES[url] = stop_then_start
    try:
        yield url
    finally:
        _OUTAGES.pop(url, None)
        _stop_redis(server["process"])
        shutil.rmtree(folder, ignore_errors=True)


def _start_redis(command: list[str], port: int) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return process
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)


def _stop_redis(process: subprocess.Popen) -> None:
    """SIGTERM (it saves its snapshot, if it keeps one); our child: wait() reaps it (a zombie
    would look alive)."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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

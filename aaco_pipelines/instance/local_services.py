"""PostgreSQL and redis on this machine's loopback, from Debian's packages, in folders of their
own: the services of a local cluster (`aaco cluster up`, local_cluster.py) and of the tests.

PostgreSQL refuses to run as root: as root its commands run as Debian's `postgres` user, which
then owns its folder. Every connection over loopback is trusted (no password to leak); the
data folder is the only state. redis keeps what Debian's does: a snapshot saved when it stops
and loaded when it starts, so queued runs outlive a restart.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

from aaco_pipelines.errors import AacoInputError

POSTGRES_USER = "aaco"
DATABASE = "dagster"
START_TIMEOUT_S = 60


def free_port() -> int:
    """A TCP port nothing on loopback listens on now."""
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


def needed_postgres_bin() -> Path:
    """postgres_bin, or the one-line error saying how to install it."""
    binaries = postgres_bin()
    if binaries is None:
        raise AacoInputError(
            "PostgreSQL is not installed (no initdb in PATH or /usr/lib/postgresql/*/bin)",
            fix="apt-get install postgresql (make services does it)",
        )
    return binaries


def as_postgres(command: list[str]) -> list[str]:
    """As root, the command as Debian's `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def own_for_postgres(*paths: Path) -> None:
    """Make folders PostgreSQL writes (data, sockets) the server's as root."""
    if os.geteuid() == 0:
        for path in paths:
            shutil.chown(path, "postgres")


def init_postgres(base: Path, auth: list[str] | None = None) -> Path:
    """A new data folder base/data (its parent and base/sockets made for the server); returns
    the data folder. `auth`: initdb's authentication options (default: trust)."""
    binaries = needed_postgres_bin()
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    sockets = base / "sockets"
    sockets.mkdir(exist_ok=True)
    own_for_postgres(base, sockets)
    data = base / "data"
    _run(as_postgres([str(binaries / "initdb"), "-D", str(data), "-U", POSTGRES_USER,
                      *(auth or ["--auth=trust"]), "-E", "UTF8"]), base)  # fmt: skip
    return data


def start_postgres(base: Path, port: int) -> int:
    """Start the server of base/data on loopback `port` (fsync off: a measurement's history,
    not a bank's); its PID once it accepts connections."""
    binaries = needed_postgres_bin()
    options = f"-p {port} -k {base / 'sockets'} -c listen_addresses=127.0.0.1 -c fsync=off"
    _run(as_postgres([str(binaries / "pg_ctl"), "-D", str(base / "data"), "-o", options,
                      "-l", str(base / "server.log"), "-w", "-t", str(START_TIMEOUT_S),
                      "start"]), base)  # fmt: skip
    return int((base / "data" / "postmaster.pid").read_text().split()[0])


def create_database(port: int, env: dict | None = None) -> str:
    """The `dagster` database on the server at `port`; its SQLAlchemy URL (psycopg2, explicit)."""
    binaries = needed_postgres_bin()
    done = subprocess.run(
        [str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", POSTGRES_USER,
         DATABASE],
        capture_output=True, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    if done.returncode != 0 and "already exists" not in done.stderr:
        raise AacoInputError(f"createdb failed: {done.stderr.strip()}", fix="see the server log")
    return postgres_url(port)


def postgres_url(port: int, user: str = POSTGRES_USER) -> str:
    return f"postgresql+psycopg2://{user}@127.0.0.1:{port}/{DATABASE}"


def start_redis(folder: Path, port: int, persist: bool = True) -> subprocess.Popen:
    """redis on loopback `port`, in a process group of its own (it outlives the command that
    started it), its log and (with `persist`) its snapshot in `folder`; returned once it
    accepts connections."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise AacoInputError(
            "redis is not installed (no redis-server in PATH)",
            fix="apt-get install redis-server (make services does it)",
        )
    folder.mkdir(parents=True, exist_ok=True)
    command = [binary, "--port", str(port), "--bind", "127.0.0.1",
               "--save", "3600 1" if persist else "", "--dir", str(folder),
               "--appendonly", "no"]  # fmt: skip
    log = open(folder / "redis.log", "ab")  # noqa: SIM115 - the child holds it
    with log:
        process = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(port):
        if time.monotonic() > deadline or process.poll() is not None:
            stop_process(process.pid)
            raise AacoInputError(
                f"redis-server did not start on port {port}", path=folder / "redis.log",
                fix="read its log",
            )  # fmt: skip
        time.sleep(0.05)
    return process


def redis_url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def check_port_free(
    host: str, port: int, choose: str, who: str = "another `aaco ui`, or Dagster?"
) -> None:
    """Refuse a port something already listens on, before anything starts (`choose`: how the
    caller's user picks another; `who`: the likely holder): Dagster would log `[Errno 98]` deep
    in its output while its daemon still launched runs, and the browser would show the other
    instance."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise AacoInputError(
            f"cannot listen on host {host!r}: {exc.strerror}", fix="use --host 127.0.0.1"
        ) from None
    try:  # SO_REUSEADDR, as the webserver binds: a port in TIME_WAIT is free
        socket.create_server((host, port), family=family).close()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise AacoInputError(
                f"cannot listen on {host}:{port}: {exc.strerror}",
                fix=f"use --host 127.0.0.1, or a port above 1023 ({choose})",
            ) from None
        raise AacoInputError(
            f"port {port} on {host} is already in use ({who})",
            fix=f"choose another port: {choose}, or stop what listens there",
        ) from None


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def alive(pid: int | None) -> bool:
    """Whether the process runs (a zombie, exited but not reaped, does not)."""
    try:
        return bool(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_process(
    process: int | psutil.Process, sig: int = signal.SIGINT, timeout_s: float = 30.0
) -> None:
    """`sig` (SIGINT: PostgreSQL's fast shutdown; SIGTERM: redis saves its snapshot), then
    SIGKILL if it lingers. Waits on our own children so that no zombie looks alive. Given a
    psutil handle taken when the process started (`identified`), a PID another process took
    since (the server died, the PID was reused) is never signalled: a bare PID is trusted."""
    try:
        handle = process if isinstance(process, psutil.Process) else psutil.Process(process)
        handle.send_signal(sig)  # psutil checks the handle's process is still this one
    except psutil.Error:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(handle.pid, os.WNOHANG)
        if not _still(handle):
            return
        time.sleep(0.05)
    with contextlib.suppress(psutil.Error):
        handle.kill()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(handle.pid, 0)  # our own child: reaped, never left a zombie


def identified(pid: int) -> psutil.Process:
    """A handle on the process running as `pid` now (its start time kept with it)."""
    return psutil.Process(pid)


def _still(handle: psutil.Process) -> bool:
    try:
        return handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _run(command: list[str], base: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        log = base / "server.log"
        detail = log.read_text()[-800:] if log.is_file() else ""
        raise AacoInputError(
            f"{Path(command[command.index('--') + 1] if '--' in command else command[0]).name} "
            f"failed: {(done.stderr or done.stdout).strip()[-400:]} {detail}".strip(),
            path=base,
            fix="read the server log in that folder",
        )

"""A scaled-out instance on one machine, to try README's "Scaling out" before the real hosts:
PostgreSQL in a data folder, redis, the head (`aaco ui`: webserver and daemon) and one device
worker per target (`aaco worker --target`), all on loopback, all sharing this AACO_HOME (so one
registry and one TraceLake), started by `aaco cluster up` and stopped by `aaco cluster down`.

Everything lives in AACO_HOME/cluster: postgres/ (data folder, server log), redis/ (snapshot,
log), logs/ (the head's and each worker's), cluster.json (ports and process ids). As root,
PostgreSQL runs as Debian's `postgres` user, who may not reach into AACO_HOME: its folder is
then in that user's home, /var/lib/postgresql/aaco-<8 hex of AACO_HOME's path>. `up` starts
what is not running and leaves what is; the ports are chosen once and kept, so the URLs that
`aaco cluster env` prints stay valid across `down` and `up`. Each process is started in a
process group of its own and stopped with it: SIGTERM, then SIGKILL after a timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.foundation.atomic_file import write_atomically
from aaco_pipelines.instance import local_services as services
from aaco_pipelines.instance import prepare_dagster_home
from aaco_pipelines.instance.variables import BROKER_ENV, POSTGRES_ENV

STATE = "cluster.json"
STOP_TIMEOUT_S = 30.0


@dataclass
class LocalCluster:
    """The ports and processes of one AACO_HOME's local cluster (cluster.json)."""

    folder: Path
    postgres_port: int
    redis_port: int
    ui_port: int
    pids: dict[str, int] = field(default_factory=dict)  # postgres, redis, head, worker-<target>
    postgres_folder: str | None = None  # where its data folder is (postgres_home)

    @property
    def environment(self) -> dict[str, str]:
        """What every process of the cluster (and `aaco sweep` against it) is given."""
        return {
            POSTGRES_ENV: services.postgres_url(self.postgres_port),
            BROKER_ENV: services.redis_url(self.redis_port),
        }

    def running(self) -> dict[str, bool]:
        """Each recorded process, and whether it runs."""
        return {name: services.alive(pid) for name, pid in sorted(self.pids.items())}

    def save(self) -> None:
        state = {k: v for k, v in asdict(self).items() if k != "folder"}
        write_atomically(self.folder / STATE, json.dumps(state, indent=2) + "\n")


def cluster_folder(paths: AacoPaths) -> Path:
    return paths.home / "cluster"


def load(paths: AacoPaths) -> LocalCluster | None:
    """The cluster recorded under this AACO_HOME, or None."""
    folder = cluster_folder(paths)
    try:
        state = json.loads((folder / STATE).read_text())
    except FileNotFoundError:
        return None
    return LocalCluster(folder=folder, **state)


def up(paths: AacoPaths, targets: list[str], ui_port: int | None, say) -> LocalCluster:
    """Start whatever of the cluster is not running: PostgreSQL, redis, the head, a worker per
    target (those of an earlier `up` too). Returns at once: the head's UI takes a minute."""
    cluster = load(paths) or LocalCluster(
        folder=cluster_folder(paths),
        postgres_port=services.free_port(),
        redis_port=services.free_port(),
        ui_port=ui_port or 3000,
    )
    cluster.ui_port = ui_port or cluster.ui_port
    for folder in ("redis", "logs"):
        (cluster.folder / folder).mkdir(parents=True, exist_ok=True)
    _start_postgres(cluster, say)
    _start_redis(cluster, say)
    with _environment(cluster.environment):  # the instance's dagster.yaml: routed, PostgreSQL
        prepare_dagster_home(paths.dagster_home)  # once, before the head and workers read it
    environment = {**os.environ, **cluster.environment, "AACO_HOME": str(paths.home),
                   "DAGSTER_HOME": str(paths.dagster_home)}  # fmt: skip
    environment.pop("AACO_TARGET", None)  # each worker is given its own
    aaco = str(Path(sys.executable).with_name("aaco"))
    if not services.alive(cluster.pids.get("head")):
        cluster.save()  # what runs already is recorded, whatever the port says
        services.check_port_free("127.0.0.1", cluster.ui_port, "aaco cluster up --ui-port N")
        command = [aaco, "ui", "--host", "127.0.0.1", "--port", str(cluster.ui_port)]
        cluster.pids["head"] = _spawn(command, cluster.folder / "logs" / "head.log", environment)
        say(f"head (webserver and daemon): http://127.0.0.1:{cluster.ui_port}, log logs/head.log")
    workers = sorted({*targets, *(n.removeprefix("worker-") for n in cluster.pids if
                                  n.startswith("worker-"))})  # fmt: skip
    for target in workers:
        name = f"worker-{target}"
        if not services.alive(cluster.pids.get(name)):
            log = cluster.folder / "logs" / f"{name}.log"
            cluster.pids[name] = _spawn([aaco, "worker", "--target", target], log, environment)
            say(f"worker for {target}: log logs/{name}.log")
    cluster.save()
    return cluster


def down(paths: AacoPaths, say) -> LocalCluster | None:
    """Stop every process of the cluster: workers first, then the head, redis, PostgreSQL."""
    cluster = load(paths)
    if cluster is None:
        return None
    order = sorted(cluster.pids, key=lambda n: (not n.startswith("worker-"), n != "head", n))
    for name in order:
        pid = cluster.pids[name]
        if services.alive(pid):
            if name == "postgres":
                services.stop_process(pid, signal.SIGINT, STOP_TIMEOUT_S)  # fast shutdown
            else:
                _stop_group(pid)
            say(f"stopped {name}")
    cluster.save()
    return cluster


def _start_postgres(cluster: LocalCluster, say) -> None:
    if services.alive(cluster.pids.get("postgres")):
        return
    base = Path(cluster.postgres_folder or postgres_home(cluster.folder))
    cluster.postgres_folder = str(base)
    if not (base / "data" / "PG_VERSION").is_file():
        services.init_postgres(base)
    cluster.pids["postgres"] = services.start_postgres(base, cluster.postgres_port)
    services.create_database(cluster.postgres_port)
    cluster.save()
    say(f"PostgreSQL on 127.0.0.1:{cluster.postgres_port}, data {base / 'data'}")


def postgres_home(folder: Path) -> Path:
    """The cluster's PostgreSQL folder: its own, or as root the postgres user's home's."""
    if os.geteuid() != 0:
        return folder / "postgres"
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:8]
    return Path(pwd.getpwnam("postgres").pw_dir) / f"aaco-{digest}"


def _start_redis(cluster: LocalCluster, say) -> None:
    if services.alive(cluster.pids.get("redis")):
        return
    process = services.start_redis(cluster.folder / "redis", cluster.redis_port)
    cluster.pids["redis"] = process.pid
    cluster.save()
    say(f"redis on 127.0.0.1:{cluster.redis_port}")


@contextlib.contextmanager
def _environment(variables: dict[str, str]):
    """This process's environment with `variables`, as it was again afterwards."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _spawn(command: list[str], log_path: Path, environment: dict) -> int:
    """A process in a group of its own (stopped with it), its output appended to `log_path`."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=environment,
            cwd=Path(__file__).resolve().parents[2], start_new_session=True,
        )  # fmt: skip
    return process.pid


def _stop_group(pid: int) -> None:
    """SIGTERM to the process group led by `pid` (the process and its children: the
    webserver's and daemon's, a worker's run), SIGKILL after STOP_TIMEOUT_S."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and _group_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies aside)."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pgid and services.alive(process.pid):
                return True
    return False

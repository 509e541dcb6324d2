"""A scaled-out instance on one machine, to try README's "Scaling out" before the real hosts:
PostgreSQL in a data folder, redis, the head (`aaco ui`: webserver and daemon) and one device
worker per target (`aaco worker --target`), all on loopback, all sharing this AACO_HOME (so one
registry and one TraceLake), started by `aaco cluster up` and stopped by `aaco cluster down`.

Everything lives in AACO_HOME/cluster: postgres/ (data folder, server log), redis/ (snapshot,
log), logs/ (the head's and each worker's), cluster.json (ports and process ids). As root,
PostgreSQL runs as Debian's `postgres` user, who may not reach into AACO_HOME: its folder is
then in that user's home, /var/lib/postgresql/aaco-<8 hex of AACO_HOME's path>. `up` starts
what is not running and leaves what is; the ports are chosen once and kept, so the URLs that
`aaco cluster env` prints stay valid across `down` and `up`. Each process is recorded by PID
and identity (instance.cluster_processes): a PID that another process took since (a reboot) is
"stale", never signalled. The head and the workers carry a mark their children inherit, so
`down` stops what a killed head left running (webserver, daemon, code servers) too: SIGTERM,
then SIGKILL after a timeout. `up` checks every port it needs before it starts anything.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.foundation.atomic_file import write_atomically
from aaco_pipelines.instance import local_services as services
from aaco_pipelines.instance import prepare_dagster_home
from aaco_pipelines.instance.cluster_processes import (
    MARK_ENV,
    RUNNING,
    STALE,
    ProcessRecord,
    identify,
    marked_by,
    new_mark,
    stop_marked,
    stop_recorded,
)
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
    # postgres, redis, head, worker-<target>: each one's PID and identity
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    postgres_folder: str | None = None  # where its data folder is (postgres_home)

    @property
    def environment(self) -> dict[str, str]:
        """What every process of the cluster (and `aaco sweep` against it) is given."""
        return {
            POSTGRES_ENV: services.postgres_url(self.postgres_port),
            BROKER_ENV: services.redis_url(self.redis_port),
        }

    def states(self) -> dict[str, str]:
        """Each recorded process: running, stopped, or stale (its PID is another process's)."""
        return {name: record.state() for name, record in sorted(self.processes.items())}

    def running(self, name: str) -> bool:
        record = self.processes.get(name)
        return record is not None and record.running()

    def left_behind(self) -> dict[str, list[int]]:
        """What a stopped or killed head or worker left running: its marked descendants."""
        gone = {r.mark: name for name, r in self.processes.items() if r.mark and not r.running()}
        return {gone[mark]: [p.pid for p in found] for mark, found in marked_by(gone).items()}

    def save(self) -> None:
        state = {k: v for k, v in asdict(self).items() if k not in ("folder", "processes")}
        state["processes"] = {n: r.to_json() for n, r in sorted(self.processes.items())}
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
    recorded = state.pop("processes", None) or state.pop("pids", {})  # pids: before identities
    state.pop("pids", None)
    processes = {name: ProcessRecord.from_json(value) for name, value in recorded.items()}
    return LocalCluster(folder=folder, processes=processes, **state)


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
    _stop_left_behind(cluster, say)  # a killed head's webserver would hold the UI's port
    _check_ports(cluster)  # before anything starts: a taken port starts nothing
    _start_postgres(cluster, say)
    _start_redis(cluster, say)
    with _environment(cluster.environment):  # the instance's dagster.yaml: routed, PostgreSQL
        prepare_dagster_home(paths.dagster_home)  # once, before the head and workers read it
    environment = {**os.environ, **cluster.environment, "AACO_HOME": str(paths.home),
                   "DAGSTER_HOME": str(paths.dagster_home)}  # fmt: skip
    environment.pop("AACO_TARGET", None)  # each worker is given its own
    aaco = str(Path(sys.executable).with_name("aaco"))
    if not cluster.running("head"):
        command = [aaco, "ui", "--host", "127.0.0.1", "--port", str(cluster.ui_port)]
        cluster.processes["head"] = _spawn("head", command, cluster, environment)
        say(f"head (webserver and daemon): http://127.0.0.1:{cluster.ui_port}, log logs/head.log")
    workers = sorted({*targets, *(n.removeprefix("worker-") for n in cluster.processes if
                                  n.startswith("worker-"))})  # fmt: skip
    for target in workers:
        name = f"worker-{target}"
        if not cluster.running(name):
            command = [aaco, "worker", "--target", target]
            cluster.processes[name] = _spawn(name, command, cluster, environment)
            say(f"worker for {target}: log logs/{name}.log")
    cluster.save()
    return cluster


def _check_ports(cluster: LocalCluster) -> None:
    """Every port a process about to start needs is free (the cluster's own running ones keep
    theirs), or nothing starts."""
    kept = f"edit {cluster.folder / STATE} (the ports are chosen once and kept)"
    needed = [
        ("postgres", cluster.postgres_port, kept, "the cluster's PostgreSQL port"),
        ("redis", cluster.redis_port, kept, "the cluster's redis port"),
        ("head", cluster.ui_port, "aaco cluster up --ui-port N", "another `aaco ui`, or Dagster?"),
    ]
    for name, port, choose, who in needed:
        if not cluster.running(name):
            services.check_port_free("127.0.0.1", port, choose, who)


def _stop_left_behind(cluster: LocalCluster, say) -> None:
    """Stop what a killed head or worker left running (its marked children)."""
    for name, pids in cluster.left_behind().items():
        stop_marked([cluster.processes[name].mark], STOP_TIMEOUT_S)
        say(f"stopped what the {name}, no longer running, left behind (pids {_listed(pids)})")


def _listed(pids: list[int]) -> str:
    return ", ".join(map(str, sorted(pids)))


def down(paths: AacoPaths, say) -> LocalCluster | None:
    """Stop every process of the cluster: workers first, then the head, redis, PostgreSQL."""
    cluster = load(paths)
    if cluster is None:
        return None
    order = sorted(cluster.processes, key=lambda n: (not n.startswith("worker-"), n != "head", n))
    for name in order:
        record = cluster.processes[name]
        state = record.state()
        if state == STALE:
            say(f"{name} not stopped: pid {record.pid} is "
                + ("another process now (the record is stale)" if record.started is not None
                   else "recorded without its identity (by an older aaco): stop it by hand if "
                   "it is the cluster's"))  # fmt: skip
        elif name == "postgres":
            if stop_recorded(record, signal.SIGINT, STOP_TIMEOUT_S):  # its fast shutdown
                say(f"stopped {name}")
        elif record.mark:  # the process and every descendant carrying its mark
            stopped = stop_marked([record.mark], STOP_TIMEOUT_S)
            if state == RUNNING:
                say(f"stopped {name}")
            elif stopped:
                say(f"stopped what the {name} left behind (pids {_listed(stopped)})")
        elif stop_recorded(record, signal.SIGTERM, STOP_TIMEOUT_S):
            say(f"stopped {name}")
    cluster.save()
    return cluster


def _start_postgres(cluster: LocalCluster, say) -> None:
    if cluster.running("postgres"):
        return
    base = Path(cluster.postgres_folder or postgres_home(cluster.folder))
    cluster.postgres_folder = str(base)
    if not (base / "data" / "PG_VERSION").is_file():
        services.init_postgres(base)
    cluster.processes["postgres"] = identify(services.start_postgres(base, cluster.postgres_port))
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
    if cluster.running("redis"):
        return
    process = services.start_redis(cluster.folder / "redis", cluster.redis_port)
    cluster.processes["redis"] = identify(process.pid)
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


def _spawn(
    name: str, command: list[str], cluster: LocalCluster, environment: dict
) -> ProcessRecord:
    """A process in a group of its own, its output appended to logs/<name>.log, carrying a
    new mark (MARK_ENV) that its children inherit; its record."""
    mark = new_mark(name)
    with open(cluster.folder / "logs" / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            env={**environment, MARK_ENV: mark},
            cwd=Path(__file__).resolve().parents[2], start_new_session=True,
        )  # fmt: skip
    return identify(process.pid, mark)

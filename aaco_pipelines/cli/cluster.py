"""`aaco cluster up|env|status|down`: a scaled-out instance on this machine (PostgreSQL, redis,
the head and a worker per device, on loopback: instance/local_cluster.py)."""

from __future__ import annotations

import shlex
import sys

from aaco_pipelines.cli.common import comma_list, with_examples
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def _say(line: str) -> None:
    print(f"aaco: {line}", file=sys.stderr, flush=True)


def cmd_up(args, paths: AacoPaths) -> int:
    from aaco_pipelines.instance.local_cluster import up

    targets = comma_list(args.workers) or []
    if not targets and not _recorded(paths):
        raise AacoInputError(
            "no device workers named", fix="aaco cluster up --workers gpu0,gpu1 (one per device)"
        )
    cluster = up(paths, targets, args.ui_port, _say)
    _say(f'up under {cluster.folder}; for aaco sweep in this shell: eval "$(aaco cluster env)"')
    return 0


def cmd_env(args, paths: AacoPaths) -> int:
    """The shell lines that point `aaco` (and `dagster`) at the cluster."""
    cluster = _recorded(paths)
    if cluster is None:
        raise AacoInputError("no local cluster under this AACO_HOME", fix="aaco cluster up first")
    for name, value in {"AACO_HOME": str(paths.home), "DAGSTER_HOME": str(paths.dagster_home),
                        **cluster.environment}.items():  # fmt: skip
        print(f"export {name}={shlex.quote(value)}")
    return 0


def cmd_status(args, paths: AacoPaths) -> int:
    """Each process of the cluster: running, stopped, or stale (its recorded PID is another
    process now: a reboot); what a stopped one left behind; exit 1 unless all run."""
    cluster = _recorded(paths)
    if cluster is None:
        print("no local cluster under this AACO_HOME (aaco cluster up)")
        return 1
    states = cluster.states()
    left = cluster.left_behind()
    for name, state in states.items():
        behind = f"; left behind: pids {', '.join(map(str, left[name]))}" if name in left else ""
        print(f"  {name:16} {state:8} (pid {cluster.processes[name].pid}{behind})")
    print(f"  UI: http://127.0.0.1:{cluster.ui_port}")
    if left:
        print("  aaco cluster down stops what was left behind")
    return 0 if all(state == "running" for state in states.values()) else 1


def cmd_down(args, paths: AacoPaths) -> int:
    from aaco_pipelines.instance.local_cluster import down

    if down(paths, _say) is None:
        _say("no local cluster under this AACO_HOME: nothing to stop")
    return 0


def _recorded(paths: AacoPaths):
    from aaco_pipelines.instance.local_cluster import load

    return load(paths)


def add_parser(sub) -> None:
    cluster_parser = sub.add_parser(
        "cluster", help="a scaled-out instance on this machine: PostgreSQL, redis, head, workers"
    )
    with_examples(cluster_parser, "aaco cluster up --workers gpu0,gpu1", "aaco cluster status")
    cluster = cluster_parser.add_subparsers(dest="cluster_command", required=True)
    up = cluster.add_parser("up", help="start the services, the head and a worker per device")
    up.add_argument("--workers", help="comma-separated devices, e.g. gpu0,gpu1")
    up.add_argument("--ui-port", type=int, help="the head's UI port (default 3000, then kept)")
    with_examples(up, "aaco cluster up --workers gpu0,gpu1", "aaco cluster up --ui-port 3001")
    up.set_defaults(func=cmd_up)
    env = cluster.add_parser("env", help="shell lines pointing aaco at the cluster")
    with_examples(env, 'aaco cluster env  # in a shell: eval "$(aaco cluster env)"')
    env.set_defaults(func=cmd_env)
    status = cluster.add_parser("status", help="which of its processes run")
    with_examples(status, "aaco cluster status")
    status.set_defaults(func=cmd_status)
    down = cluster.add_parser("down", help="stop every process of the cluster")
    with_examples(down, "aaco cluster down")
    down.set_defaults(func=cmd_down)

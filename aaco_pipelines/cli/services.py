"""The commands that are Dagster or Celery: `aaco ui` (webserver and daemon), `aaco worker` (a
device's Celery queue on this host) and `aaco sweep` (every registry model as Dagster runs, for
cron)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from aaco_pipelines.cli.common import (
    add_json_option,
    comma_list,
    path_argument,
    print_json,
    with_examples,
)
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.instance.cluster_processes import MARK_ENV
from aaco_pipelines.instance.report_server import REPORTS_URL_ENV

UI_PORT_ENV = "AACO_UI_PORT"
DEFAULT_UI_PORT = 3000


def ui_port(raw: str | None) -> int:
    """`--port`, else AACO_UI_PORT, else 3000; anything but a TCP port number is one line."""
    value = raw if raw is not None else os.environ.get(UI_PORT_ENV) or str(DEFAULT_UI_PORT)
    if not value.isdigit() or not 0 < int(value) < 65536:
        source = "--port" if raw is not None else UI_PORT_ENV
        raise AacoInputError(
            f"{source} must be a TCP port number (1-65535), not {value!r}",
            fix="e.g. aaco ui --port 3001",
        )
    return int(value)


def cmd_ui(args, paths: AacoPaths) -> int:
    """Set up AACO_HOME and DAGSTER_HOME, build the zoo if the registry is empty, start Dagster
    on a port checked free first."""
    from aaco_pipelines.instance import prepare_dagster_home
    from aaco_pipelines.instance.local_services import check_port_free
    from aaco_pipelines.registry.zoo import build_zoo

    port = ui_port(args.port)
    other = port + 1 if port < 65535 else DEFAULT_UI_PORT
    dagster_home = Path(os.environ.get("DAGSTER_HOME") or paths.dagster_home)
    mark = os.environ.get(MARK_ENV) or ui_mark(dagster_home)  # a cluster's head keeps its own
    if MARK_ENV not in os.environ:
        stop_left_behind(mark)
    check_port_free(args.host, port, f"aaco ui --port {other} (or {UI_PORT_ENV}={other} make run)")
    build_zoo(paths.registry, only_if_empty=True)
    dagster_home = prepare_dagster_home(dagster_home)
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "AACO_HOME": str(paths.home),
           MARK_ENV: mark}  # fmt: skip
    files_url = serve_reports(args.host, paths, env)
    if files_url:
        env[REPORTS_URL_ENV] = files_url
    workspace = Path(args.workspace).absolute()
    command = [
        str(Path(sys.executable).with_name("dagster")),
        "dev",
        "-w",
        str(workspace),
        "-h",
        args.host,
        "-p",
        str(port),
    ]
    print(f"AACO_HOME={paths.home}  DAGSTER_HOME={dagster_home}  UI: http://{args.host}:{port}")
    if files_url:
        print(f"reports and traces: {files_url}/<session>.html (links on every session's page)")
    log = ui_log(args.log, paths)
    start_status_lines(env, args.host, port)
    if log is not None:
        print(f"one line per model below; Dagster's own log: {log}", flush=True)
        into_log(log)
    os.chdir(workspace.parent)
    os.execve(command[0], command, env)
    return 0  # not reached


def ui_log(given: str | None, paths: AacoPaths) -> Path | None:
    """Where Dagster's stream goes: `--log`, else AACO_HOME/logs/dagster.log on a terminal
    (which gets one status line per model instead), else nowhere but the output as it was."""
    if given:
        return Path(given).absolute()
    return paths.home / "logs" / "dagster.log" if sys.stdout.isatty() else None


def start_status_lines(env: dict, host: str, port: int) -> None:
    """The child that prints a line per finished measurement (instance.status_lines) on this
    output, before it is pointed at the log; it opens the instance once the webserver at
    `host:port` listens, and stops with `dagster dev`, this process."""
    import subprocess
    import time

    sys.stdout.flush()
    out = os.dup(sys.stdout.fileno())
    command = [sys.executable, "-m", "aaco_pipelines.instance.status_lines",
               "--fd", str(out), "--since", str(time.time()),
               "--host", "127.0.0.1" if host in ("0.0.0.0", "::") else host, "--port", str(port)]  # fmt: skip
    subprocess.Popen(command, env=env, pass_fds=[out], stdin=subprocess.DEVNULL)
    os.close(out)


def into_log(log: Path) -> None:
    """This process's output (and so `dagster dev`'s, which it becomes) appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def serve_reports(host: str, paths: AacoPaths, env: dict) -> str | None:
    """Serve AACO_HOME/reports beside Dagster (instance.report_server) on AACO_REPORTS_PORT,
    else 9001 (the port ui.perfetto.dev fetches traces from), else any free port; its URL, or
    None (said) when it cannot listen. The server stops with `dagster dev`, this process."""
    from aaco_pipelines.instance.report_server import REPORTS_PORT_ENV, reports_port, spawn
    from aaco_pipelines.report.session_files import REPORTS

    port = reports_port()
    ports = [port] if os.environ.get(REPORTS_PORT_ENV) else [port, 0]
    for port in ports:
        try:
            _, url = spawn(paths.home / REPORTS, host, port, env)
            return url
        except OSError as error:
            reason = error
    print(f"reports are not served ({reason}): asset pages show their paths", file=sys.stderr)
    return None


def ui_mark(dagster_home: Path) -> str:
    """The mark every process of this DAGSTER_HOME's `aaco ui` carries (instance.
    cluster_processes): `dagster dev` and the webserver, daemon and code servers it starts."""
    digest = hashlib.sha256(str(dagster_home.resolve()).encode()).hexdigest()[:16]
    return f"ui:{digest}"


def stop_left_behind(mark: str) -> None:
    """What an `aaco ui` killed outright (kill -9 of `dagster dev`) left running: its webserver
    holds the port, its daemon launches runs. Stopped, and said, when no `dagster dev` of this
    home is alive; a live one is another `aaco ui`, left alone (the port check then says so)."""
    from aaco_pipelines.instance.cluster_processes import marked, stop_marked

    processes = marked([mark])
    if not processes or any(_is_dagster_dev(p) for p in processes):
        return
    stopped = stop_marked([mark], timeout_s=30)
    if stopped:
        pids = ", ".join(map(str, sorted(stopped)))
        print(f"aaco: stopped what an earlier aaco ui left running (pids {pids})", file=sys.stderr)


def _is_dagster_dev(process) -> bool:
    """Whether the process is `dagster dev` (the exec'd `aaco ui`: python .../dagster dev ...)."""
    try:
        command = process.cmdline()
    except Exception:  # noqa: BLE001 - gone meanwhile: not a live `dagster dev`
        return False
    return any(
        Path(part).name == "dagster" and command[i + 1 : i + 2] == ["dev"]
        for i, part in enumerate(command)
    )


def cmd_worker(args, paths: AacoPaths) -> int:
    """A device's worker on the host that owns it: takes the runs on the device's Celery queue,
    one at a time (a solo pool: Celery's default prefork pool fails Dagster runs), and measures
    them as target `--target` (AACO_TARGET).

    It becomes the `celery` process itself, the command `dagster-celery worker start` would run:
    that wrapper runs celery as a child it does not stop, so a stopped wrapper leaves a worker
    behind, and it writes the broker URL (password included) into DAGSTER_HOME. Celery reads
    the broker from CELERY_BROKER_URL instead. Its app is dagster-celery's with a heartbeat per
    run (instance/worker.py), by which the head node tells a dead worker's run from a live one."""
    from aaco_pipelines.instance import (
        BROKER_ENV,
        POSTGRES_ENV,
        prepare_dagster_home,
        register_target,
    )

    if not (os.environ.get(BROKER_ENV) and os.environ.get(POSTGRES_ENV)):
        raise AacoInputError(
            f"a device worker needs the shared instance and the broker: {POSTGRES_ENV} and "
            f"{BROKER_ENV} are not both set",
            fix="set them as on the head node (see 'Scaling out' in README)",
        )
    os.environ["AACO_TARGET"] = args.target  # this host's device: its pool, its measurements
    dagster_home = prepare_dagster_home(Path(os.environ.get("DAGSTER_HOME") or paths.dagster_home))
    register_target(dagster_home, args.target)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "AACO_HOME": str(paths.home),
        "CELERY_BROKER_URL": os.environ[BROKER_ENV],
        "CELERY_RESULT_BACKEND": os.environ[BROKER_ENV],
    }
    command = [
        str(bin_dir / "celery"), "-A", "aaco_pipelines.instance.worker", "worker",
        "--prefetch-multiplier=1",
        "--loglevel", "INFO", "-Q", args.target, "-n", f"aaco-{args.target}@%h",
        "--pool", "solo", "--concurrency", "1",
    ]  # fmt: skip
    print(f"worker for {args.target}: queue {args.target}, DAGSTER_HOME={dagster_home}", flush=True)
    os.execve(command[0], command, env)
    return 0  # not reached


def add_parser(sub) -> None:
    """`aaco ui` and `aaco worker` (`aaco sweep` comes later in the help: add_sweep_parser)."""
    ui = sub.add_parser("ui", help="start the Dagster webserver and daemon (same as make run)")
    ui.add_argument("--host", default="127.0.0.1", help="the address the UI listens on")
    ui.add_argument(
        "--port", help=f"the UI's port ({UI_PORT_ENV}, else {DEFAULT_UI_PORT}); refused if busy"
    )
    path_argument(
        ui.add_argument(
            "--workspace", default="workspace.yaml", help="the Dagster workspace file to load"
        )
    )
    ui.add_argument(
        "--log",
        help="append Dagster's own output to this file (default on a terminal: "
        "AACO_HOME/logs/dagster.log, with one status line per measured model shown instead)",
    )
    with_examples(ui, "aaco ui", "aaco ui --port 3001", "aaco ui --log /tmp/dagster.log")
    ui.set_defaults(func=cmd_ui)
    worker = sub.add_parser(
        "worker", help="run a device's queue on this host (scaled-out instance, see README)"
    )
    worker.add_argument("--target", required=True, help="the device: cpu, gpu0, gpu1, ...")
    with_examples(worker, "aaco worker --target gpu0  # with the head's PostgreSQL and broker")
    worker.set_defaults(func=cmd_worker)


# --- sweep: every model through Dagster, for cron ---------------------------------------------


def cmd_sweep(args, paths: AacoPaths) -> int:
    """Measure every registry model as Dagster runs; exit 1 when a model failed. With --json,
    the lines as runs end go to stderr and stdout holds the results."""
    import dataclasses

    from aaco_pipelines.foundation.redaction import redact

    lines = sys.stderr if args.json else sys.stdout
    print(f"aaco sweep: sweeping {paths.registry} through Dagster ...", file=lines, flush=True)
    from aaco_pipelines.sensors.sweep import dagster_home_for, sweep  # Dagster itself: seconds

    only, targets = comma_list(args.models), comma_list(args.targets)
    dagster_home = dagster_home_for(paths)
    print(f"runs go to DAGSTER_HOME={dagster_home}", file=lines, flush=True)
    results = sweep(  # a run's failure is Dagster's text: it may quote a connection string
        paths,
        only,
        targets=targets,
        on_result=lambda r: print("  " + redact(r.line()), file=lines, flush=True),
        on_progress=lambda line: print(redact(line), file=sys.stderr, flush=True),
    )
    failed = [r.slug for r in results if r.status == "failed"]
    regressed = [r.slug for r in results if r.status == "regression"]
    if args.json:
        runs = [
            {**dataclasses.asdict(r), "error": redact(r.error) if r.error else None}
            for r in results
        ]
        print_json({"registry": str(paths.registry), "dagster_home": str(dagster_home),
                    "runs": runs, "failed": failed, "regressed": regressed})  # fmt: skip
    else:
        print(f"{len(results)} runs: {len(failed)} failed, {len(regressed)} regressed")
    return 1 if failed or (args.fail_on_regression and regressed) else 0


def add_sweep_parser(sub) -> None:
    sweep = sub.add_parser(
        "sweep", help="measure every registry model through Dagster now (for cron, no daemon)"
    )
    sweep.add_argument("--models", help="comma-separated model names (default: all)")
    sweep.add_argument(
        "--targets",
        help="comma-separated devices (default: this host's; with runs routed to device "
        "workers, every registered one)",
    )
    sweep.add_argument(
        "--fail-on-regression", action="store_true", help="also exit 1 when a model regressed"
    )
    add_json_option(sweep, "each model's run (the progress lines go to stderr)")
    with_examples(
        sweep,
        "aaco sweep --fail-on-regression",
        "aaco sweep --models resnet_cnn,bert_encoder --json",
    )
    sweep.set_defaults(func=cmd_sweep)

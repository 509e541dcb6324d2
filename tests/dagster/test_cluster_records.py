"""`aaco cluster` never acts on a stale record: a PID that another process took since (a
reboot) is reported stale and never signalled; what a killed head left running is found by
its mark and stopped by `down`; `up` on a taken port starts nothing. Real processes, real
signals, a real listening socket; no PostgreSQL needed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.cli.services import stop_left_behind, ui_mark
from aaco_pipelines.instance import local_cluster
from aaco_pipelines.instance.cluster_processes import MARK_ENV, ProcessRecord, marked
from aaco_pipelines.instance.local_services import listening
from tests.ui_support import DagsterUI

REPO = Path(__file__).resolve().parents[2]

# A stand-in for the head: it starts a child in a session of its own (as code servers may)
# that inherits its environment, prints the child's PID, and waits.
HEAD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
    " start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _stranger() -> subprocess.Popen:
    """An unrelated process (in its own group) that a stale record's PID now names."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )


def _cluster(paths, processes: dict) -> local_cluster.LocalCluster:
    cluster = local_cluster.LocalCluster(
        folder=local_cluster.cluster_folder(paths), postgres_port=1, redis_port=2, ui_port=3,
        processes=processes,
    )  # fmt: skip
    (cluster.folder / "logs").mkdir(parents=True, exist_ok=True)
    cluster.save()
    return cluster


def test_a_reused_pid_is_stale_and_never_signalled(aaco_paths, capsys):
    stranger = _stranger()
    try:
        started = psutil.Process(stranger.pid).create_time()
        # as after a reboot: the recorded process started at another time
        _cluster(aaco_paths, {"head": ProcessRecord(stranger.pid, started - 3600, "head:x"),
                              "postgres": ProcessRecord(stranger.pid, started - 3600)})  # fmt: skip
        assert main(["cluster", "status"]) == 1
        out = capsys.readouterr().out
        assert "head             stale" in out and "postgres         stale" in out, out
        assert main(["cluster", "down"]) == 0
        said = capsys.readouterr().err
        assert "another process now (the record is stale)" in said
        time.sleep(0.5)
        assert stranger.poll() is None  # never signalled, nor its group
        # a cluster.json written before identities: its bare PIDs are never trusted either
        state = local_cluster.cluster_folder(aaco_paths) / local_cluster.STATE
        legacy = json.loads(state.read_text())
        legacy.pop("processes")
        legacy["pids"] = {"redis": stranger.pid}
        state.write_text(json.dumps(legacy))
        assert main(["cluster", "down"]) == 0
        assert "recorded without its identity" in capsys.readouterr().err
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_down_stops_what_a_killed_head_left_running(aaco_paths, capsys):
    cluster = _cluster(aaco_paths, {})
    record = local_cluster._spawn("head", [sys.executable, "-c", HEAD], cluster, dict(os.environ))
    cluster.processes["head"] = record
    cluster.save()
    log = cluster.folder / "logs" / "head.log"
    deadline = time.monotonic() + 30
    while not log.read_text().strip():
        assert time.monotonic() < deadline, "the stand-in head never started its child"
        time.sleep(0.1)
    child = int(log.read_text().split()[0])
    os.kill(record.pid, signal.SIGKILL)  # the head dies; its child lives on, in another group
    os.waitpid(record.pid, 0)
    assert psutil.pid_exists(child)
    assert main(["cluster", "status"]) == 1
    out = capsys.readouterr().out
    assert "head             stopped" in out and f"left behind: pids {child}" in out, out
    assert main(["cluster", "down"]) == 0
    assert f"stopped what the head left behind (pids {child})" in capsys.readouterr().err
    gone = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < gone, "the head's child outlived down"
        time.sleep(0.1)


def test_up_on_a_taken_port_starts_nothing(aaco_paths, capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["cluster", "up", "--workers", "gpu0", "--ui-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is already in use" in err and "--ui-port" in err, err
    cluster = local_cluster.load(aaco_paths)
    assert cluster is None or not cluster.processes  # no PostgreSQL, no redis, no head
    mine = [
        p.info["name"] for p in psutil.process_iter(["name", "cmdline"])
        if str(aaco_paths.home) in " ".join(p.info["cmdline"] or [])
    ]  # fmt: skip
    assert mine == []


@pytest.mark.timeout(300)
def test_what_a_killed_aaco_ui_left_running_is_stopped_by_the_next(aaco_paths, tmp_path, capsys):
    """kill -9 of `aaco ui` (it is `dagster dev` by then) leaves its webserver on the port, its
    daemon and code servers running: all carry its DAGSTER_HOME's mark, and the next `aaco ui`
    of that home stops them before it checks the port. A real Dagster, a real kill."""
    env = {**os.environ, "AACO_HOME": str(aaco_paths.home)}
    env.pop(MARK_ENV, None)
    ui = DagsterUI(REPO, env, tmp_path / "ui.log").start()
    try:
        deadline = time.monotonic() + 180
        while not listening(ui.port):
            ui.check_alive()
            assert time.monotonic() < deadline, ui.log_tail()
            time.sleep(1)
        os.kill(ui.process.pid, signal.SIGKILL)
        ui.process.wait()
        time.sleep(1)
        assert listening(ui.port)  # the webserver outlived it: the port the next one wants
        mark = ui_mark(Path(env.get("DAGSTER_HOME") or aaco_paths.dagster_home))
        assert len(marked([mark])) >= 2  # webserver and daemon at least
        stop_left_behind(mark)
        assert "stopped what an earlier aaco ui left running (pids " in capsys.readouterr().err
        assert not marked([mark]) and not listening(ui.port)
    finally:
        ui.stop()

"""`aaco cluster up|env|status|down`: README's scaled-out instance on one machine, all real
processes (PostgreSQL from its data folder, redis, the head's webserver and daemon, a device
worker). The registry sensor on the head has the registry's model measured on the worker's
device, with no other command; `down` leaves no process behind, and `up` again brings the same
instance back with its history."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import dagster as dg

from aaco_pipelines.analysis.envelope.choice import save_envelope
from aaco_pipelines.cli import main
from aaco_pipelines.instance import local_cluster
from aaco_pipelines.instance.local_services import free_port, postgres_bin
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import add_model, synthetic_envelope
from tests.services import missing


def _succeeded(home: str) -> list[str]:
    """The partitions of the instance's successful runs."""
    with dg.DagsterInstance.from_config(home) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
        return [run.tags.get("dagster/partition") for run in runs]


def test_a_local_cluster_measures_the_registry_on_its_worker_and_stops_whole(
    aaco_paths, capsys, monkeypatch
):
    if postgres_bin() is None:
        missing("PostgreSQL", "initdb not found (Debian package postgresql)")
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    # the worker would spend 10 s measuring this CPU's envelope under its device's name
    envelope = dataclasses.replace(synthetic_envelope(5e10, 1e10), target="gpu0")
    save_envelope(TraceLake(aaco_paths.tracelake), envelope)
    assert main(["cluster", "env"]) == 2  # nothing up yet: one line, the fix
    assert "aaco cluster up first" in capsys.readouterr().err
    try:
        assert main(["cluster", "up", "--workers", "gpu0", "--ui-port", str(free_port())]) == 0
        assert main(["cluster", "status"]) == 0
        status = capsys.readouterr().out
        for name in ("postgres", "redis", "head", "worker-gpu0"):
            assert f"{name}" in status and "stopped" not in status, status
        assert main(["cluster", "env"]) == 0
        exports = dict(
            line.removeprefix("export ").split("=", 1) for line in capsys.readouterr().out.split("\n")
            if line
        )  # fmt: skip
        assert exports["AACO_CELERY_BROKER"].startswith("redis://127.0.0.1:")
        for name, value in exports.items():  # as `eval "$(aaco cluster env)"` would
            monkeypatch.setenv(name, value)
        deadline = time.monotonic() + 240
        while "tiny|gpu0" not in _succeeded(
            exports["DAGSTER_HOME"]
        ):  # the head's sensor, the worker's run
            assert time.monotonic() < deadline, _logs(aaco_paths)
            time.sleep(2)
        sessions = TraceLake(aaco_paths.tracelake).query("SELECT model_slug, target FROM sessions")
        assert sessions.to_pylist() == [{"model_slug": "tiny", "target": "gpu0"}]
    finally:
        cluster = local_cluster.load(aaco_paths)
        assert main(["cluster", "down"]) == 0
    assert set(cluster.states().values()) == {"stopped"}, cluster.states()
    assert not _processes_under(aaco_paths.home), _processes_under(aaco_paths.home)


def _processes_under(home: Path) -> list[str]:
    """Command lines of processes that name this AACO_HOME (or its cluster's folders)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(home) in text and str(os.getpid()) != cmdline.parent.name:
            found.append(text)
    return found


def _logs(paths) -> str:
    logs = sorted((paths.home / "cluster" / "logs").glob("*.log"))
    return "\n".join(f"--- {log.name}\n{log.read_text()[-1500:]}" for log in logs)

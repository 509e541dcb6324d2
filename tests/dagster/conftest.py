"""Fixtures of the Dagster tests: the scaled-out cluster (tests/dagster/scale_out_cluster.py)."""

from __future__ import annotations

import os

import pytest
import yaml

from aaco_pipelines.instance import BROKER_ENV, POSTGRES_ENV, prepare_dagster_home
from tests.dagster.scale_out_cluster import BIN, FAST_MONITORING, Cluster
from tests.services import postgres_server, redis_server


@pytest.fixture
def cluster(aaco_paths, monkeypatch, tmp_path):
    """Head node (daemon) and two device workers, sharing PostgreSQL and redis."""
    with postgres_server() as postgres, redis_server(persist=True) as broker:
        monkeypatch.setenv(POSTGRES_ENV, postgres)
        monkeypatch.setenv(BROKER_ENV, broker)
        monkeypatch.setenv("DAGSTER_HOME", str(aaco_paths.dagster_home))
        home = prepare_dagster_home(aaco_paths.dagster_home)
        settings = yaml.safe_load((home / "dagster.yaml").read_text())
        settings["run_monitoring"] |= FAST_MONITORING
        (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
        # a 2 s heartbeat (12 s to lapse) instead of 5 s (30 s): the same path, sooner
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
               "AACO_HEARTBEAT_S": "2"}  # fmt: skip
        nodes = Cluster(home, env, tmp_path, postgres, broker)
        # The daemon's registry sensor watches an empty folder: it would queue runs of its own
        # for the models this test adds.
        unwatched = tmp_path / "unwatched"
        unwatched.mkdir()
        try:
            nodes.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                        AACO_REGISTRY=str(unwatched))  # fmt: skip
            for device in ("gpu0", "gpu1"):
                nodes.start_worker(device)
            yield nodes
        finally:
            killed = nodes.stop_all()
        assert not killed, f"SIGTERM did not stop {killed}"

"""Runs routed to device workers survive a broker and a database that restart mid-sweep:
redis away for 20 s, then PostgreSQL for 15 s, all real processes (the cluster of
tests/dagster/scale_out_cluster.py)."""

from __future__ import annotations

import subprocess
import time

import dagster as dg

from tests.dagster.scale_out_cluster import (
    BIN,
    any_run_in,
    poll,
    two_models_two_devices,
    wait_for_workers,
)
from tests.helpers import REPO
from tests.services import away


def test_runs_survive_a_broker_and_a_database_that_restart_mid_sweep(aaco_paths, cluster):
    """redis down for 20 s while the daemon hands the sweep's runs to the workers, then
    PostgreSQL down for 15 s while they measure: every run is sent once redis is back, and waits
    for PostgreSQL; each model succeeds once per device (a run whose write was in flight at the
    moment PostgreSQL stopped fails, and Dagster retries it), is measured once per device, and
    the sweep waits through both and ends all ok."""
    lake = two_models_two_devices(aaco_paths, ("a",))  # one model on each device
    wait_for_workers(cluster.home, {"gpu0", "gpu1"})
    out = open(cluster.logs_dir / "sweep.out", "w+")  # noqa: SIM115 - closed below
    sweep = None
    try:
        with dg.DagsterInstance.from_config(str(cluster.home)) as instance:
            with away(cluster.broker):
                down = time.monotonic()
                sweep = subprocess.Popen([str(BIN / "aaco"), "sweep"], cwd=REPO, env=cluster.env,
                                         stdout=out, stderr=subprocess.STDOUT, text=True)  # fmt: skip
                # down until the daemon is sending a run (it waits for the broker), 20 s at least
                poll(
                    lambda: any_run_in(instance, dg.DagsterRunStatus.STARTING), 240, "run dequeued"
                )
                time.sleep(max(0.0, 20 - (time.monotonic() - down)))
            back = time.monotonic()
            poll(lambda: any_run_in(instance, dg.DagsterRunStatus.STARTED), 120, "run started")
            started_after = time.monotonic() - back
            with away(cluster.postgres):
                time.sleep(15)
            assert sweep.wait(timeout=240) == 0
            runs = instance.get_run_records()
            print(f"redis down {back - down:.1f} s; first run started {started_after:.1f} s later")
    finally:
        if sweep is not None and sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        out.seek(0)
        printed = out.read()
        out.close()
    succeeded = [r.dagster_run for r in runs if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS]
    assert sorted(run.tags["dagster/partition"] for run in succeeded) == ["a|gpu0", "a|gpu1"], (
        printed
    )  # the model on each device succeeded once
    failed = [r.dagster_run for r in runs if r.dagster_run not in succeeded]
    retried = {run.tags.get("dagster/parent_run_id") for run in succeeded}
    assert all(run.run_id in retried for run in failed), printed  # and any failure was retried
    print(f"{len(failed)} of {len(succeeded)} runs failed in an outage and were retried")
    assert printed.splitlines()[-1] == "2 runs: 0 failed, 0 regressed", printed
    sessions = lake.query("SELECT model_slug, target FROM sessions ORDER BY 1, 2").to_pylist()
    assert [(r["model_slug"], r["target"]) for r in sessions] == [("a", "gpu0"), ("a", "gpu1")]

"""One line per model as `aaco ui` (make run) measures them, on the terminal that started it:
"3/7 measured: resnet_cnn p50 1.16 ms, SUSPECT: other processes took 70% of the host's CPU".

Dagster's own stream (debug lines of the webserver, daemon and every run) goes to a log file
instead; these lines come from the runs' records in the Dagster instance (the run's status and
what its benchmark_run and tracelake_session materializations said), so the TraceLake a run is
writing is never opened here. A child of `aaco ui` that stops with it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time

MEASUREMENT_KEYS = ("benchmark_run", "tracelake_session")
POLL_S = 2.0


def status_line(done: int, total: int, slug: str, outcome: dict) -> str:
    """The line for one finished run: measured (its p50 and, when suspect, why), or failed."""
    if outcome["status"] != "SUCCESS":
        said = {"FAILURE": "failed", "CANCELED": "canceled"}.get(outcome["status"], "ended")
        return f"{done}/{total} {said}: {slug} (the run's log in the UI says why)"
    line = f"{done}/{total} measured: {slug}"
    if outcome.get("p50_ms"):
        line += f" p50 {float(outcome['p50_ms']):.3g} ms"
    measurement = outcome.get("measurement") or ""
    if measurement.startswith("Measurement SUSPECT: "):
        line += ", SUSPECT: " + measurement.removeprefix("Measurement SUSPECT: ").split(";")[0]
    return line


def run_outcome(instance, run) -> dict:
    """What a finished run's status and materializations say about its session."""
    import dagster as dg

    outcome = {"status": run.status.value}
    records = instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    for record in records:
        materialization = record.event_log_entry.asset_materialization
        name, meta = materialization.asset_key.path[-1], materialization.metadata
        if name == "benchmark_run" and "latency_p50_ms" in meta:
            outcome["p50_ms"] = meta["latency_p50_ms"].value
        if name == "tracelake_session" and "summary" in meta:
            lines = str(meta["summary"].value).splitlines()
            outcome["measurement"] = next((ln for ln in lines if ln.startswith("Measurement")), "")
    return outcome


def watch(instance, out, since: float, stop=lambda: False) -> None:
    """Print a line for each measurement run that finishes after `since`, until `stop()`: one
    query of the runs ended since then per tick."""
    import datetime as dt

    import dagster as dg

    finished = [
        dg.DagsterRunStatus.SUCCESS,
        dg.DagsterRunStatus.FAILURE,
        dg.DagsterRunStatus.CANCELED,
    ]
    after = dt.datetime.fromtimestamp(since, dt.timezone.utc)
    told: set[str] = set()  # runs
    measured: set[str] = set()  # model x target partitions
    while not stop():
        try:
            records = instance.get_run_records(
                filters=dg.RunsFilter(
                    job_name="measure_model", statuses=finished, updated_after=after
                ),
                ascending=True,
            )
            fresh = [
                r.dagster_run for r in records
                if r.dagster_run.run_id not in told and r.end_time and r.end_time >= since
            ]  # fmt: skip
            total = _models(instance) if fresh else 0
            for run in fresh:
                told.add(run.run_id)
                slug = run.tags.get("dagster/partition", run.run_id[:8])
                measured.add(slug)
                done = len(measured)
                line = status_line(done, max(total, done), slug, run_outcome(instance, run))
                print(line, file=out, flush=True)
        except Exception as error:  # noqa: BLE001 - a busy instance: the next tick tries again
            print(f"(status lines: {type(error).__name__}, trying again)", file=sys.stderr)
        time.sleep(POLL_S)


def _models(instance) -> int:
    """Model x target partitions: how many a full sweep of the registry measures."""
    models = instance.get_dynamic_partitions("models")
    targets = instance.get_dynamic_partitions("targets") or ["cpu"]
    return len(models) * len(targets)


def wait_for_webserver(host: str, port: int, alive) -> bool:
    """Until Dagster's webserver listens (its instance's storage is made by then): a second
    process opening a fresh instance while `dagster dev` makes it races it (alembic's "more than
    one head", and the code server fails to load). False when `alive()` turns false first."""
    while alive():
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return True
        time.sleep(1.0)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="status lines for aaco ui")
    parser.add_argument("--fd", type=int, required=True, help="the terminal's output, inherited")
    parser.add_argument("--since", type=float, required=True)
    parser.add_argument("--host", required=True, help="where the Dagster webserver listens")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    # Ctrl-C in the terminal reaches the whole group: Dagster stops, and this with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import dagster as dg

    out = os.fdopen(args.fd, "w", buffering=1)
    parent = os.getppid()
    alive = lambda: os.getppid() == parent  # noqa: E731
    if not wait_for_webserver(args.host, args.port, alive):
        return 0
    with dg.DagsterInstance.get() as instance:
        watch(instance, out, args.since, stop=lambda: not alive())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`aaco sweep`: measure every registry model through the Dagster job, without the daemon.

For cron users: each model is one run of the `measure_model` job, executed in this process against
the persistent instance in DAGSTER_HOME, so its run, materializations and asset checks show up in
the UI afterwards as if the nightly schedule had launched it. Partitions are registered the way
the registry sensor does (one per model slug). A model that fails does not stop the others.

A run whose blocking `no_performance_regression` check fails is a failed run to Dagster; here it
is a "regression" (the measurement itself worked), told apart from a "failed" measurement.

Each run judges its own series. A sweep judges hundreds at once, so after the last run the
verdicts of every series of the sweep go through Benjamini-Hochberg (`governance.drift.fdr`, q = 0.05):
a regression whose adjusted p-value is above q becomes no_change ("fdr_controlled") in the
TraceLake and in the sweep's summary, and only the regressions that remain count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg

from aaco_pipelines.config import AacoPaths, default_target
from aaco_pipelines.errors import AacoInputError, Interrupted
from aaco_pipelines.foundation.stopping import stop_requested
from aaco_pipelines.governance.alerts.lifecycle import sync_alerts
from aaco_pipelines.governance.alerts.notifications import Webhook, deliver_due
from aaco_pipelines.governance.drift.fdr import FDR_Q, control_sweep
from aaco_pipelines.governance.drift.series import GATED_METRICS
from aaco_pipelines.instance import prepare_dagster_home, routes_runs
from aaco_pipelines.instance.retries import (
    attempts_by_partition,
    keep_backfill_open,
    refused_retry,
    settled,
)
from aaco_pipelines.registry.scan import RegisteredModel, model_slug, read_registry
from aaco_pipelines.tracelake.store import TraceLake

REGRESSION_CHECK = "no_performance_regression"
SWEEP_TAG = "aaco/sweep"  # one sweep's launched runs
WORKSPACE = Path(__file__).resolve().parent.parent / "workspace.yaml"
# Dagster's console log stays quiet: the summary line says what failed, the run's event log in
# the UI keeps the traceback.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass(frozen=True)
class SweepResult:
    slug: str
    status: str  # ok | regression | failed
    run_id: str
    session_id: str | None
    latency_p50_ms: float | None
    verdict: str | None  # the p50 verdict, or the regressed metrics
    error: str | None  # the root cause of a failed run, one line

    def line(self) -> str:
        """The model's summary line for the terminal."""
        p50 = f"p50 {self.latency_p50_ms:.4f} ms" if self.latency_p50_ms is not None else "p50 -"
        tail = self.error if self.status == "failed" else (self.verdict or "-")
        return f"{self.status:10} {self.slug:24} {p50:18} {tail}  (run {self.run_id[:8]})"


def sweep(
    paths: AacoPaths,
    only: Sequence[str] | None = None,
    *,
    targets: Sequence[str] | None = None,
    dagster_home: Path | None = None,
    on_result: Callable[[SweepResult], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> list[SweepResult]:
    """Measure every registry model (or the `only` ones), in registry order, on `targets`.

    Embedded (no run launcher in dagster.yaml): each run executes here, one after another, on
    this host's target. With the instance's run launcher (README, "Scaling out"): the runs are
    submitted as one backfill, queue per device, run on the device workers, and are waited for
    here; `targets` defaults to every registered target."""
    chosen = models_to_sweep(paths.registry, only, on_progress or _to_stderr)
    home = prepare_dagster_home(dagster_home or dagster_home_for(paths))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        routed = routes_runs(instance)
        register_partitions(instance, chosen, own_target=not routed)
        if routed:
            results = launch(instance, chosen, targets, on_result, on_progress)
        else:
            results = execute_here(instance, paths, chosen, targets, on_result, on_progress)
    return control_false_discoveries(paths, results)


def execute_here(
    instance: dg.DagsterInstance,
    paths: AacoPaths,
    chosen: list[RegisteredModel],
    targets: Sequence[str] | None,
    on_result: Callable[[SweepResult], None] | None,
    on_progress: Callable[[str], None] | None = None,
) -> list[SweepResult]:
    """Each model's run in this process, on this host's target.

    Each run is tagged with this process as its owner, and waits for its pools first
    (`pool_wait`): the runs a killed sweep left STARTED are failed and their slots freed, and a
    slot held by a live run is waited for aloud, stoppable by SIGTERM and SIGINT."""
    from aaco_pipelines.assets.partitions import model_target_key
    from aaco_pipelines.definitions import defs
    from aaco_pipelines.sensors.jobs import measure_model_job, run_tags
    from aaco_pipelines.sensors.pool_wait import wait_for_pools
    from aaco_pipelines.sensors.sweep_owner import owner_tags

    own = default_target()
    if targets and set(targets) != {own}:
        raise AacoInputError(
            f"this host measures on {own} (AACO_TARGET); {sorted(set(targets) - {own})} are "
            "measured by their own hosts' workers",
            fix="route runs to device workers (AACO_CELERY_BROKER, README 'Scaling out'), "
            f"or sweep --targets {own}",
        )
    job = defs.resolve_job_def(measure_model_job.name)
    owner = owner_tags()
    results = []
    for model in chosen:
        wait_for_pools(instance, job.graph.pools, on_progress or _to_stderr)
        result = job.execute_in_process(
            run_config=QUIET_LOGS,
            instance=instance,
            partition_key=model_target_key(model.slug, own),
            raise_on_error=False,
            tags=run_tags("sweep", **{"aaco/model_sha256": model.sha256}, **owner),
            resources=path_resources(paths),
        )
        results.append(summarize(model.slug, result.run_id, result.success, result.all_events))
        if on_result:
            on_result(results[-1])
        if stopped := stop_requested() or interruption(result.all_events):
            raise Interrupted(stopped)  # Dagster recorded the stop as a failed step
    return results


def _to_stderr(line: str) -> None:
    print(f"aaco: {line}", file=sys.stderr, flush=True)


def launch(
    instance: dg.DagsterInstance,
    chosen: list[RegisteredModel],
    targets: Sequence[str] | None,
    on_result: Callable[[SweepResult], None] | None,
    on_progress: Callable[[str], None] | None,
    poll_s: float = 2.0,
) -> list[SweepResult]:
    """One backfill of every model on every target (`dagster job backfill`: the instance's own
    way to submit many partitions), then each run's result as it finishes."""
    from aaco_pipelines.assets.partitions import model_target_key, targets_partitions

    registered = instance.get_dynamic_partitions(targets_partitions.name)
    targets = list(targets or registered)
    unknown = sorted(set(targets) - set(registered))
    if unknown or not targets:
        raise AacoInputError(
            f"no device worker has registered the targets {unknown or targets}",
            fix="start 'aaco worker --target <device>' on the host that owns each one "
            f"(registered: {', '.join(registered) or 'none'})",
        )
    keys = [model_target_key(m.slug, t) for m in chosen for t in targets]
    sweep_id = uuid.uuid4().hex[:12]
    submit_backfill(instance, keys, sweep_id)
    if on_progress:
        on_progress(
            f"submitted {len(keys)} runs ({', '.join(targets)}), tagged {SWEEP_TAG}={sweep_id}"
        )
    try:
        return wait_for_runs(instance, sweep_id, len(keys), on_result, on_progress, poll_s)
    except AacoInputError as exc:  # the instance's database away past its patience
        raise AacoInputError(
            f"stopped waiting for sweep {sweep_id}: {exc.problem}; its runs go on in the instance",
            fix=f"{exc.fix} (the runs tagged {SWEEP_TAG}={sweep_id} show in the UI)",
        ) from None


def submit_backfill(instance: dg.DagsterInstance, keys: list[str], sweep_id: str) -> None:
    """The partitions `keys` as one backfill of the sweep (`dagster job backfill`: the
    instance's own way to submit many partitions), kept open so that Dagster retries its runs."""
    tags = {"aaco/trigger": "sweep", SWEEP_TAG: sweep_id}
    command = [
        str(Path(sys.executable).parent / "dagster"), "job", "backfill", "-w", str(WORKSPACE),
        "-j", "measure_model", "--partitions", ",".join(keys), "--tags", json.dumps(tags),
        "--noprompt",
    ]  # fmt: skip
    home = {"DAGSTER_HOME": str(instance.root_directory)}  # AACO_HOME's when DAGSTER_HOME is unset
    done = subprocess.run(
        command, cwd=WORKSPACE.parent, capture_output=True, text=True, env=os.environ | home
    )
    if done.returncode != 0:
        raise AacoInputError(
            f"the instance refused the sweep's backfill: {done.stderr.strip()[-400:]}",
            fix="check that dagster-daemon runs on the head node and the code location loads",
        )
    keep_backfill_open(instance, {SWEEP_TAG: sweep_id})


def wait_for_runs(
    instance: dg.DagsterInstance,
    sweep_id: str,
    expected: int,
    on_result: Callable[[SweepResult], None] | None,
    on_progress: Callable[[str], None] | None,
    poll_s: float,
    report_every_s: float = 30.0,
) -> list[SweepResult]:
    """The sweep's partitions' results, reported as each finishes, until all `expected` have;
    every `report_every_s` what it still waits for (a device whose worker is down waits
    forever). A partition's result is its last attempt's: a run whose worker died is retried by
    the instance (`instance.retries`), or submitted again here where the instance refused the
    retry (`refused_retry`), and its events count with its retry's."""
    results: dict[str, SweepResult] = {}
    resubmitted: set[str] = set()  # failed runs submitted again: wait for the new attempt
    last_report = time.monotonic()
    while len(results) < expected:
        if stopped := stop_requested():
            raise Interrupted(stopped)  # the runs go on on the instance: Dagster owns them now
        runs = instance.get_runs(filters=dg.RunsFilter(tags={SWEEP_TAG: sweep_id}))
        attempts = attempts_by_partition(runs)
        for label, tries in sorted(attempts.items()):
            run = tries[-1]
            if label in results or run.run_id in resubmitted:
                continue
            if why := refused_retry(instance, tries):
                resubmitted.add(run.run_id)
                (on_progress or _to_stderr)(
                    f"{label}: run {run.run_id[:8]} failed {why}; submitting it again "
                    f"(attempt {len(tries) + 1})"
                )
                submit_backfill(instance, [label], sweep_id)
            elif settled(instance, run):
                events = [e.dagster_event for t in tries for e in instance.all_logs(t.run_id)]
                success = run.status == dg.DagsterRunStatus.SUCCESS
                results[label] = summarize(label, run.run_id, success, [e for e in events if e])
                if on_result:
                    on_result(results[label])
        waiting = len(results) < expected  # else "waiting for 0 runs" after the last result
        if on_progress and waiting and time.monotonic() - last_report >= report_every_s:
            last_report = time.monotonic()
            on_progress(_waiting_for([tries[-1] for tries in attempts.values()], results))
        if waiting:
            time.sleep(poll_s)
    return sorted(results.values(), key=lambda r: r.slug)


def _waiting_for(runs: list, results: dict) -> str:
    pending = [r for r in runs if r.tags.get("dagster/partition", r.run_id) not in results]
    listed = ", ".join(
        f"{r.tags.get('dagster/partition', r.run_id[:8])} ({r.status.value})" for r in pending
    )
    return (
        f"waiting for {len(pending)} runs: {listed or 'not created yet'}; a run that stays "
        "QUEUED or STARTING has no worker: 'aaco worker --target <device>' on its host"
    )


def control_false_discoveries(
    paths: AacoPaths, results: list[SweepResult], q: float = FDR_Q
) -> list[SweepResult]:
    """Benjamini-Hochberg over every drift series the sweep judged (`governance.drift.fdr`); the
    verdicts written back and the results' regressions re-read from them."""
    ids = [r.session_id for r in results if r.session_id]
    if not ids:
        return results
    regressed: dict[str, list[str]] = {sid: [] for sid in ids}
    lake = TraceLake(paths.tracelake)
    for row in control_sweep(lake, ids, q).to_pylist():
        if row["verdict"] == "regression" and row["metric"] in GATED_METRICS:
            regressed[row["session_id"]].append(row["metric"])
    sync_alerts(lake, ids)  # the sweep's verdicts are final now (governance.alerts.lifecycle)
    webhook = Webhook.from_env()
    if webhook is not None:  # no daemon ticks the sensor for a headless sweep
        deliver_due(lake, webhook)
    return [_after_fdr(r, regressed.get(r.session_id)) for r in results]


def _after_fdr(result: SweepResult, regressed: list[str] | None) -> SweepResult:
    if result.status != "regression" or regressed is None or regressed:
        return result
    return replace(result, status="ok", verdict="no_change (fdr_controlled)")


def dagster_home_for(paths: AacoPaths) -> Path:
    """DAGSTER_HOME when set, else AACO_HOME/dagster: the instance `aaco ui` also uses."""
    return Path(os.environ.get("DAGSTER_HOME") or paths.dagster_home)


def models_to_sweep(
    registry: Path, only: Sequence[str] | None, say: Callable[[str], None]
) -> list[RegisteredModel]:
    """The registry's models (or the `only` ones) that can be measured; each file that cannot
    is said in one line and skipped (the others are measured), and an `only` that names
    nothing else is its error."""
    scan = read_registry(registry)
    wanted = {model_slug(name) for name in only} if only else None
    skipped = {s: p for s, p in scan.problems.items() if wanted is None or s in wanted}
    for problem in skipped.values():
        say(f"not measured: {problem}")
    if wanted is not None and wanted <= set(skipped):
        raise next(iter(skipped.values()))
    if skipped and not scan.models:
        raise AacoInputError(
            f"none of the registry's models can be measured ({len(skipped)} said above)",
            path=registry,
            fix="fix the files named above",
        )
    rest = [name for name in only or () if model_slug(name) not in skipped]
    return select_models(scan.models, rest or None if only else None, registry)


def select_models(
    models: list[RegisteredModel], only: Sequence[str] | None, registry: Path
) -> list[RegisteredModel]:
    """All models, or those named in `only` (names or slugs); an unknown name is an error."""
    if not models:
        raise AacoInputError(
            "the registry has no models",
            path=registry,
            fix="add *.onnx files or run aaco zoo build",
        )
    if not only:
        return models
    wanted = {model_slug(name) for name in only}
    unknown = sorted(wanted - {m.slug for m in models})
    if unknown:
        raise AacoInputError(
            f"no registry models {unknown}",
            path=registry,
            fix=f"choose from {', '.join(m.slug for m in models)}",
        )
    return [m for m in models if m.slug in wanted]


def register_partitions(
    instance: dg.DagsterInstance, models: list[RegisteredModel], own_target: bool = True
) -> None:
    """Add the models' partitions, and this host's target when it measures, as the registry
    sensor would."""
    from aaco_pipelines.assets.partitions import models_partitions, targets_partitions

    for partitions, keys in (
        (models_partitions, [m.slug for m in models]),
        (targets_partitions, [default_target()] if own_target else []),
    ):
        existing = set(instance.get_dynamic_partitions(partitions.name))
        new = [key for key in keys if key not in existing]
        if new:
            instance.add_dynamic_partitions(partitions.name, new)


def path_resources(paths: AacoPaths) -> dict:
    """The registry and TraceLake of these paths (the Definitions read theirs at import time)."""
    from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource

    registry = ModelRegistryResource(
        home=str(paths.home), registry=str(paths.registry), tracelake=str(paths.tracelake)
    )
    return {"registry": registry, "tracelake": TraceLakeResource(database=str(paths.tracelake))}


def summarize(slug: str, run_id: str, success: bool, events: Sequence) -> SweepResult:
    """Status, session, p50 and verdict of one run, from its Dagster events (an in-process
    result's, or a launched run's from the event log)."""
    measured = [
        e.step_materialization_data.materialization
        for e in events
        if e.is_step_materialization and e.asset_key == dg.AssetKey("benchmark_run")
    ]
    meta = measured[0].metadata if measured else {}
    checks = {
        e.event_specific_data.check_name: e.event_specific_data
        for e in events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    gate = checks.get(REGRESSION_CHECK)
    verdicts = gate.metadata["verdicts"].value if gate else {}
    regressed = [m for m, v in verdicts.items() if v == "regression"]
    if success:
        status, error = "ok", None
    elif gate is not None and not gate.passed:
        status, error = "regression", None
    else:
        status, error = "failed", failure_message(events)
    return SweepResult(
        slug=slug,
        status=status,
        run_id=run_id,
        session_id=meta["session_id"].value if "session_id" in meta else None,
        # text on the asset (assets/session_page.py), a number here
        latency_p50_ms=float(meta["latency_p50_ms"].value) if "latency_p50_ms" in meta else None,
        verdict=f"regression ({', '.join(regressed)})"
        if regressed
        else verdicts.get("latency_p50_ns"),
        error=error,
    )


# Dagster turns SIGTERM and SIGINT during a step into this error; the sweep stops on it.
_INTERRUPTIONS = {"DagsterExecutionInterruptedError": "SIGTERM", "KeyboardInterrupt": "SIGINT"}


def interruption(events: Sequence) -> str | None:
    """The stop signal (by name) that ended a run's step, if one did."""
    for event in events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.step_failure_data.error
            while error is not None:
                if error.cls_name in _INTERRUPTIONS:
                    return _INTERRUPTIONS[error.cls_name]
                if error.cls_name == "Interrupted":
                    return error.message.rsplit(" ", 1)[-1].strip()
                error = error.cause
    return None


def failure_message(events: Sequence) -> str:
    """The innermost cause of the first step failure: the user's error, not Dagster's wrapper."""
    failure = next((e for e in events if e.event_type_value == "STEP_FAILURE"), None)
    if failure is None:  # ended from outside its steps: its worker died, it never started
        ended = [e.message for e in events if e.event_type_value == "RUN_FAILURE" and e.message]
        return ended[-1].strip().splitlines()[0] if ended else "the run failed before any step ran"
    error = failure.step_failure_data.error
    while error.cause is not None:
        error = error.cause
    message = error.message.strip().splitlines()[0]
    prefix, _, rest = message.partition(": ")
    return rest if rest and prefix.endswith(error.cls_name or "") else message

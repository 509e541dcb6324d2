"""The per-model measurement job, the review and bisection jobs, and the run tags every trigger
puts on its runs."""

import dagster as dg
from pydantic import Field

from aaco_pipelines.assets import (
    MODEL_ASSETS,
    NIGHT_ASSETS,
    TARGET_ASSETS,
    model_target_key,
    model_target_partitions,
    nights_partitions,
    targets_partitions,
)
from aaco_pipelines.instance import routes_runs
from aaco_pipelines.resources.registry import ModelRegistryResource
from aaco_pipelines.resources.runner import default_target
from aaco_pipelines.resources.tracelake import TraceLakeResource

DEVICE_TAG = "aaco/device"

measure_model_job = dg.define_asset_job(
    "measure_model",
    selection=dg.AssetSelection.assets(*MODEL_ASSETS),
    partitions_def=model_target_partitions,
    # The benchmark already runs in its own isolated measuring process; running the light stages
    # in the run process saves a Python start-up per step.
    executor_def=dg.in_process_executor,
    description="Measure one model end to end: graph, isolated benchmark, traces, TraceLake.",
)

calibrate_envelope_job = dg.define_asset_job(
    "calibrate_envelope",
    selection=dg.AssetSelection.assets(*TARGET_ASSETS),
    description="Measure the target's hardware envelope (peak GEMM FLOP/s, streaming bandwidth).",
)


review_night_job = dg.define_asset_job(
    "review_night",
    selection=dg.AssetSelection.assets(*NIGHT_ASSETS),
    partitions_def=nights_partitions,
    description="Judge a night's sweep as a whole: false discovery rate across all its series.",
)


class BisectConfig(dg.Config):
    """Launched from an alert (its id), or for two sessions of one model."""

    alert_id: str = Field("", description="a regression alert (aaco alert list): bisect it")
    good_session: str = Field("", description="or: a session before the change...")
    bad_session: str = Field("", description="...and one after it")
    runtimes: list[str] = Field(
        default_factory=list,
        description="bisect runtimes instead: environments (folders or interpreters) with other "
        "ONNX Runtimes, oldest first; the bad session's model version is measured under each",
    )
    rounds: int = Field(10, description="side-by-side rounds per comparison")


@dg.op(
    description="Which model version made the model slower: the versions between a good and a "
    "bad session measured side by side, about log2(n) steps (stages.bisect); or, given "
    "environments with other ONNX Runtimes, which runtime. The answer is stored and attached "
    "to the alert."
)
def bisect_versions_op(
    context: dg.OpExecutionContext,
    config: BisectConfig,
    tracelake: TraceLakeResource,
    registry: ModelRegistryResource,
) -> dict:
    from aaco_pipelines.stages.bisect import bisect, blamed

    row = bisect(tracelake.lake, registry.paths, alert=config.alert_id or None,
                 good=config.good_session or None, bad=config.bad_session or None,
                 runtimes=config.runtimes, rounds=config.rounds,
                 on_progress=context.log.info)  # fmt: skip
    last_good, first_bad = blamed(row)
    context.add_output_metadata(
        {
            "dimension": row["dimension"],
            "status": row["status"],
            "first_bad": first_bad or "-",
            "last_good": last_good or "-",
            "change_pct": row["change_pct"],
            "steps": row["steps"],
        }
    )
    return {k: v for k, v in row.items() if k != "created_at"}


@dg.job(
    description="Bisect a regression: launch it from an alert with its id "
    "(ops: bisect_versions_op: config: alert_id: ...), or for two sessions."
)
def bisect_regression_job():
    bisect_versions_op()


def run_tags(trigger: str, target: str | None = None, **extra: str) -> dict[str, str]:
    """Tags for a measurement run on `target` (default: this deployment's). The device tag lets
    the run queue allow one run per device (`tag_concurrency_limits` with
    applyLimitPerUniqueValue in dagster.yaml). No Celery queue tag: on a single host it would
    suggest that Celery must run; where runs are routed to device workers, the run launcher
    (instance/launcher.py) tags each run with its device's queue as it sends it."""
    device = target or default_target()
    return {DEVICE_TAG: device, "aaco/trigger": trigger, **extra}


def measured_targets(instance: dg.DagsterInstance) -> list[str]:
    """Every target some host measures on: the registered ones, and this deployment's own
    unless runs are routed to device workers (then the head measures nothing)."""
    registered = set(instance.get_dynamic_partitions(targets_partitions.name))
    own = set() if routes_runs(instance) else {default_target()}
    return sorted(registered | own)


def add_own_target(instance: dg.DagsterInstance) -> list[dg.AddDynamicPartitionsRequest]:
    """The request that registers this deployment's target, when it measures on it and it is
    not registered yet."""
    own = default_target()
    if routes_runs(instance) or own in instance.get_dynamic_partitions(targets_partitions.name):
        return []
    return [targets_partitions.build_add_request([own])]


def measure_request(run_key: str, slug: str, target: str, trigger: str, **tags) -> dg.RunRequest:
    """A run of the measure job for one model on one target, routed to that target."""
    return dg.RunRequest(
        run_key=run_key,
        job_name=measure_model_job.name,
        partition_key=model_target_key(slug, target),
        tags=run_tags(trigger, target, **tags),
    )

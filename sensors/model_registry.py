"""model_registry_sensor: a new or changed model file is measured; nothing else is.

Every model is measured on every target (`sensors.jobs.measured_targets`): the cursor maps each
model x target partition (`slug|target`) to the content key it was last requested for, so a
device registered later measures the models it has not seen. The run key is
`<slug>:<sha256>@<target>` (plus the sidecar's hash when there is one), so a file overwritten
with new content runs again while an unchanged one never does. Deleted models are left alone: their partition and
history stay. A model file that cannot be measured (two files of one slug, external data named
wrongly, a sidecar that would be refused: see registry.scan) is not requested: the sensor logs
one line naming it and the fix on every tick until it is fixed, and requests every other model.
"""

import json

import dagster as dg

from aaco_pipelines.assets.partitions import model_target_key, models_partitions
from aaco_pipelines.registry.scan import RegisteredModel, file_sha256, read_registry
from aaco_pipelines.resources import ModelRegistryResource
from aaco_pipelines.resources.runner import default_target
from aaco_pipelines.sensors.jobs import (
    add_own_target,
    measure_model_job,
    measure_request,
    measured_targets,
)


def content_key(model: RegisteredModel) -> str:
    """What a measurement of this model depends on: the model bytes and its sidecar's."""
    key = f"{model.slug}:{model.sha256}"
    if model.sidecar is not None:
        key += f":{file_sha256(model.sidecar)[:16]}"
    return key


@dg.sensor(
    job=measure_model_job,
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Watches the model registry folder; adds a partition and requests a measurement "
    "for every new or changed *.onnx file (or sidecar).",
)
def model_registry_sensor(context: dg.SensorEvaluationContext, registry: ModelRegistryResource):
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    scan = read_registry(registry.paths.registry)
    models = scan.models
    skipped = [f"not measured: {error}" for error in scan.problems.values()]
    for line in skipped:
        context.log.warning(line)
    targets = measured_targets(context.instance)
    changed = [
        (m, target)
        for m in models
        for target in targets
        if _last_requested(seen, m.slug, target) != content_key(m)
    ]
    own_target = add_own_target(context.instance)  # also for an instance from before targets
    if not changed:
        reason = f"{len(models)} models in {registry.registry} on {', '.join(targets)}, "
        return dg.SensorResult(
            skip_reason=" ".join([reason + "none new or changed.", *skipped]),
            dynamic_partitions_requests=own_target,
        )
    existing = set(context.instance.get_dynamic_partitions(models_partitions.name))
    new_slugs = sorted({m.slug for m, _ in changed} - existing)
    add_models = [models_partitions.build_add_request(new_slugs)] if new_slugs else []
    return dg.SensorResult(
        run_requests=[
            measure_request(
                f"{content_key(m)}@{target}",
                m.slug,
                target,
                "model_registry",
                **{"aaco/model_sha256": m.sha256},
            )
            for m, target in changed
        ],
        dynamic_partitions_requests=[*add_models, *own_target],
        cursor=json.dumps(
            {**seen, **{model_target_key(m.slug, t): content_key(m) for m, t in changed}},
            sort_keys=True,
        ),
    )


def _last_requested(seen: dict[str, str], slug: str, target: str) -> str | None:
    """The content key last requested for the model on the target. A cursor from before targets
    were partitions is keyed by slug alone: what it recorded was measured on this deployment's
    own target."""
    legacy = seen.get(slug) if target == default_target() else None
    return seen.get(model_target_key(slug, target), legacy)

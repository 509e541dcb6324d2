"""model_registry_sensor: a new or changed model file is measured; nothing else is.

The cursor maps each model's slug to the content key it was last requested for. The run key is
`<slug>:<sha256>` (plus the sidecar's hash when there is one), so a file overwritten with new content
runs again while an unchanged one never does. Deleted models are left alone: their partition and
history stay. Files whose names give one slug (see registry.scan) are not requested; the
sensor logs why on every tick until one is renamed.
"""

import json

import dagster as dg

from aaco_pipelines.registry.scan import RegisteredModel, file_sha256, slug_conflicts
from assets.partitions import models_partitions
from resources import ModelRegistryResource
from sensors.jobs import measure_model_job, run_tags


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
    models = registry.models()
    conflicts = [str(error) for error in slug_conflicts(registry.paths.registry).values()]
    for conflict in conflicts:
        context.log.warning(conflict)
    changed = [m for m in models if seen.get(m.slug) != content_key(m)]
    if not changed:
        return dg.SkipReason(
            " ".join(
                [f"{len(models)} models in {registry.registry}, none new or changed.", *conflicts]
            )
        )
    existing = set(context.instance.get_dynamic_partitions(models_partitions.name))
    new_slugs = [m.slug for m in changed if m.slug not in existing]
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=content_key(m),
                partition_key=m.slug,
                tags=run_tags("model_registry", **{"aaco/model_sha256": m.sha256}),
            )
            for m in changed
        ],
        dynamic_partitions_requests=[models_partitions.build_add_request(new_slugs)]
        if new_slugs
        else [],
        cursor=json.dumps({**seen, **{m.slug: content_key(m) for m in changed}}, sort_keys=True),
    )

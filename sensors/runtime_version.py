"""runtime_version_sensor: when the runtime changes under the models, measure them all again.

The fingerprint hashes the ROCm version, the GPU driver, and the ONNX Runtime version and
providers. The first evaluation only records it; every later change requests a sweep of every model
on this host's target, tagged with the new fingerprint.
"""

import json

import dagster as dg

from aaco_pipelines.assets.partitions import models_partitions
from aaco_pipelines.execution.environment import (
    capture_environment,
    fingerprint_parts,
    runtime_fingerprint,
)
from aaco_pipelines.resources.runner import default_target
from aaco_pipelines.sensors.jobs import (
    add_own_target,
    calibrate_envelope_job,
    measure_model_job,
    measure_request,
    run_tags,
)


def current_runtime() -> tuple[str, dict]:
    env = capture_environment()
    return runtime_fingerprint(env), fingerprint_parts(env)


@dg.sensor(
    jobs=[measure_model_job, calibrate_envelope_job],
    minimum_interval_seconds=300,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="When the ROCm / GPU driver / ONNX Runtime fingerprint changes: re-measures the "
    "hardware envelope, then requests a sweep of every model.",
)
def runtime_version_sensor(context: dg.SensorEvaluationContext):
    fingerprint, parts = current_runtime()
    previous = json.loads(context.cursor) if context.cursor else None
    cursor = json.dumps({"fingerprint": fingerprint, "parts": parts}, sort_keys=True)
    if previous is None:
        return dg.SensorResult(
            skip_reason=f"recorded runtime fingerprint {fingerprint[:12]}", cursor=cursor
        )
    if previous["fingerprint"] == fingerprint:
        return dg.SkipReason(f"runtime unchanged ({fingerprint[:12]})")
    changed = {
        k: [previous["parts"].get(k), v] for k, v in parts.items() if previous["parts"].get(k) != v
    }
    context.log.info(f"runtime changed: {changed}")
    slugs = context.instance.get_dynamic_partitions(models_partitions.name)
    tags = run_tags("runtime_version", **{"aaco/runtime_fingerprint": fingerprint})
    envelope = dg.RunRequest(
        run_key=f"runtime:{fingerprint}:envelope", job_name=calibrate_envelope_job.name, tags=tags
    )
    # This host's runtime changed: its own target's models are measured again.
    sweep = [
        measure_request(
            f"runtime:{fingerprint}:{slug}",
            slug,
            default_target(),
            "runtime_version",
            **{"aaco/runtime_fingerprint": fingerprint},
        )
        for slug in slugs
    ]
    return dg.SensorResult(
        run_requests=[envelope, *sweep],
        dynamic_partitions_requests=add_own_target(context.instance),
        cursor=cursor,
    )

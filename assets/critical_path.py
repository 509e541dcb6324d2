"""critical_path: which nodes each iteration waits for, their slack, and what making each
faster would gain end to end (share is not impact)."""

from pathlib import Path

import dagster as dg

from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import session_page
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.report.units import by_unit, duration
from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource
from aaco_pipelines.stages.critical_path import find_critical_path


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="analysis",
    kinds={"duckdb"},
    pool=TRACELAKE_WRITER_POOL,
    description="Builds each profiled iteration's dependency DAG (node executions on host "
    "threads, or kernels on device queues behind their launches), finds its critical path, every "
    "node's slack and overlap, and re-times the DAG to rank nodes by the end-to-end time a 2x "
    "faster node would save.",
)
def critical_path(
    context: dg.AssetExecutionContext,
    kernel_attribution: dict,
    tracelake: TraceLakeResource,
    registry: ModelRegistryResource,
) -> dict:
    lake = tracelake.lake
    path = find_critical_path(lake, SessionBundle(Path(kernel_attribution["bundle_path"])))
    summary = path.summary
    if summary is None:
        metadata = {
            "session_id": path.session_id,
            "critical_path": "no profiled iterations to re-time",
        }
    else:
        page = session_page(registry.paths.home, lake, path.session_id, ("critical-path",))
        metadata = {
            **page,
            "dag": summary["dag"],
            "critical_path_per_iteration": duration(summary["path_p50_ns"]),
            "host_share_of_path": by_unit(summary["host_share"], "fraction"),
        }
    context.add_output_metadata(metadata)
    return kernel_attribution

"""critical_path: which nodes each iteration waits for, their slack, and what making each
faster would gain end to end (share is not impact)."""

import json
from pathlib import Path

import dagster as dg

from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import session_links
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.report.markdown_tables import markdown_table, ms, pct
from aaco_pipelines.report.units import by_unit, duration
from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource
from aaco_pipelines.stages.critical_path import CriticalPath, find_critical_path


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
    path = find_critical_path(
        tracelake.lake, SessionBundle(Path(kernel_attribution["bundle_path"]))
    )
    context.add_output_metadata(_metadata(path, registry.paths.home))
    return kernel_attribution


def _metadata(path: CriticalPath, home) -> dict:
    summary = path.summary
    if summary is None:
        return {"session_id": path.session_id, "critical_path": "no profiled iterations to re-time"}
    return {
        "session_id": path.session_id,
        **session_links(home, path.session_id),
        "dag": summary["dag"],
        "critical_path_per_iteration": duration(summary["path_p50_ns"]),
        "host_share_of_path": by_unit(summary["host_share"], "fraction"),
        "parallelism": f"{summary['parallelism']:.2f}" if summary["parallelism"] else "—",
        "fix_first": dg.MetadataValue.md(fix_first_table(path.nodes.to_pylist(), 10)),
        "caveats": "; ".join(json.loads(summary["caveats_json"] or "[]")) or "none",
    }


def fix_first_table(rows: list[dict], limit: int) -> str:
    """The nodes by end-to-end gain at 2x, with the share they hold (share is not impact)."""
    ranked = [r for r in rows if r["gain_2x_ns"] is not None][:limit]
    return markdown_table(
        ranked,
        [
            ("onnx_node", "node", None),
            ("runtime_node", "runtime node", None),
            ("gain_2x_ns", "gain at 2x, ms", ms),
            ("kernel_ns", "time, ms", ms),
            ("critical_ns", "on path, ms", ms),
            ("slack_ns", "slack, ms", ms),
            ("share", "of runtime node", pct),
        ],
    )

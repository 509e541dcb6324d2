"""tracelake_session: the session loaded into the DuckDB TraceLake, with data-quality checks.

The checks run inside the asset, right after the load, against the session it just wrote.
"""

from pathlib import Path

import dagster as dg

from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.tracelake.queries import session_quality
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION
from assets.partitions import models_partitions
from resources import TraceLakeResource

MIN_TELEMETRY_HZ = 10.0

CHECKS = [
    dg.AssetCheckSpec(
        "iterations_complete",
        asset="tracelake_session",
        blocking=True,
        description="Every requested measured and profiled iteration is in the TraceLake, once.",
    ),
    dg.AssetCheckSpec(
        "kernel_trace_present",
        asset="tracelake_session",
        description="The kernel trace covers every profiled iteration with node events.",
    ),
    dg.AssetCheckSpec(
        "telemetry_rate",
        asset="tracelake_session",
        description=f"Host telemetry was sampled at {MIN_TELEMETRY_HZ:.0f} Hz or more.",
    ),
]


@dg.asset(
    partitions_def=models_partitions,
    group_name="ingest",
    kinds={"duckdb"},
    pool="aaco_duckdb_writer",  # one TraceLake writer at a time
    check_specs=CHECKS,
    description="Loads the session, its iterations, kernel events, telemetry and the model graph "
    "into the DuckDB TraceLake in one transaction; re-materializing replaces the session.",
)
def tracelake_session(
    context: dg.AssetExecutionContext, collected_traces: dict, tracelake: TraceLakeResource
):
    bundle = SessionBundle(Path(collected_traces["bundle_path"]))
    counts = tracelake.lake.ingest_session(bundle)
    yield dg.Output(
        {"session_id": bundle.session_id, "bundle_path": str(bundle.path)},
        metadata={
            "session_id": bundle.session_id,
            "tracelake": dg.MetadataValue.path(tracelake.database),
            "schema_version": SCHEMA_VERSION,
            **{f"rows_{name}": n for name, n in counts.items()},
        },
    )
    yield from quality_checks(session_quality(tracelake.lake, bundle.session_id))


def quality_checks(q: dict):
    """The three data-quality verdicts on one landed session."""
    yield dg.AssetCheckResult(
        check_name="iterations_complete",
        passed=q["session_rows"] == 1
        and q["measured_rows"] == q["measured_requested"]
        and q["profiled_rows"] == q["profiled_requested"],
        metadata={
            k: q[k]
            for k in (
                "session_rows",
                "measured_rows",
                "measured_requested",
                "profiled_rows",
                "profiled_requested",
            )
        },
    )
    yield dg.AssetCheckResult(
        check_name="kernel_trace_present",
        passed=q["iterations_with_node_events"] == q["profiled_requested"],
        metadata={"iterations_with_node_events": q["iterations_with_node_events"]},
    )
    rate = q["telemetry_hz"] or 0.0
    yield dg.AssetCheckResult(
        check_name="telemetry_rate",
        passed=rate >= MIN_TELEMETRY_HZ,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "sampling_hz": rate,
            "samples": q["telemetry_samples"],
            "samples_in_measured_pass": q["measured_telemetry_samples"],
        },
    )

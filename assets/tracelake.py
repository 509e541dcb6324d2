"""tracelake_session: the session loaded into the DuckDB TraceLake, with data-quality checks.

The checks run inside the asset, right after the load, against the session it just wrote.
"""

from pathlib import Path

import dagster as dg

from aaco_pipelines.assets.partitions import model_target_partitions
from aaco_pipelines.assets.session_page import as_text, session_page
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import TRACELAKE_WRITER_POOL
from aaco_pipelines.resources import ModelRegistryResource, TraceLakeResource
from aaco_pipelines.stages.load import LoadedSession, load
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION

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
    dg.AssetCheckSpec(
        "measurement_trusted",
        asset="tracelake_session",
        description="Nothing disturbed the measured pass: other processes took at most 20 % of "
        "the host's CPU, p99 within 3x p50, the mean within 1.5x, few far outliers "
        "(analysis/metrics/measurement_quality.py). A suspect session is left out of new baselines.",
    ),
    dg.AssetCheckSpec(
        "generation_complete",
        asset="tracelake_session",
        blocking=True,
        description="An LLM generation session: every batch ran a prefill and one decode step per "
        "further token, its KV cache grew one position a step, and every request is there.",
    ),
]


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="measurement",
    kinds={"duckdb"},
    pool=TRACELAKE_WRITER_POOL,  # one TraceLake writer at a time
    check_specs=CHECKS,
    description="Loads the session, its iterations, kernel events, telemetry and the model graph "
    "into the DuckDB TraceLake in one transaction; re-materializing replaces the session.",
)
def tracelake_session(
    context: dg.AssetExecutionContext,
    collected_traces: dict,
    tracelake: TraceLakeResource,
    registry: ModelRegistryResource,
):
    lake = tracelake.lake
    with lake.reading():  # the load's checks and its page share one open of the lake
        loaded = load(lake, SessionBundle(Path(collected_traces["bundle_path"])))
        # the latency with its intervals; a generation session's figures, curves and
        # TTFT/TPOT distributions too
        page = session_page(
            registry.paths.home,
            lake,
            loaded.session_id,
            sections=("summary", "generation"),
            plots=("generation-curves", "token-latencies"),
        )
    yield dg.Output(
        {"session_id": loaded.session_id, "bundle_path": collected_traces["bundle_path"]},
        metadata=as_text(
            {
                **page,
                "tracelake": dg.MetadataValue.path(tracelake.database),
                "schema_version": SCHEMA_VERSION,
                **{f"rows_{name}": n for name, n in loaded.row_counts.items()},
                "measurement": loaded.measurement.line(),
            }
        ),
    )
    yield from quality_checks(loaded.quality)
    yield measurement_check(loaded)
    yield generation_check(loaded)


def measurement_check(loaded: LoadedSession) -> dg.AssetCheckResult:
    """measurement_trusted: a warning with the reasons and the figures they rest on."""
    q = loaded.measurement
    figures = {  # ratios, the same for every model: numbers (assets/session_page.py)
        "verdict": q.verdict,
        "iterations": str(q.iterations),
        "host_contention": q.host_contention,
        "p99_over_p50": q.p99_over_p50,
        "mean_over_p50": q.mean_over_p50,
        "outlier_share": q.outlier_share,
        "cv": q.cv,
    }
    return dg.AssetCheckResult(
        check_name="measurement_trusted",
        passed=not q.suspect,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            **{k: v for k, v in figures.items() if v is not None},
            "reasons": "; ".join(q.reasons + q.cautions) or "none",
        },
    )


def generation_check(loaded: LoadedSession) -> dg.AssetCheckResult:
    """generation_complete: passes trivially (and says so) for a forward-pass session."""
    q = loaded.generation_quality
    return dg.AssetCheckResult(
        check_name="generation_complete",
        passed=not loaded.broken_generation_rules,
        metadata=as_text(q) if q["batches"] else {"workload": "forward passes: nothing to check"},
    )


def quality_checks(q: dict):
    """The three data-quality verdicts on one landed session."""
    yield dg.AssetCheckResult(
        check_name="iterations_complete",
        passed=q["session_rows"] == 1
        and q["measured_rows"] == q["measured_requested"]
        and q["profiled_rows"] == q["profiled_requested"],
        metadata=as_text(
            {
                k: q[k]
                for k in (
                    "session_rows",
                    "measured_rows",
                    "measured_requested",
                    "profiled_rows",
                    "profiled_requested",
                )
            }
        ),
    )
    yield dg.AssetCheckResult(
        check_name="kernel_trace_present",
        passed=q["iterations_with_node_events"] == q["profiled_requested"],
        metadata=as_text({"iterations_with_node_events": q["iterations_with_node_events"]}),
    )
    rate = q["telemetry_hz"] or 0.0
    yield dg.AssetCheckResult(
        check_name="telemetry_rate",
        passed=rate >= MIN_TELEMETRY_HZ,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "sampling_hz": rate,
            **as_text(
                {
                    "samples": q["telemetry_samples"],
                    "samples_in_measured_pass": q["measured_telemetry_samples"],
                }
            ),
        },
    )

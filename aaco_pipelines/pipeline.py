"""The pipeline as plain functions: prepare → benchmark → collect → ingest → analyze.

Dagster assets call these stages one by one (so each is its own asset with its own metadata); the
command line and the benchmarks call `measure_model` to run them all without a Dagster instance.
There is one implementation of each stage, and it lives here or below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from aaco_pipelines.analysis import session as analysis
from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.collectors.bundle_tables import collect_session
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.laboratory import laboratory_settings
from aaco_pipelines.execution.runner import (
    BenchmarkRequest,
    RunnerLimits,
    new_session_id,
    run_benchmark,
)
from aaco_pipelines.governance.series import drift_rows
from aaco_pipelines.graph.store import ModelVersion, prepare_model_version
from aaco_pipelines.registry.identity import check_series_owner
from aaco_pipelines.registry.scan import RegisteredModel
from aaco_pipelines.registry.sidecar import ModelSidecar
from aaco_pipelines.session_folders import clean_leftovers, quarantine_on_failure
from aaco_pipelines.tracelake.store import TraceLake


@dataclass(frozen=True)
class MeasureOptions:
    target: str = "cpu"
    laboratory: bool = False
    laboratory_cores: tuple[int, ...] | None = None
    providers: tuple[str, ...] | None = None  # overrides the sidecar's preference
    seed: int = 0
    limits: RunnerLimits = field(default_factory=RunnerLimits)
    # Override the sidecar's counts; an explicit measured count is exact (no minimum duration).
    measured_iterations: int | None = None
    profiled_iterations: int | None = None


def iteration_counts(sidecar: ModelSidecar, options: MeasureOptions) -> ModelSidecar:
    """The sidecar with the options' iteration overrides applied."""
    changes: dict = {}
    if options.measured_iterations is not None:
        changes.update(measured_iterations=options.measured_iterations, min_measured_seconds=0.0)
    if options.profiled_iterations is not None:
        changes["profiled_iterations"] = options.profiled_iterations
    return replace(sidecar, **changes)


def benchmark_version(
    version: ModelVersion,
    paths: AacoPaths,
    options: MeasureOptions = MeasureOptions(),
    on_progress: Callable[[str], None] | None = None,
) -> SessionBundle:
    """Run one isolated, measured session of a model version; returns its published bundle.
    What earlier interrupted runs left behind is quarantined first."""
    check_series_owner(paths.tracelake, version.slug, version.name, version.registry_path)
    clean_leftovers(paths)
    sidecar = iteration_counts(version.sidecar, options)
    request = BenchmarkRequest(
        session_id=new_session_id(version.slug),
        model_name=version.name,
        model_slug=version.slug,
        model_sha256=version.sha256,
        model_path=str(version.snapshot_path),
        inputs=version.input_specs,
        warmup_iterations=sidecar.warmup_iterations,
        measured_iterations=sidecar.measured_iterations,
        min_measured_seconds=sidecar.min_measured_seconds,
        profiled_iterations=sidecar.profiled_iterations,
        providers=tuple(options.providers or sidecar.execution_providers),
        graph_optimization_level=sidecar.graph_optimization_level,
        disabled_optimizers=sidecar.disabled_optimizers,
        target=options.target,
        laboratory=laboratory_settings(options.laboratory_cores) if options.laboratory else None,
        seed=options.seed,
        sidecar_path=str(version.sidecar_path) if version.sidecar_path else None,
        tags=dict(sidecar.tags),
        generation=version.generation,
    )
    return run_benchmark(
        request, paths, limits=options.limits, graph_dir=version.graph_dir, on_progress=on_progress
    )


def collect_bundle(bundle: SessionBundle) -> dict[str, int]:
    """Parse the bundle's raw evidence into its normalized tables (tables/*.parquet)."""
    return collect_session(bundle)


def analyze_session(bundle: SessionBundle, paths: AacoPaths, target: str = "cpu") -> dict:
    """Attribution, envelope, bottleneck and drift verdicts for an ingested session."""
    lake = TraceLake(paths.tracelake)
    tables = analysis.attribute(lake, bundle)
    # A trace ingested from a GPU is judged against that GPU, never against this host.
    choice = analysis.session_envelope(lake, bundle.session_id, target)
    report, utilization = analysis.explain(
        lake,
        bundle.session_id,
        analysis.metrics_of(tables),
        choice.envelope_id,
        choice.envelope,
        note=choice.note,
    )
    verdicts = drift_rows(lake, bundle.session["model_slug"], bundle.session_id)
    lake.replace_session_rows(bundle.session_id, {"drift_verdicts": verdicts}, complete=True)
    return {
        "bottleneck": report.bottleneck,
        "confidence": report.confidence,
        "envelope_source": choice.source,
        "envelope_note": choice.note,
        "hardware_envelope_utilization": (
            utilization.hardware_envelope_utilization if utilization else None
        ),
        "verdicts": dict(
            zip(verdicts["metric"].to_pylist(), verdicts["verdict"].to_pylist(), strict=True)
        ),
    }


def measure_model(
    model: RegisteredModel,
    paths: AacoPaths,
    options: MeasureOptions = MeasureOptions(),
    on_progress: Callable[[str], None] | None = None,
    analyze: bool = False,
) -> SessionBundle:
    """Every measurement stage for one registered model, ending with the session in the
    TraceLake; `analyze=True` also runs the analysis stages on it. The session becomes visible
    to readers only when every stage asked for is done; a failure or a stop signal on the way
    moves the bundle to failed/ and removes its rows."""
    say = on_progress or (lambda message: None)
    version, _graph = prepare_model_version(model, paths)
    bundle = benchmark_version(version, paths, options, on_progress)
    lake = TraceLake(paths.tracelake)
    with quarantine_on_failure(bundle.path, paths, lake):
        say("collecting the session's tables and loading them into the TraceLake")
        collect_bundle(bundle)
        lake.ingest_session(bundle, complete=not analyze)
        if analyze:
            say("analysing (a new runtime first measures its hardware envelope)")
            analyze_session(bundle, paths, options.target)
    return bundle

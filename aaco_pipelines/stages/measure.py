"""Measure (benchmark_run): one isolated, measured session of a model version.

The measuring process runs warm-up, the measured pass with profiling off and a separate profiled
pass, with host telemetry sampled throughout (execution.runner); what it leaves is published as
an immutable session bundle. What earlier interrupted runs left behind is quarantined first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.collectors.bundle_tables import measured_latency_figures
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.laboratory import laboratory_settings
from aaco_pipelines.execution.runner import (
    BenchmarkRequest,
    RunnerLimits,
    new_session_id,
    run_benchmark,
)
from aaco_pipelines.execution.session_folders import clean_leftovers
from aaco_pipelines.graph.store import ModelVersion
from aaco_pipelines.registry.identity import check_series_owner
from aaco_pipelines.registry.objectives import merged, registry_objectives
from aaco_pipelines.registry.sidecar import ModelSidecar


@dataclass(frozen=True)
class MeasureOptions:
    target: str = "cpu"
    laboratory: bool = False
    laboratory_cores: tuple[int, ...] | None = None
    providers: tuple[str, ...] | None = None  # overrides the sidecar's preference
    seed: int = 0
    limits: RunnerLimits = field(default_factory=RunnerLimits)
    timeout_given: bool = False  # limits.timeout_s was asked for (aaco run --timeout)
    # Override the sidecar's counts; an explicit count is exact: measured, with no minimum
    # duration; profiled, never grown for a noisy measured pass (execution.profiled_count).
    measured_iterations: int | None = None
    profiled_iterations: int | None = None
    counters: bool | None = None  # hardware counter passes; None: as the sidecar says


@dataclass(frozen=True)
class MeasuredSession:
    """A published session bundle and the figures of its measured pass."""

    bundle: SessionBundle
    figures: dict  # measured_latency_figures: p50, p99, mean, throughput, profiling overhead
    requests: int  # measured iterations, or a generation session's measured requests

    @property
    def generation(self) -> dict | None:
        """The LLM generation plan, when the session generated text instead of forward passes."""
        return self.bundle.request.get("generation")


def iteration_counts(sidecar: ModelSidecar, options: MeasureOptions) -> ModelSidecar:
    """The sidecar with the options' iteration overrides applied."""
    changes: dict = {}
    if options.measured_iterations is not None:
        changes.update(measured_iterations=options.measured_iterations, min_measured_seconds=0.0)
    if options.profiled_iterations is not None:
        changes["profiled_iterations"] = options.profiled_iterations
    return replace(sidecar, **changes)


def run_limits(options: MeasureOptions, sidecar: ModelSidecar) -> RunnerLimits:
    """The runner's limits, with the model's own time limit (the sidecar's `timeout_s`) unless
    one was asked for on the command line (aaco run --timeout)."""
    if sidecar.timeout_s is None or options.timeout_given:
        return options.limits
    return replace(options.limits, timeout_s=sidecar.timeout_s)


def check_target(target: str, options: MeasureOptions) -> None:
    """A run for another device's target is refused: its numbers would be recorded as that
    device's."""
    if target != options.target:
        raise AacoInputError(
            f"this run is for target {target}, and this process measures on {options.target} "
            "(AACO_TARGET): it would record another device's numbers as this one's",
            fix=f"let the host that owns {target} measure it: 'aaco worker --target {target}' "
            "there, with runs routed (README, 'Scaling out')",
        )


def model_objectives(version: ModelVersion, registry: Path, target: str) -> dict[str, float]:
    """The limits the session is judged against: the registry file's, then the sidecar's, for
    its target (registry.objectives)."""
    shared = registry_objectives(registry, version.name, version.slug)
    return merged(shared, version.sidecar.objectives).for_target(target)


def measure(
    version: ModelVersion,
    paths: AacoPaths,
    options: MeasureOptions = MeasureOptions(),
    on_progress: Callable[[str], None] | None = None,
) -> MeasuredSession:
    """Run one isolated, measured session of a model version; its published bundle."""
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
        profiled_iterations_exact=options.profiled_iterations is not None,
        providers=tuple(options.providers or sidecar.execution_providers),
        graph_optimization_level=sidecar.graph_optimization_level,
        disabled_optimizers=sidecar.disabled_optimizers,
        execution_mode=sidecar.execution_mode,
        inter_op_threads=sidecar.inter_op_threads,
        intra_op_threads=sidecar.intra_op_threads,
        streams=sidecar.streams,
        target=options.target,
        laboratory=laboratory_settings(options.laboratory_cores) if options.laboratory else None,
        seed=options.seed,
        sidecar_path=str(version.sidecar_path) if version.sidecar_path else None,
        tags=dict(sidecar.tags),
        generation=version.generation,
        counters=sidecar.counters if options.counters is None else options.counters,
        objectives=model_objectives(version, paths.registry, options.target),
    )
    if request.laboratory and request.laboratory.warning and on_progress:
        on_progress(request.laboratory.warning)  # busy cores are said, never silently used
    bundle = run_benchmark(
        request,
        paths,
        limits=run_limits(options, sidecar),
        graph_dir=version.graph_dir,
        on_progress=on_progress,
    )
    latencies = bundle.read_json("latencies.json")
    measured = np.asarray(latencies["measured"]["latency_ns"], dtype=np.float64)
    profiled = np.asarray(latencies["profiled"]["latency_ns"], dtype=np.float64)
    return MeasuredSession(bundle, measured_latency_figures(measured, profiled), len(measured))

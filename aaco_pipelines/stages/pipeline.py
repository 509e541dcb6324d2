"""The stages in order, without Dagster: `aaco run`, `aaco ingest` and the benchmarks.

The Dagster assets call the same stage functions one by one (each its own asset, with its own
metadata); here they run back to back in one process. The session becomes visible to readers
only when every stage asked for is done; a failure or a stop signal on the way moves the bundle
to failed/ and removes its rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.session_folders import quarantine_on_failure
from aaco_pipelines.registry.scan import RegisteredModel
from aaco_pipelines.stages.attribute import attribute
from aaco_pipelines.stages.collect import collect
from aaco_pipelines.stages.critical_path import find_critical_path
from aaco_pipelines.stages.diagnose import diagnose
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.stages.judge_drift import judge_drift
from aaco_pipelines.stages.load import LoadedSession, load
from aaco_pipelines.stages.measure import MeasureOptions, measure
from aaco_pipelines.stages.prepare import prepare_model_version
from aaco_pipelines.tracelake.store import TraceLake

Progress = Callable[[str], None]


def measure_model(
    model: RegisteredModel,
    paths: AacoPaths,
    options: MeasureOptions | None = None,
    on_progress: Progress | None = None,
    analyze: bool = False,
) -> SessionBundle:
    """prepare → measure → collect → load for one registered model, ending with the session in
    the TraceLake; `analyze=True` also attributes, diagnoses and judges its drift."""
    say = on_progress or (lambda message: None)
    options = options or MeasureOptions()
    version, _graph = prepare_model_version(model, paths)
    bundle = measure(version, paths, options, on_progress).bundle
    lake = TraceLake(paths.tracelake)
    with quarantine_on_failure(bundle.path, paths, lake):
        say("collecting the session's tables and loading them into the TraceLake")
        collect(bundle)
        check_generation(load(lake, bundle, complete=not analyze), model)
        if analyze:
            analyze_session(bundle, paths, options.target, say)
    return bundle


def check_generation(loaded: LoadedSession, model: RegisteredModel) -> None:
    """A generation session that broke a rule of generation (a cache that does not grow, a
    missing step) is refused, as the Dagster check `generation_complete` blocks it: its
    figures would describe something other than generating text."""
    broken = loaded.broken_generation_rules
    if broken:
        raise AacoInputError(
            f"the generation session of {model.name} broke the rules of generation: "
            + "; ".join(broken),
            path=model.path,
            fix="each decode step must return the cache it was given with the new position "
            "appended (present.* = past_key_values.* + one position): check the model's exporter",
        )


def analyze_session(
    bundle: SessionBundle, paths: AacoPaths, target: str = "cpu", say: Progress | None = None
) -> dict:
    """attribute → critical path → diagnose → judge drift for a loaded session, each stage
    announced as it starts (a long trace's analysis takes minutes); its headline findings."""
    say = say or (lambda message: None)
    lake = TraceLake(paths.tracelake)
    say("analysing: attribution")
    attribution = attribute(lake, bundle)
    say("analysing: critical path and what-ifs")
    find_critical_path(lake, bundle)
    say("analysing: bottleneck (a new runtime first measures its hardware envelope)")
    # A trace ingested from a GPU is judged against that GPU, never against this host.
    diagnosis = diagnose(lake, bundle.session_id, attribution.metrics, target)
    say("analysing: drift")
    drift = judge_drift(lake, bundle)
    if drift.alerts_error:
        say(f"warning: the session is stored, its alerts were not updated ({drift.alerts_error})")
    utilization = diagnosis.utilization
    return {
        "bottleneck": diagnosis.report.bottleneck,
        "confidence": diagnosis.report.confidence,
        "decided": diagnosis.report.decided,
        "undecided_reason": diagnosis.report.undecided_reason,
        "envelope_source": diagnosis.choice.source,
        "envelope_note": diagnosis.choice.note,
        "hardware_envelope_utilization": (
            utilization.hardware_envelope_utilization if utilization else None
        ),
        "verdicts": drift.by_metric,
    }


def ingest_and_analyze(
    trace: Path,
    paths: AacoPaths,
    *,
    model: Path | None = None,
    name: str | None = None,
    on_progress: Progress | None = None,
) -> tuple[SessionBundle, dict]:
    """A trace collected elsewhere as a session (ingest_trace), then analysed like a measured
    one; it becomes visible once analysed, and on a failure neither bundle nor rows remain."""
    say = on_progress or (lambda message: None)
    bundle = ingest_trace(trace, paths, model=model, name=name, complete=False, on_progress=say)
    with quarantine_on_failure(bundle.path, paths, TraceLake(paths.tracelake)):
        return bundle, analyze_session(bundle, paths, say=say)

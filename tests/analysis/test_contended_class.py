"""A class describes the model: on a contended measurement it rests on what contention does not
move, or is left undecided; a trace gets no host advice; the advice is short and applies."""

from __future__ import annotations

import pytest

from aaco_pipelines.analysis.bottleneck.actions import (
    MAX_ACTIONS,
    SessionFacts,
    class_actions,
    measure_again,
    worth_reading,
)
from aaco_pipelines.analysis.bottleneck.classification import classify_bottleneck
from aaco_pipelines.analysis.bottleneck.contention import HOST_SIGNALS, HOST_TIMED, judging
from aaco_pipelines.analysis.metrics.measurement_quality import (
    MeasurementQuality,
    contention_slowdown_bound,
)


def _quality(reasons: list[str], contention: float | None = 0.7) -> MeasurementQuality:
    verdict = "suspect" if reasons else "ok"
    return MeasurementQuality("s", verdict, reasons, 100, contention, 0.1, 1.2, 1.0, 0.0, None, [])


BUSY = _quality(["other processes took 70% of the host's CPU time meanwhile"])
TAIL_ONLY = _quality(["p99 is 4.0x p50"], contention=0.05)

# memory_bound's signals under two busy loops on a 2-core host, the way they read there: the
# host-timed ones stretched (long "kernels", low utilization, runqueue full) and the graph's
# intensity and roof time as on a quiet host.
MEMORY_BOUND_BUSY = {
    "launch_tax": 0.35,
    "microkernel_share": 0.1,
    "mean_kernel_us": 900.0,
    "compute_utilization": 0.01,
    "memory_utilization": 0.08,
    "arithmetic_intensity_ratio": 0.02,
    "roof_time_per_node_us": 1500.0,
    "runqueue_wait_ratio": 0.95,
    "involuntary_switches_per_s": 300.0,
    "clock_drop": 0.0,
    "clock_cv": 0.0,
}


def _classify(evidence, quality, trace_source="ort_profile", ingested=False):
    judged = judging(quality, trace_source=trace_source, ingested=ingested)
    return classify_bottleneck(
        evidence, set_aside=judged.set_aside, classes=judged.classes, context=judged.context
    )


def test_contention_on_a_cpu_profile_sets_aside_every_host_timed_signal():
    judged = judging(BUSY, trace_source="ort_profile", ingested=False)
    assert set(judged.set_aside) == set(HOST_SIGNALS) | set(HOST_TIMED)
    assert judged.classes == ("launch-bound", "memory-bound", "compute-bound")
    assert judged.context.startswith("other processes took 70% of the host's CPU time")


def test_contention_on_a_gpu_trace_sets_aside_only_the_host_gaps():
    """Kernel times the GPU measured are not the host's: only the launch gaps and the run queue
    are moved, and throttling can still be judged from the GPU's clock."""
    judged = judging(BUSY, trace_source="rocprofv3", ingested=False)
    assert set(judged.set_aside) == {*HOST_SIGNALS, "launch_tax"}
    assert "throttled" in judged.classes and "cpu-bound" not in judged.classes


def test_a_tail_without_contention_judges_everything():
    assert judging(TAIL_ONLY, trace_source="ort_profile", ingested=False).set_aside == {}
    assert judging(None, trace_source="ort_profile", ingested=False).set_aside == {}


def test_a_busy_host_does_not_make_the_model_cpu_bound():
    """Judged on every signal, the full run queue calls this memory-bound model cpu-bound; on
    what contention does not move, it is memory-bound, decided."""
    assert classify_bottleneck(MEMORY_BOUND_BUSY).bottleneck == "cpu-bound"
    report = _classify(MEMORY_BOUND_BUSY, BUSY)
    assert (report.bottleneck, report.decided) == ("memory-bound", True), report.posterior
    assert report.posterior["cpu-bound"] == 0.0
    shown = {item.signal: item for item in report.evidence}
    assert shown["runqueue_wait_ratio"].value == 0.95  # shown...
    assert shown["runqueue_wait_ratio"].bin == "set aside: moved by contention"  # ...not judged
    assert shown["runqueue_wait_ratio"].likelihoods == {}


def test_evidence_that_cannot_settle_it_leaves_the_class_undecided():
    """An intensity near the ridge and a middling roof time: on a busy host nothing else may be
    judged, and no class reaches an even chance."""
    middling = {
        **MEMORY_BOUND_BUSY,
        "arithmetic_intensity_ratio": 1.0,
        "roof_time_per_node_us": 8.0,
    }
    report = _classify(middling, BUSY)
    assert not report.decided
    assert report.undecided_reason.startswith("other processes took 70%")
    assert f"{report.bottleneck} leads at {report.confidence:.2f}" in report.undecided_reason
    assert "on arithmetic_intensity_ratio, roof_time_per_node_us" in report.undecided_reason


def test_an_ingested_trace_is_never_cpu_bound_nor_advised_about_the_host():
    """A GPU trace whose kernels leave gaps: its class and advice come from the trace alone."""
    gaps = {"launch_tax": 0.5, "mean_kernel_us": 80.0, "microkernel_share": 0.1}
    report = _classify(gaps, None, trace_source="rpd", ingested=True)
    assert report.posterior["cpu-bound"] == 0.0
    facts = SessionFacts(trace_source="rpd", ingested=True)
    actions = " ".join(action for action, _ in class_actions(report, facts))
    assert "laboratory" not in actions and "threads" not in actions
    assert "ORT_ENABLE_ALL" not in actions  # measured by something other than ONNX Runtime


def test_gpu_library_tuning_is_advised_only_where_a_rocm_provider_ran():
    compute = classify_bottleneck(
        {"compute_utilization": 0.7, "arithmetic_intensity_ratio": 20.0, "mean_kernel_us": 900.0}
    )
    on_cpu = [
        a for a, _ in class_actions(compute, SessionFacts(providers=("CPUExecutionProvider",)))
    ]
    on_rocm = [
        a for a, _ in class_actions(compute, SessionFacts(providers=("ROCMExecutionProvider",)))
    ]
    assert not any("hipBLASLt" in a for a in on_cpu)
    assert any("hipBLASLt" in a for a in on_rocm)


def test_a_suspect_measurement_is_measured_again_first_then_five_at_most_each_worth_it():
    facts = SessionFacts(suspect_reasons=("other processes took 70% of the host's CPU time",))
    p50 = 1_000_000.0
    candidates = [(f"action {i}", "why", None) for i in range(8)]
    candidates.insert(1, ("2x faster saves 1 %", "why", 0.01 * p50))  # not worth reading
    advice = worth_reading(measure_again(facts), candidates, p50)
    assert advice[0].action.startswith("Measure again on a quiet host")
    assert "other processes took 70%" in advice[0].why
    assert [rec.action for rec in advice[1:]] == [f"action {i}" for i in range(MAX_ACTIONS)]
    assert [rec.rank for rec in advice] == list(range(1, MAX_ACTIONS + 2))
    assert worth_reading(measure_again(SessionFacts()), candidates, p50)[0].action == "action 0"


@pytest.mark.parametrize(
    ("share", "bound"), [(0.0, 2.0), (0.5, 4.0), (0.81, 2 / 0.19), (1.0, 200.0)]
)
def test_the_slowdown_contention_can_cause_is_bounded(share, bound):
    assert contention_slowdown_bound(share) == pytest.approx(bound)
    assert BUSY.slowdown_bound() == pytest.approx(2 / 0.3)

"""Measurement quality: every session says whether its latencies can be trusted, and why not;
a suspect one is left out of new baselines."""

from __future__ import annotations

import pytest

from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality, judge
from aaco_pipelines.governance.gate.baselines import create_baseline
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake

CLEAN = {
    "iterations": 200,
    "p50": 1.0e6,
    "p99": 1.3e6,
    "mean": 1.05e6,
    "sd": 0.1e6,
    "outliers": 2,
    "host_contention": 0.03,
    "profiling_overhead_pct": 12.0,
}


def test_a_clean_session_is_ok_and_says_what_it_rests_on():
    quality = judge("s", CLEAN)
    assert quality.verdict == "ok" and not quality.reasons and not quality.cautions
    assert quality.line() == "measurement ok (200 iterations, host 3% busy with other work)"


@pytest.mark.parametrize(
    ("changed", "reason"),
    [
        ({"host_contention": 0.82}, "other processes took 82% of the host's CPU time meanwhile"),
        (  # one busy core of many: the host looks quiet, the pinned worker's core is not
            {"laboratory_contention": 0.48},
            "other processes took 48% of the laboratory cores' time meanwhile",
        ),
        ({"p99": 40e6}, "p99 is 40.0x p50"),  # one preempted iteration in a hundred
        ({"mean": 6e6}, "the mean is 6.0x p50"),
        ({"outliers": 30}, "15% of iterations are far outliers (beyond Q3 + 3 IQR)"),
    ],
)
def test_each_sign_of_a_disturbed_measurement_makes_it_suspect_with_its_number(changed, reason):
    quality = judge("s", CLEAN | changed)
    assert quality.verdict == "suspect" and quality.reasons == [reason]
    assert quality.line() == f"measurement SUSPECT: {reason}"


def test_noise_alone_and_a_lone_slow_iteration_do_not_make_a_session_suspect():
    """A 0.1 ms model's CV is 0.2-0.6 on a shared host, and one slow iteration of 20 is 5 %:
    neither is a disturbed measurement (the median and its interval stay sound)."""
    assert judge("s", CLEAN | {"sd": 0.8e6}).verdict == "ok"
    assert judge("s", CLEAN | {"iterations": 20, "outliers": 2}).verdict == "ok"


def test_a_distorted_profile_is_said_but_leaves_the_latencies_trusted():
    quality = judge("s", CLEAN | {"profiling_overhead_pct": 724.0})
    assert quality.verdict == "ok"
    assert quality.cautions == [
        "the profiled pass ran 8.2x slower than the measured one: op shares carry the "
        "profiler's own cost"
    ]


def test_no_measured_iterations_is_unknown_not_ok():
    quality = judge("s", {k: None for k in CLEAN} | {"iterations": 0})
    assert quality.verdict == "unknown" and not quality.suspect


def test_a_stored_verdict_reads_back_the_same():
    quality = judge("s", CLEAN | {"p99": 40e6, "profiling_overhead_pct": 724.0})
    assert MeasurementQuality.from_row(quality.row()) == quality


def test_a_new_baseline_leaves_suspect_sessions_out_and_says_so(measured_mlp_home):
    """Of a model's sessions, the one judged suspect is not in a baseline of its last N (unless
    asked for), and the baseline's shortfall names it."""
    paths = measured_mlp_home.paths
    measure_model(registered_model(paths.registry / "mlp.onnx"), paths)  # a second session
    lake = TraceLake(paths.tracelake)
    sessions = lake.query(
        "SELECT session_id FROM sessions WHERE model_slug = 'mlp' ORDER BY started_at"
    )["session_id"].to_pylist()
    assert len(sessions) >= 2
    stored = lake.query("SELECT session_id, verdict FROM measurement_quality").to_pylist()
    assert {r["session_id"] for r in stored} >= set(sessions)  # every loaded session judged
    suspect = sessions[-1]
    with lake.transaction() as con:  # one judged suspect as a busy host would have it
        con.execute("UPDATE measurement_quality SET verdict = 'ok', reasons_json = '[]'")
        con.execute(
            "UPDATE measurement_quality SET verdict = 'suspect', "
            "reasons_json = '[\"p99 is 40.0x p50\"]' WHERE session_id = ?",
            [suspect],
        )
    baseline = create_baseline(lake, "without", model_slug="mlp", last=len(sessions))
    assert suspect not in baseline.session_ids
    assert baseline.n_sessions == len(sessions) - 1
    assert "(1 with a suspect measurement left out)" in baseline.shortfall
    everything = create_baseline(
        lake, "with", model_slug="mlp", last=len(sessions), include_suspect=True
    )
    assert suspect in everything.session_ids and everything.shortfall is None

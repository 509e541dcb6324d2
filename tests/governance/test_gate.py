"""The CI gate on real measured sessions: a swap to a slower model fails it with the model change
as the suspect, the same model passes, the threshold is respected, the baseline is found in the
documented order, and bad input is one clear error."""

from __future__ import annotations

import json

import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.gate.baselines import create_baseline
from aaco_pipelines.governance.gate.decision import RECOMMENDATIONS, gate_verdict, severity
from aaco_pipelines.governance.gate.root_cause import explain_change
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.report.verdict_text import diff_text
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import (
    STEADY_SIDECAR,
    add_model,
    copy_home,
    replay_session,
    store_sessions,
    without_baselines,
)


@pytest.fixture(scope="module")
def mlp_swap_and_back_measured(mlp_swap_template, tmp_path_factory):
    """Three sessions of the tiny MLP, one of its slower replacement (a copy of
    mlp_swap_template), then the tiny one again."""
    template, ids = mlp_swap_template
    paths = copy_home(template, tmp_path_factory.mktemp("gate") / "aaco")
    ids = [
        *ids,
        measure_model(
            registered_model(add_model(paths, "mlp", models.tiny_mlp(), STEADY_SIDECAR)), paths
        ).session_id,
    ]
    lake = TraceLake(paths.tracelake)
    other = {"session_id": "other-1", "model_slug": "other", "target": "cpu"}
    store_sessions(lake, [other])
    return lake, ids


@pytest.fixture
def mlp_swap_and_back(mlp_swap_and_back_measured):
    """mlp_swap_and_back_measured with no baselines left by an earlier test: (lake, ids)."""
    lake, ids = mlp_swap_and_back_measured
    return without_baselines(lake), ids


def test_a_slower_model_is_a_critical_regression_caused_by_the_model(mlp_swap_and_back):
    lake, (t0, t1, t2, slower, _) = mlp_swap_and_back
    verdict = gate_verdict(lake, slower, baseline=[t0, t1, t2], resamples=500)
    assert verdict.regression and verdict.severity == "critical" and verdict.confidence > 0.95
    p50 = verdict.latency_delta_pct
    assert 0 < p50["ci_low"] < p50["ci_high"] and p50["effect_pct"] > 50
    assert p50["current_ms"] > p50["baseline_ms"]
    throughput = verdict.throughput_delta_pct
    assert throughput["ci_high"] < 0 < throughput["baseline_per_s"] - throughput["current_per_s"]
    cause = verdict.suspected_cause
    assert cause["kind"] == "model_version" and cause["posterior"] > 0.5
    assert cause["before"] != cause["after"] and len(verdict.suspects) <= 3
    assert verdict.recommendation.startswith("bisect the model change")
    assert verdict.evidence["decided_by"] == "ci_and_threshold"
    assert verdict.evidence["baseline_sessions"] == 3 and verdict.evidence["noise_sd_pct"] > 0
    assert json.loads(json.dumps(verdict.to_dict()))["baseline"]["source"] == "sessions"


@pytest.fixture
def replayed(mlp_swap_and_back):
    """A copy of the third tiny session under a new id: the same model measured identically (real
    tiny sessions on a shared box differ by tens of percent, which a gate rightly flags)."""
    lake, (_, _, t2, _, _) = mlp_swap_and_back
    yield replay_session(lake, t2)
    lake.delete_sessions(["replay"])


def test_the_same_model_and_a_faster_one_pass(mlp_swap_and_back, replayed):
    lake, (t0, t1, t2, slower, t3) = mlp_swap_and_back
    same = gate_verdict(lake, replayed, baseline=t2, resamples=500)
    assert not same.regression and same.severity == "none"
    assert same.latency_delta_pct["effect_pct"] == 0.0
    assert same.evidence["decided_by"] == "ci_includes_zero"
    assert same.recommendation.startswith("no action")
    faster = gate_verdict(lake, t3, baseline=slower, resamples=500)
    assert not faster.regression and faster.evidence["decided_by"] == "faster"
    assert faster.metrics["throughput_per_s"]["decision"] == "improvement"
    slowdown = gate_verdict(lake, slower, baseline=[t0, t1, t2], resamples=500)
    assert slowdown.regression and slowdown.metrics["throughput_per_s"]["decision"] == "regression"
    assert faster.baseline["source"] == "session"
    # no metric regressed: the confidence is the least likely of them not to have (a p99 with
    # a preempted tail can be near its threshold), the p50's is all but certain
    assert faster.metrics["latency_p50_ns"]["p_regression"] < 0.01 and faster.confidence > 0.5
    assert "faster" in faster.recommendation


def test_every_gated_metric_is_decided_and_a_tail_change_on_a_suspect_measurement_is_uncertain(
    mlp_swap_and_back, replayed
):
    """One measured iteration in 20 stalls (50x, a busy host's preemptions): the p50 stays, the
    p99 and the mean (so the throughput) do not. The gate decides every metric the Dagster check
    gates: the throughput drop and p99 rise are regressions on their own, named in the
    headline. When the session's measurement was judged suspect (stalls are what a busy
    host's neighbours make), the same change is "uncertain": measure again, not fail a build."""
    lake, (_, _, t2, _, _) = mlp_swap_and_back
    with lake.connect(write=True) as con:  # this test's stalls only: the host's own ones (a
        # 20 ms preemption among 28 us iterations) would put the throughput interval across 0
        con.execute(
            "UPDATE iterations SET latency_ns = least(latency_ns, (SELECT 3 * median(latency_ns) "
            "FROM iterations WHERE session_id = $t2 AND pass = 'measured')) "
            "WHERE session_id IN ('replay', $t2) AND pass = 'measured'",
            {"t2": t2},
        )
        con.execute("UPDATE measurement_quality SET verdict = 'ok'")  # whatever this host did
    calm = gate_verdict(lake, replayed, baseline=t2, resamples=500)
    assert set(calm.metrics) == {"latency_p50_ns", "latency_p99_ns", "throughput_per_s"}
    assert {m["decision"] for m in calm.metrics.values()} == {"no_change"}
    assert diff_text(calm).splitlines()[0].startswith("no regression:")
    with lake.connect(write=True) as con:
        con.execute(
            "UPDATE iterations SET latency_ns = latency_ns * 50 "
            "WHERE session_id = 'replay' AND pass = 'measured' AND iteration % 20 = 0"
        )
    stalled = gate_verdict(lake, replayed, baseline=t2, resamples=500)
    decisions = {name: m["decision"] for name, m in stalled.metrics.items()}
    assert decisions == {
        "latency_p50_ns": "no_change",
        "latency_p99_ns": "regression",
        "throughput_per_s": "regression",
    }
    assert stalled.regression and set(stalled.regressed) == {"latency_p99_ns", "throughput_per_s"}
    assert stalled.metrics["throughput_per_s"]["threshold_pct"] == 5.0  # its noise floor
    lines = diff_text(stalled).splitlines()
    assert lines[0].startswith("REGRESSION (critical): mlp ")
    (row,) = [line for line in lines if line.split()[:1] == ["throughput"]]
    assert row.rstrip().endswith("REGRESSION (critical)")
    (row,) = [line for line in lines if line.split()[:2] == ["p50", "latency"]]
    assert row.rstrip().endswith("no change")
    with lake.connect(write=True) as con:
        con.execute(
            "UPDATE measurement_quality SET verdict = 'suspect', "
            "reasons_json = '[\"mean is 3.4x p50\"]' WHERE session_id = 'replay'"
        )
        if not con.execute(
            "SELECT 1 FROM measurement_quality WHERE session_id = 'replay'"
        ).fetchall():
            con.execute(
                "INSERT INTO measurement_quality (session_id, verdict, reasons_json) "
                "VALUES ('replay', 'suspect', '[\"mean is 3.4x p50\"]')"
            )
    judged = gate_verdict(lake, replayed, baseline=t2, resamples=500)
    assert not judged.regression and set(judged.uncertain) == {"latency_p99_ns", "throughput_per_s"}
    assert judged.recommendation.startswith("measure again on a quiet host, or side by side")
    assert (
        diff_text(judged)
        .splitlines()[0]
        .startswith("no regression decided, p99, throughput uncertain, on a suspect measurement")
    )


def test_the_gate_names_a_suspect_measurement_on_either_side(mlp_swap_and_back, replayed):
    """A session judged suspect (measurement_quality) is named by `aaco diff` with its reasons:
    in the headline when it is the one judged, as a count when it is in the baseline."""
    lake, (t0, t1, t2, _, _) = mlp_swap_and_back
    with lake.connect(write=True) as con:
        con.execute("UPDATE measurement_quality SET verdict = 'ok'")  # whatever this host did
        con.execute("DELETE FROM measurement_quality WHERE session_id IN ('replay', ?)", [t1])
        con.execute(
            "INSERT INTO measurement_quality (session_id, verdict, reasons_json) VALUES "
            "('replay', 'suspect', '[\"p99 is 40.0x p50\"]'), "
            "(?, 'suspect', '[\"other processes took 82% of the host''s CPU time meanwhile\"]')",
            [t1],
        )
    verdict = gate_verdict(lake, replayed, baseline=[t0, t1, t2], resamples=500)
    assert set(verdict.suspect_measurements) == {"replay", t1}
    lines = diff_text(verdict).splitlines()
    assert lines[0].split(":")[0].endswith(", on a suspect measurement (measure again)")
    (cell,) = [line for line in lines if line.split()[:1] == ["measurement"]]
    assert "this session SUSPECT: p99 is 40.0x p50" in cell
    assert "1 of the baseline's 3 sessions suspect" in cell
    clean = gate_verdict(lake, t2, baseline=[t0], resamples=500)
    assert clean.suspect_measurements == {}
    assert not any(line.split()[:1] == ["measurement"] for line in diff_text(clean).splitlines())


def test_the_threshold_is_respected(mlp_swap_and_back):
    lake, (t0, t1, t2, slower, _) = mlp_swap_and_back
    # A threshold no slowdown reaches: on a busy runner a session's preempted iterations have
    # made its p99 +10,080 % (and +10,000 % was the threshold here once), so 10^7 %.
    verdict = gate_verdict(lake, slower, baseline=[t0, t1, t2], threshold_pct=1e7, resamples=500)
    assert not verdict.regression and verdict.severity == "none"
    assert verdict.evidence["decided_by"] == "below_threshold"
    assert "is below the 1e+07 % threshold" in verdict.recommendation
    assert [severity(e, 3.0) for e in (2.9, 3.0, 5.9, 6.0, 14.9, 15.0)] == [
        "none", "minor", "minor", "major", "major", "critical"
    ]  # fmt: skip


def test_the_baseline_is_resolved_in_order(mlp_swap_and_back):
    lake, (t0, t1, t2, slower, t3) = mlp_swap_and_back

    def source(**kwargs):
        b = gate_verdict(lake, slower, resamples=50, **kwargs).baseline
        return b["source"], b["name"], tuple(b["session_ids"])

    assert source() == ("previous", "previous 3 sessions", (t0, t1, t2))
    create_baseline(lake, "release", session_ids=[t0, t1])
    assert source()[0] == "previous"  # an unpinned baseline is only used by name
    create_baseline(lake, "pinned", session_ids=[t1, t2], pin=True)
    assert source() == ("pinned", "pinned", (t1, t2))
    assert source(baseline="release") == ("baseline", "release", (t0, t1))
    assert source(baseline=t2) == ("session", f"session {t2}", (t2,))
    # A baseline that includes the current session compares with the others only.
    create_baseline(lake, "all", session_ids=[t0, slower, t3])
    assert source(baseline="all")[2] == (t0, t3)
    assert gate_verdict(lake, "latest", baseline=[t0], resamples=50).session_id == t3


def test_bad_input_is_one_clear_error(mlp_swap_and_back):
    lake, (t0, _, _, slower, _) = mlp_swap_and_back
    attempts = {
        "no baseline or session named 'ghost'": dict(current=slower, baseline="ghost"),
        "holds only the current session": dict(current=slower, baseline=slower),
        "no earlier session": dict(current=t0),
        "is mlp on cpu": dict(current=slower, baseline="other-1"),
        "unknown baseline sessions": dict(current=slower, baseline=[t0, "nope"]),
        "no session 'nope'": dict(current="nope"),
        "threshold must be above 0": dict(current=slower, threshold_pct=0.0),
    }
    for message, kwargs in attempts.items():
        with pytest.raises(AacoInputError, match=message) as error:
            gate_verdict(lake, kwargs.pop("current"), resamples=50, **kwargs)
        assert error.value.fix


def test_host_contention_on_one_side_is_a_root_cause_suspect(mlp_swap_and_back, replayed):
    """The current session measured while other processes held 80 % of the host's CPU, the
    baseline's at 2 %: host contention is a suspect with both numbers, and the gate's advice
    when it leads is to measure again on a quiet host."""
    lake, (t0, t1, t2, _, _) = mlp_swap_and_back
    with lake.connect(write=True) as con:
        con.execute("UPDATE measurement_quality SET host_contention = 0.02")
        con.execute("DELETE FROM measurement_quality WHERE session_id = 'replay'")
        con.execute(
            "INSERT INTO measurement_quality (session_id, verdict, host_contention) "
            "VALUES ('replay', 'suspect', 0.8)"
        )
    suspects = explain_change(lake, [t0, t1, t2], replayed)
    [contention] = [s for s in suspects if s.kind == "host_contention"]
    assert (contention.before, contention.after) == ("2%", "80%") and contention.posterior > 0
    assert (
        RECOMMENDATIONS["host_contention"].format(**contention.to_dict())
        == "decide side by side (aaco diff --paired), or measure again with the host to itself: "
        "other processes took 2% of its CPU while the baseline was measured and 80% while this "
        "session was"
    )
    with lake.connect(write=True) as con:  # both sides quiet: no such suspect
        con.execute("UPDATE measurement_quality SET host_contention = 0.03")
    assert not [
        s for s in explain_change(lake, [t0, t1, t2], replayed) if s.kind == "host_contention"
    ]


def test_a_stall_in_one_baseline_session_does_not_blur_the_others_metrics(mlp_swap_and_back):
    """One baseline session stalled once for 4 ms (a busy host's preemption among 28 us
    iterations): its mean, so its throughput, is far off the other sessions', its level is
    not. The current session's session-to-session shift is read from the baseline's medians,
    so the slower model's throughput drop stays clear of 0 (read from the means, the stall
    put its interval across 0 on a CI host)."""
    lake, (t0, t1, t2, slower, _) = mlp_swap_and_back
    with lake.connect(write=True) as con:
        con.execute(
            "UPDATE iterations SET latency_ns = latency_ns + 4000000 "
            "WHERE session_id = ? AND pass = 'measured' AND iteration = "
            "(SELECT min(iteration) FROM iterations WHERE session_id = ? AND pass = 'measured')",
            [t1, t1],
        )
    try:
        verdict = gate_verdict(lake, slower, baseline=[t0, t1, t2], resamples=500)
        throughput = verdict.metrics["throughput_per_s"]
        assert throughput["decision"] == "regression" and throughput["ci_high"] < 0, throughput
    finally:
        with lake.connect(write=True) as con:
            con.execute(
                "UPDATE iterations SET latency_ns = latency_ns - 4000000 "
                "WHERE session_id = ? AND pass = 'measured' AND latency_ns > 4000000",
                [t1],
            )

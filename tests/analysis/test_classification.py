"""Bottleneck classification: the right class for typical sessions, with an honest confidence."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aaco_pipelines.analysis.bottleneck.actions import ACTIONS, SessionFacts, class_actions
from aaco_pipelines.analysis.bottleneck.classification import (
    CLASSES,
    CLOSE_CALL,
    PRIORS,
    SIGNAL_RULES,
    classify_bottleneck,
    rules_markdown,
)

QUIET_HOST = {
    "runqueue_wait_ratio": 0.01,
    "involuntary_switches_per_s": 5.0,
    "clock_drop": 0.01,
    "clock_cv": 0.005,
}
LAUNCH_BOUND = {
    **QUIET_HOST,
    "launch_tax": 0.6,
    "microkernel_share": 0.9,
    "mean_kernel_us": 3.0,
    "compute_utilization": 0.01,
    "memory_utilization": 0.05,
}
TYPICAL = {
    "launch-bound": LAUNCH_BOUND,
    "memory-bound": {
        **QUIET_HOST,
        "arithmetic_intensity_ratio": 0.05,
        "memory_utilization": 0.7,
        "compute_utilization": 0.02,
        "launch_tax": 0.05,
        "mean_kernel_us": 3000.0,
        "microkernel_share": 0.05,
    },
    "compute-bound": {
        **QUIET_HOST,
        "arithmetic_intensity_ratio": 20.0,
        "compute_utilization": 0.7,
        "memory_utilization": 0.3,
        "launch_tax": 0.05,
        "mean_kernel_us": 2000.0,
        "microkernel_share": 0.05,
    },
    "cpu-bound": {
        "runqueue_wait_ratio": 0.6,
        "involuntary_switches_per_s": 800.0,
        "launch_tax": 0.4,
        "mean_kernel_us": 200.0,
        "microkernel_share": 0.1,
    },
    "throttled": {"clock_drop": 0.3, "clock_cv": 0.1, "power_or_thermal_limited": None},
    "balanced": {
        **QUIET_HOST,
        "launch_tax": 0.2,
        "microkernel_share": 0.35,
        "mean_kernel_us": 100.0,
        "compute_utilization": 0.25,
        "memory_utilization": 0.3,
        "arithmetic_intensity_ratio": 1.0,
    },
}


@pytest.mark.parametrize("expected", list(TYPICAL))
def test_typical_sessions_classify_confidently(expected):
    report = classify_bottleneck(TYPICAL[expected])
    assert report.bottleneck == expected
    assert report.confidence > 0.6
    assert report.confidence == max(report.posterior.values())


def test_weaker_evidence_lowers_confidence():
    weaker = {**LAUNCH_BOUND, "launch_tax": 0.25, "microkernel_share": 0.4, "mean_kernel_us": 30.0}
    strong = classify_bottleneck(LAUNCH_BOUND).posterior["launch-bound"]
    assert classify_bottleneck(weaker).posterior["launch-bound"] < strong


def test_no_evidence_gives_the_prior_of_the_classes_it_can_reach_and_decides_nothing():
    """Throttled needs a clock or power reading and cpu-bound the run queue: without them they
    are out of reach (on its prior alone, throttled led an ingested trace once)."""
    report = classify_bottleneck(dict.fromkeys(SIGNAL_RULES))
    reachable = {c: p for c, p in PRIORS.items() if c not in ("throttled", "cpu-bound")}
    total = sum(reachable.values())
    assert report.posterior == pytest.approx({c: reachable.get(c, 0.0) / total for c in CLASSES})
    assert report.judged_classes == tuple(reachable)
    assert not report.decided and "with no signal judged" in report.undecided_reason
    assert all(item.bin == "absent" and item.likelihoods == {} for item in report.evidence)
    assert classify_bottleneck({}).posterior == pytest.approx(report.posterior)


def test_absent_signal_contributes_nothing():
    with_none = classify_bottleneck({**LAUNCH_BOUND, "arithmetic_intensity_ratio": None})
    assert with_none.posterior == pytest.approx(classify_bottleneck(LAUNCH_BOUND).posterior)


def test_unknown_signal_is_rejected():
    with pytest.raises(ValueError, match="launch_taxx"):
        classify_bottleneck({"launch_taxx": 0.5})


@pytest.mark.parametrize("expected", list(TYPICAL))
def test_posterior_is_a_distribution(expected):
    posterior = classify_bottleneck(TYPICAL[expected]).posterior
    assert set(posterior) == set(CLASSES)
    assert math.isclose(sum(posterior.values()), 1.0)


def test_rule_table_is_a_set_of_distributions():
    assert set(PRIORS) == set(CLASSES)
    assert math.isclose(sum(PRIORS.values()), 1.0)
    for signal, rule in SIGNAL_RULES.items():
        assert list(rule.edges) == sorted(rule.edges), signal
        assert set(rule.likelihoods) == set(CLASSES), signal
        for name, row in rule.likelihoods.items():
            assert len(row) == len(rule.edges) + 1, (signal, name)
            assert all(p > 0 for p in row), (signal, name)
            assert math.isclose(sum(row), 1.0), (signal, name)
    assert set(ACTIONS) == set(CLASSES)


def test_evidence_reports_bin_and_thresholds():
    report = classify_bottleneck(LAUNCH_BOUND)
    items = {item.signal: item for item in report.evidence}
    assert set(items) == set(SIGNAL_RULES)
    tax = items["launch_tax"]
    assert tax.value == 0.6
    assert tax.bin == "> 0.3"
    assert tax.threshold_edges == SIGNAL_RULES["launch_tax"].edges
    assert (
        tax.likelihoods["launch-bound"]
        == SIGNAL_RULES["launch_tax"].likelihoods["launch-bound"][-1]
    )
    assert tax.favours == "launch-bound"
    assert items["mean_kernel_us"].bin == "≤ 20"
    assert items["power_or_thermal_limited"].bin == "absent"
    assert items["power_or_thermal_limited"].favours is None


def test_value_on_an_edge_falls_in_the_lower_bin():
    items = {item.signal: item for item in classify_bottleneck({"launch_tax": 0.3}).evidence}
    assert items["launch_tax"].bin == "0.1 – 0.3"


def test_actions_start_with_the_winner_and_quote_its_evidence():
    report = classify_bottleneck(TYPICAL["cpu-bound"])
    action, why = class_actions(report, SessionFacts())[0]
    assert action == ACTIONS["cpu-bound"][0].text
    assert "runqueue_wait_ratio = 0.6" in why
    assert "involuntary_switches_per_s = 800" in why


def test_runner_up_gets_actions_only_when_plausible():
    confident = class_actions(classify_bottleneck(LAUNCH_BOUND), SessionFacts())
    measured_on_cpu = [
        a for a in ACTIONS["launch-bound"] if a.applies in ("anywhere", "onnx runtime")
    ]
    assert [action for action, _ in confident] == [a.text for a in measured_on_cpu]
    # Some waiting for a core (above 0.6 the session would be the host's: cpu-bound outright).
    mixed = {**LAUNCH_BOUND, "runqueue_wait_ratio": 0.45, "involuntary_switches_per_s": 1500.0}
    report = classify_bottleneck(mixed)
    runner_up = sorted(report.posterior, key=report.posterior.__getitem__)[-2]
    assert report.posterior[runner_up] > 0.2
    actions = [action for action, _ in class_actions(report, SessionFacts())]
    assert actions[-1] == ACTIONS[runner_up][-1].text


def test_report_serializes():
    as_dict = classify_bottleneck(TYPICAL["memory-bound"]).to_dict()
    assert as_dict["bottleneck"] == "memory-bound"
    assert as_dict["evidence"][0]["signal"] == "launch_tax"
    assert as_dict["decided"] is True and as_dict["undecided_reason"] is None
    assert json.loads(json.dumps(as_dict))["posterior"] == pytest.approx(as_dict["posterior"])


def test_rules_markdown_mentions_every_signal_and_class():
    markdown = rules_markdown()
    for name in (*SIGNAL_RULES, *CLASSES):
        assert name in markdown


# bert_encoder's evidence in a quiet run on the 2-core CI host (2026-11-28): balanced 0.80 with
# its mean kernel time and compute utilization near their edges; it read launch-bound once in
# five such runs.
BERT_QUIET = {
    "launch_tax": 0.188,
    "microkernel_share": 0.199,
    "mean_kernel_us": 19.164,
    "compute_utilization": 0.343,
    "memory_utilization": 0.149,
    "arithmetic_intensity_ratio": 1.367,
    "runqueue_wait_ratio": 0.033,
    "involuntary_switches_per_s": 109.0,
    "clock_drop": 0.0,
    "clock_cv": 0.0,
}


@pytest.mark.parametrize("expected", ["launch-bound", "memory-bound", "compute-bound"])
def test_a_class_far_from_every_edge_is_no_close_call(expected):
    assert classify_bottleneck(TYPICAL[expected]).close_calls == ()


def test_a_class_near_an_edge_names_the_class_across_it_with_the_signals():
    report = classify_bottleneck(BERT_QUIET)
    assert report.bottleneck == "balanced" and report.close_calls
    first = report.close_calls[0]
    assert first.bottleneck != "balanced" and first.signals
    for moved in first.signals:
        assert moved.value == BERT_QUIET[moved.signal]
        assert abs(moved.edge - moved.value) <= CLOSE_CALL * moved.value
    # the fewest signals: no single one of them alone already makes that class win
    assert (
        json.loads(json.dumps(report.to_dict()))["close_calls"][0]["bottleneck"] == first.bottleneck
    )


def test_two_runs_that_disagree_within_the_spread_each_name_the_others_class():
    """Every signal moved by a factor within the spread either way (1/1.2 to 1.2), 1000 times:
    whenever the class differs from the unmoved run's, each of the two names the other's class
    as a close call, so a class that flips between two runs is never shown as settled."""
    rng = np.random.default_rng(7)
    base = classify_bottleneck(BERT_QUIET)
    named_by_base = {c.bottleneck for c in base.close_calls}
    flips = 0
    for _ in range(1000):
        factors = rng.uniform(1 / (1 + CLOSE_CALL), 1 + CLOSE_CALL, len(BERT_QUIET))
        moved = {k: v * f for (k, v), f in zip(BERT_QUIET.items(), factors, strict=True)}
        other = classify_bottleneck(moved)
        if other.bottleneck != base.bottleneck:
            flips += 1
            assert other.bottleneck in named_by_base, moved
            assert base.bottleneck in {c.bottleneck for c in other.close_calls}, moved
    assert flips > 10  # the property was exercised, not vacuous

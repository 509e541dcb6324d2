"""Drift verdicts on a series: one slow session on a shared host is not yet a regression."""

from __future__ import annotations

import numpy as np

from aaco_pipelines.governance.series import judge_series


def _entry(values, markers=None, higher_is_worse=True):
    values = np.asarray(values, dtype=float)
    return {
        "values": values,
        "higher_is_worse": higher_is_worse,
        "markers": markers or [[] for _ in values],
        "session_ids": [f"s{i}" for i in range(len(values))],
    }


QUIET = [100.0, 100.4, 99.7, 100.2, 99.9]


def test_a_single_slow_session_awaits_confirmation():
    verdict = judge_series(_entry([*QUIET, 115.0]))
    assert verdict.verdict == "no_change" and verdict.decided_by == "awaiting_confirmation"
    assert verdict.effect_pct > 10  # the effect is still reported
    assert verdict.parameters["confirmation"] == "awaiting_confirmation"


def test_two_slow_sessions_in_a_row_confirm_the_regression():
    verdict = judge_series(_entry([*QUIET, 115.0, 114.0]))
    assert verdict.verdict == "regression"
    assert verdict.parameters["confirmation"] == "confirmed_by_previous_session"


def test_a_new_model_version_is_judged_at_once():
    markers = [[] for _ in QUIET] + [["model_version"]]
    verdict = judge_series(_entry([*QUIET, 115.0], markers))
    assert verdict.verdict == "regression"
    assert verdict.parameters["confirmation"] == "known_change"


def test_throughput_drop_is_a_regression_and_a_rise_an_improvement():
    markers = [[] for _ in QUIET] + [["runtime"]]
    assert (
        judge_series(_entry([*QUIET, 80.0], markers, higher_is_worse=False)).verdict == "regression"
    )
    assert (
        judge_series(_entry([*QUIET, 120.0], markers, higher_is_worse=False)).verdict
        == "improvement"
    )


def test_an_outlier_between_quiet_sessions_raises_nothing():
    verdict = judge_series(_entry([*QUIET, 130.0, 100.1]))
    assert verdict.verdict == "no_change"

"""Drift verdicts on a series: one slow session on a shared host is not yet a regression."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from aaco_pipelines.governance.drift.series import judge_series, metric_policy
from tests.helpers import REPO, store_sessions


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


def test_two_slow_sessions_at_different_levels_are_two_bad_nights():
    verdict = judge_series(_entry([*QUIET, *QUIET, 115.0, 130.0]))
    assert verdict.verdict == "no_change" and verdict.decided_by == "awaiting_confirmation"
    assert verdict.parameters["confirmation"] == "previous_session_at_another_level"


def test_an_outlier_on_top_of_a_shift_does_not_hold_it_back():
    # +15%, then a shared-host night 40% slow, then +15% again: the night before the outlier
    # confirms; two outliers in a row at different levels do not.
    assert judge_series(_entry([*QUIET, *QUIET, 115.0, 140.0, 114.5])).verdict == "regression"
    assert judge_series(_entry([*QUIET, *QUIET, 140.0, 115.0])).verdict == "no_change"


def test_a_confirmed_verdict_has_the_p_value_of_its_run():
    quiet = 100.0 * np.exp(np.random.default_rng(2).normal(0.0, 0.01, 20))
    verdict = judge_series(_entry([*quiet, 105.0, 105.3, 104.8]))
    assert verdict.verdict == "regression"
    p = verdict.parameters
    assert p["p_value_sessions"] == 3  # the three sessions since the step
    assert verdict.p_value == p["p_value"] < p["p_value_current_session"] / 100


def test_a_shifted_session_pulled_short_by_noise_does_not_break_the_run():
    quiet = 100.0 * np.exp(np.random.default_rng(3).normal(0.0, 0.01, 20))
    # +5%, then +2% (short of the 3% minimum, past half of it), then +5%: confirmed.
    assert judge_series(_entry([*quiet, 105.0, 102.0, 105.2])).verdict == "regression"
    # A session back at the baseline in between breaks it.
    assert judge_series(_entry([*quiet, 105.0, 100.3, 105.2])).verdict == "no_change"


# --- the nightly simulation (benchmarks/drift_nightly.py), small -----------------------------

STEP_NIGHT = 35


def _load_benchmark():
    path = REPO / "benchmarks" / "drift_nightly.py"
    spec = importlib.util.spec_from_file_location("drift_nightly", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def nightly():
    return _load_benchmark()


@pytest.fixture(scope="module")
def quiet_fleet(nightly):
    """100 in-control series x 30 nights at 1% noise, outliers and warm-up: verdicts, p.

    The benchmark's rate is ~0.2-0.3 false alarms per 1000 series-nights (two shared-host
    outliers in a row at one level; the warm-up ending, judged on 4-5 points): this seed has
    none in its 3000, seeds 1-7 have 0-2."""
    latency = nightly.simulate(np.zeros(100), np.full(100, 30), 30, nightly.Fleet(), seed=2)
    judged = nightly.judge_fleet(latency, metric_policy("latency_p50_ns"))
    return judged, nightly.verdict_matrix(judged)[1]


def test_a_quiet_fleet_raises_no_alarm_in_3000_series_nights(nightly, quiet_fleet):
    judged, _ = quiet_fleet
    swept = nightly.swept_fleet(judged, q=0.05)
    assert swept.shape == (100, 30)
    assert not np.isin(swept, nightly.ALARMS).any()
    assert not (swept == "unstable_series").any()


def test_a_5pct_step_is_reported_within_3_nights(nightly, quiet_fleet):
    # 50 series, +5% from night 35 (a full 30-night baseline), judged on nights 35-37 and each
    # night swept with 100 in-control p-values (the quiet fleet's last three nights).
    latency = nightly.simulate(
        np.full(50, 5.0), np.full(50, STEP_NIGHT), STEP_NIGHT + 3, nightly.Fleet(), seed=2
    )
    judged = nightly.judge_fleet(latency, metric_policy("latency_p50_ns"), first=STEP_NIGHT)
    verdicts, p = nightly.verdict_matrix(judged)
    swept = nightly.swept_alone_in(verdicts, p, quiet_fleet[1][:, -3:].T, q=0.05)
    found = (swept == "regression").any(axis=1)
    assert found.mean() >= 0.9  # 0.94-1.0 over seeds 1-8


def test_each_verdict_row_carries_the_change_points_of_its_whole_series(aaco_paths):
    """14 sessions, p50 up 20% from the 8th: the stored series names that session as a change
    point with its shift, next to the verdict on the newest one."""
    import datetime as dt
    import json

    import pyarrow as pa

    from aaco_pipelines.governance.drift.series import drift_verdict_rows, series_change_points
    from aaco_pipelines.tracelake.schema import ITERATIONS, SESSIONS, conform
    from aaco_pipelines.tracelake.store import TraceLake

    rng = np.random.default_rng(0)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    p50 = np.r_[np.full(7, 1e6), np.full(7, 1.2e6)] * (1 + rng.normal(0, 0.005, 14))
    sessions = [
        {"session_id": f"s{i:02}", "model_slug": "m", "model_sha256": "a", "target": "cpu",
         "runtime_fingerprint": "r", "started_at": start + dt.timedelta(days=i),
         "latency_p50_ns": int(p), "latency_p99_ns": int(p * 1.5), "throughput_per_s": 1e9 / p}
        for i, p in enumerate(p50)
    ]  # fmt: skip
    lake = TraceLake(aaco_paths.tracelake)
    store_sessions(lake, conform(pa.Table.from_pylist(sessions), SESSIONS))
    samples = [{"session_id": "s13", "pass": "measured", "iteration": i,
                "latency_ns": int(p50[-1] * (1 + 0.01 * rng.standard_normal()))}
               for i in range(50)]  # fmt: skip
    lake.append_rows("iterations", conform(pa.Table.from_pylist(samples), ITERATIONS))

    rows = {r["metric"]: r for r in drift_verdict_rows(lake, "m", "s13").to_pylist()}
    series = json.loads(rows["latency_p50_ns"]["series_json"])
    points = series["change_points"]
    assert [p["session_id"] for p in points] == ["s07"]
    # Reports read them back with their positions; rows stored without them get them found.
    assert [at for at, _ in series_change_points(series)] == [7]
    del series["change_points"]
    assert [at for at, _ in series_change_points(series)] == [7]
    assert points[0]["shift_pct"] == pytest.approx(20, abs=2) and points[0]["confidence"] > 0.95


def test_a_models_series_are_per_target(tmp_path):
    """The same model on the CPU and on a GPU: two histories, never one mixed series."""
    import datetime as dt

    from aaco_pipelines.governance.drift.series import model_series
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(tmp_path / "lake.duckdb")
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    rows = [
        {
            "session_id": f"{target}-{i}",
            "model_slug": "m",
            "target": target,
            "started_at": start + dt.timedelta(hours=2 * i + (target == "gpu0")),
            "model_sha256": "sha",
            "runtime_fingerprint": "rt",
            "latency_p50_ns": p50,
            "latency_p99_ns": p50 * 2,
            "throughput_per_s": 1e9 / p50,
        }
        for target, p50 in (("cpu", 1_000_000), ("gpu0", 50_000))
        for i in range(4)
    ]
    store_sessions(lake, rows)
    for target, p50 in (("cpu", 1_000_000), ("gpu0", 50_000)):
        series = model_series(lake, "m", f"{target}-3")["latency_p50_ns"]
        assert series["session_ids"] == [f"{target}-{i}" for i in range(4)]
        assert set(series["values"]) == {p50}

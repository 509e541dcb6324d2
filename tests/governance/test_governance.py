"""Robust baseline, EWMA, CUSUM and the drift verdict, on hand-computed and seeded numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aaco_pipelines.governance.drift.detectors import CusumParams, EwmaParams, cusum, ewma
from aaco_pipelines.governance.drift.noise import series_shape
from aaco_pipelines.governance.drift.robust_scale import qn_scale, robust_reference, standardize
from aaco_pipelines.governance.drift.verdict import VerdictPolicy, drift_verdict, predictive_p_value


def quiet_history(n: int = 5, level: float = 10.0, noise: float = 0.01, seed: int = 1):
    return np.random.default_rng(seed).normal(level, level * noise, n)


# --- robust baseline -------------------------------------------------------------------------


def test_baseline_median_mad_and_qn_ignore_an_outlier():
    b = robust_reference(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    assert (b.median, b.mad, b.n) == (3.0, 1.0, 5)
    # Qn: h = 3, k = C(3, 2) = 3rd smallest of the 10 pairwise distances (1, 1, 1, ...) = 1,
    # times 2.2191 and the 5-point correction 0.844.
    assert b.qn == b.scale == pytest.approx(2.2191 * 0.844, rel=1e-4)
    assert b.to_dict()["median"] == 3.0


def test_qn_is_a_consistent_sd_at_small_and_large_n():
    rng = np.random.default_rng(0)
    for n in (3, 5, 10, 30):
        estimates = [qn_scale(rng.normal(0.0, 2.0, n)) for _ in range(3000)]
        assert np.mean(estimates) == pytest.approx(2.0, rel=0.05), n
    assert qn_scale(np.array([5.0])) == 0.0


@pytest.mark.parametrize("n", [2, 3, 5, 9, 10, 31, 200])
def test_qn_is_statsmodels_qn_with_the_small_sample_correction(n):
    """The same estimator as statsmodels' (kept here for speed and the correction it lacks)."""
    from statsmodels.robust.scale import qn_scale as statsmodels_qn

    from aaco_pipelines.governance.drift.robust_scale import QN_SMALL_N

    x = np.random.default_rng(n).lognormal(size=n)
    correction = QN_SMALL_N.get(n, n / (n + 1.4) if n % 2 else n / (n + 3.8))
    assert qn_scale(x) == pytest.approx(correction * statsmodels_qn(x), rel=1e-12)


def test_constant_series_uses_the_floor_so_a_jump_gets_a_finite_z():
    b = robust_reference(np.full(8, 10.0), floor_fraction=0.01)
    assert b.mad == 0.0
    assert b.scale == pytest.approx(0.01 * 10.0)
    z = standardize(np.array([10.0, 11.0]), b)
    assert z == pytest.approx([0.0, 10.0])


def test_baseline_rejects_empty_and_nan():
    with pytest.raises(ValueError):
        robust_reference(np.array([]))
    with pytest.raises(ValueError):
        robust_reference(np.array([1.0, np.nan]))


# --- EWMA ------------------------------------------------------------------------------------


def test_ewma_statistic_follows_the_recursion():
    r = ewma(np.array([1.0, 0.0, 2.0, -1.0]), EwmaParams(lam=0.2, L=3.0))
    # s1 = .2; s2 = .8*.2; s3 = .2*2 + .8*.16; s4 = -.2 + .8*.528
    assert r.statistic == pytest.approx([0.2, 0.16, 0.528, 0.2224])
    assert r.upper == pytest.approx([1.0] * 4)  # 3 * sqrt(.2 / 1.8)
    assert r.lower == pytest.approx([-1.0] * 4)
    assert r.signal.tolist() == [0, 0, 0, 0]


def test_ewma_exact_limits_start_tight_and_converge_to_asymptotic():
    z = np.zeros(100)
    asym = ewma(z, EwmaParams(limits="asymptotic")).upper
    exact = ewma(z, EwmaParams(limits="exact")).upper
    assert asym[0] == pytest.approx(1.0)
    assert exact[0] == pytest.approx(0.6)  # 1.0 * sqrt(1 - 0.8**2)
    assert exact[-1] == pytest.approx(asym[-1], rel=1e-9)
    assert np.all(np.diff(exact) >= 0) and np.all(exact <= asym)
    # An early jump (statistic .2 * 3.5 = .7) crosses the exact limit but not the asymptotic one.
    early = np.array([3.5, 0.0])
    assert ewma(early, EwmaParams(limits="exact")).signal[0] == 1
    assert ewma(early, EwmaParams(limits="asymptotic")).signal[0] == 0


def test_ewma_signals_a_sustained_shift_within_a_few_points():
    rng = np.random.default_rng(2)
    z = np.concatenate([rng.standard_normal(50), rng.standard_normal(30) + 1.5])
    signal = ewma(z).signal
    assert not signal[:50].any()
    first = int(np.flatnonzero(signal[50:] == 1)[0])
    assert first <= 8
    assert not (signal == -1).any()


def test_ewma_in_control_rarely_signals():
    z = np.random.default_rng(1).standard_normal(200)
    assert np.count_nonzero(ewma(z, EwmaParams(lam=0.2, L=3.0)).signal) <= 1


def test_ewma_rejects_bad_parameters():
    with pytest.raises(ValueError):
        EwmaParams(limits="exactly")
    with pytest.raises(ValueError):
        EwmaParams(lam=0.0)


# --- CUSUM -----------------------------------------------------------------------------------


def test_cusum_sums_by_hand():
    r = cusum(np.array([1.0, 2.0, -1.0, -3.0, 0.5]), CusumParams(k=0.5, h=5.0))
    assert r.upper == pytest.approx([0.5, 2.0, 0.5, 0.0, 0.0])
    assert r.lower == pytest.approx([0.0, 0.0, 0.5, 3.0, 2.0])
    assert r.signal.tolist() == [0, 0, 0, 0, 0]


def test_cusum_restarts_after_a_signal():
    params = CusumParams(k=0.5, h=5.0)
    shift = 2.0
    r = cusum(np.full(40, shift), params)
    fired = np.flatnonzero(r.signal)
    gap = math.ceil(params.h / (shift - params.k))  # 4: C+ climbs 1.5 a point, crosses 5 at 6.0
    assert fired[0] == gap - 1
    assert np.all(np.diff(fired) >= gap)
    assert len(fired) == 40 // gap
    assert np.all(r.signal[fired] == 1)
    assert r.upper[fired[0]] == pytest.approx(6.0)  # the crossing value is kept...
    assert r.upper[fired[0] + 1] == pytest.approx(1.5)  # ...and the sum starts again from 0


def test_cusum_lower_side_detects_a_downward_shift():
    rng = np.random.default_rng(3)
    z = np.concatenate([rng.standard_normal(30), rng.standard_normal(20) - 2.0])
    signal = cusum(z).signal
    assert not signal[:30].any()
    first = int(np.flatnonzero(signal)[0])
    assert signal[first] == -1
    assert 30 <= first <= 38


def test_cusum_in_control_average_run_length_matches_the_published_value():
    # Two-sided tabular CUSUM with k=0.5, h=5: ARL0 about 465 (Montgomery).
    runs, steps = 2000, 3000
    z = np.random.default_rng(0).standard_normal((runs, steps))
    fired = cusum(z, CusumParams(k=0.5, h=5.0)).signal != 0
    run_length = np.where(fired.any(axis=1), fired.argmax(axis=1) + 1, steps)
    assert 350 <= run_length.mean() <= 600


# --- drift verdict ---------------------------------------------------------------------------


def test_latency_jump_is_a_regression():
    history = quiet_history()
    samples = np.random.default_rng(7).normal(12.0, 0.12, 50)
    v = drift_verdict(np.append(history, 12.0), higher_is_worse=True, current_samples=samples)
    assert v.verdict == "regression"
    assert v.effect_pct == pytest.approx(20.0, abs=1.5)
    assert 0.0 < v.ci_low < v.effect_pct < v.ci_high
    assert v.decided_by in {"cusum", "ewma", "z_threshold"}
    assert v.z > 4.0
    assert v.history_points == 5
    assert v.baseline["n"] == 5


def test_latency_drop_is_an_improvement():
    history = quiet_history()
    samples = np.random.default_rng(7).normal(8.0, 0.08, 50)
    v = drift_verdict(np.append(history, 8.0), higher_is_worse=True, current_samples=samples)
    assert v.verdict == "improvement"
    assert v.effect_pct == pytest.approx(-20.0, abs=1.5)
    assert v.ci_low < v.ci_high < 0.0
    assert v.decided_by in {"cusum", "ewma", "z_threshold"}


def test_throughput_drop_is_a_regression_and_rise_an_improvement():
    history = quiet_history(level=1000.0)
    down = drift_verdict(np.append(history, 800.0), higher_is_worse=False)
    up = drift_verdict(np.append(history, 1200.0), higher_is_worse=False)
    assert (down.verdict, up.verdict) == ("regression", "improvement")
    assert down.effect_pct < 0.0 < up.effect_pct
    assert down.ci_high < 0.0  # without samples only the history is resampled


def test_change_within_noise_is_no_change():
    v = drift_verdict(np.append(quiet_history(), 10.05), higher_is_worse=True)
    assert v.verdict == "no_change"
    assert v.decided_by == "no_signal"
    assert abs(v.z) < 4.0


def test_clear_but_tiny_shift_is_below_min_effect():
    history = quiet_history(n=20, noise=0.0001)
    series = np.append(history, 10.1)  # +1%, many robust sd on a near-constant series
    precise = VerdictPolicy(floor_fraction=0.0001)
    v = drift_verdict(series, higher_is_worse=True, policy=precise)
    assert v.z >= precise.z_threshold
    assert v.decided_by == "below_min_effect"
    assert v.verdict == "no_change"
    assert v.effect_pct == pytest.approx(1.0, abs=0.1)
    # With the default 1% floor the same 1% shift is not even statistical evidence.
    assert drift_verdict(series, higher_is_worse=True).decided_by == "no_signal"


def test_noisy_current_session_leaves_the_ci_including_zero():
    # The current value is 20% up, but its own iterations split between 9.5 and 14.5.
    samples = np.repeat([9.5, 14.5], 10)
    v = drift_verdict(
        np.append(quiet_history(), 12.0), higher_is_worse=True, current_samples=samples
    )
    assert v.verdict == "no_change"
    assert v.decided_by == "ci_includes_zero"
    assert v.ci_low < 0.0 < v.ci_high


def test_too_little_history_is_insufficient():
    v = drift_verdict(np.array([10.0, 10.1, 15.0]), higher_is_worse=True)
    assert v.verdict == v.decided_by == "insufficient_history"
    assert (v.effect_pct, v.ci_low, v.ci_high, v.z, v.baseline) == (None,) * 5
    assert v.history_points == 2
    enough = drift_verdict(np.array([10.0, 10.1, 9.9, 15.0]), higher_is_worse=True)
    assert enough.verdict == "regression"


def test_baseline_uses_only_the_history_window():
    old = np.full(20, 20.0)  # a slower era, outside the window
    series = np.concatenate([old, quiet_history(n=10), [10.0]])
    v = drift_verdict(series, higher_is_worse=True, policy=VerdictPolicy(history_window=10))
    assert v.history_points == v.baseline["n"] == 10
    assert v.baseline["median"] == pytest.approx(10.0, abs=0.1)
    assert v.verdict == "no_change"


def test_parameters_are_recorded_and_serializable():
    policy = VerdictPolicy(
        min_effect_pct=5.0,
        ewma=EwmaParams(lam=0.3, L=2.8, limits="exact"),
        cusum=CusumParams(k=0.25, h=8.0),
        bootstrap_resamples=500,
        seed=42,
    )
    v = drift_verdict(np.append(quiet_history(), 12.0), higher_is_worse=True, policy=policy)
    p = v.parameters
    assert p["ewma"] == {"lam": 0.3, "L": 2.8, "limits": "exact"}
    assert p["cusum"] == {"k": 0.25, "h": 8.0, "sides": 2}
    assert (p["min_effect_pct"], p["history_window"], p["z_threshold"]) == (5.0, 30, 4.0)
    assert (p["bootstrap_resamples"], p["confidence"], p["seed"]) == (500, 0.95, 42)
    assert p["higher_is_worse"] is True
    assert p["current_samples"] is None
    assert json.loads(json.dumps(v.to_dict())) == v.to_dict()


def test_verdict_is_deterministic_for_a_seed():
    series = np.append(quiet_history(), 12.0)
    samples = np.random.default_rng(7).normal(12.0, 0.5, 30)
    again = [
        drift_verdict(series, higher_is_worse=True, current_samples=samples).to_dict()
        for _ in range(2)
    ]
    assert again[0] == again[1]
    other = drift_verdict(
        series, higher_is_worse=True, current_samples=samples, policy=VerdictPolicy(seed=1)
    )
    assert (other.ci_low, other.ci_high) != (again[0]["ci_low"], again[0]["ci_high"])


# --- p-value ---------------------------------------------------------------------------------


def test_p_value_is_small_for_a_big_shift_and_large_in_control():
    history = quiet_history(n=30)
    big = drift_verdict(np.append(history, 11.0), higher_is_worse=True)  # +10%, ~10 sd
    quiet = drift_verdict(np.append(history, 10.02), higher_is_worse=True)
    assert big.p_value < 1e-6 and quiet.p_value > 0.5
    assert big.parameters["p_value"] == big.p_value
    assert big.parameters["p_value_test"].startswith("two-sided")
    assert drift_verdict(np.array([10.0, 11.0]), higher_is_worse=True).p_value is None


def test_p_value_is_two_sided_and_grows_with_history():
    history = quiet_history(n=30)
    up = drift_verdict(np.append(history, 10.4), higher_is_worse=True)
    down = drift_verdict(np.append(history, 2 * np.median(history) - 10.4), higher_is_worse=True)
    assert up.p_value == pytest.approx(down.p_value, rel=1e-6)
    assert predictive_p_value(4.0, 30) < predictive_p_value(4.0, 10) < predictive_p_value(4.0, 4)
    assert predictive_p_value(4.0, 30, points=2) < predictive_p_value(4.0, 30)


def test_p_value_is_calibrated_in_control():
    # Normal histories of 20 points, no change: P(p < alpha) about alpha, never much above.
    rng = np.random.default_rng(3)
    series = rng.normal(100.0, 1.0, (2000, 21))
    baselines = [robust_reference(s[:-1], floor_fraction=1e-6) for s in series]
    z = [float(standardize(s[-1:], b)[0]) for s, b in zip(series, baselines, strict=True)]
    p = np.array([predictive_p_value(zi, 20) for zi in z])
    assert 0.02 <= np.mean(p < 0.05) <= 0.06
    assert np.mean(p < 0.01) <= 0.015
    one = drift_verdict(series[0], higher_is_worse=True, policy=VerdictPolicy(floor_fraction=1e-6))
    assert one.p_value == pytest.approx(p[0])


# --- unstable series -------------------------------------------------------------------------


def test_alternating_bimodal_series_is_unstable_not_a_flip_flop():
    rng = np.random.default_rng(4)
    modes = rng.random(30) < 0.4  # a host that runs the model 25% slower on some nights
    history = 10.0 * np.where(modes, 1.25, 1.0) * np.exp(rng.normal(0.0, 0.01, 30))
    verdicts = [
        drift_verdict(np.append(history, current), higher_is_worse=True) for current in (10.0, 12.5)
    ]
    assert {v.verdict for v in verdicts} == {"unstable_series"}
    assert {v.decided_by for v in verdicts} == {"bimodal"}
    shape = verdicts[1].parameters["series_shape"]
    assert shape["ashman_d"] > 4.0 and shape["mode_gap_pct"] == pytest.approx(25.0, abs=2.0)
    assert shape["interleaved"] >= 3 and shape["mode_switches"] > 5
    assert verdicts[1].effect_pct is not None and verdicts[1].p_value is not None
    assert "verdict" in verdicts[1].parameters["unstable_over"]


def test_very_noisy_series_is_unstable_too_noisy():
    rng = np.random.default_rng(5)
    history = 10.0 * np.exp(rng.normal(0.0, 0.2, 30))
    v = drift_verdict(np.append(history, 15.0), higher_is_worse=True)
    assert (v.verdict, v.decided_by) == ("unstable_series", "too_noisy")
    assert v.parameters["series_shape"]["noise_cv"] > 0.1


@pytest.mark.parametrize("step", [1.05, 1.5])
def test_a_step_is_a_level_shift_not_bimodal(step):
    # 15 nights at one level, then 15 at another: the modes are contiguous, not interleaved.
    rng = np.random.default_rng(6)
    history = 10.0 * np.repeat([1.0, step], 15) * np.exp(rng.normal(0.0, 0.01, 30))
    history[[4, 20]] *= 1.3  # and two shared-host outliers
    v = drift_verdict(np.append(history, 10.0 * step), higher_is_worse=True)
    assert v.verdict != "unstable_series"
    assert v.parameters["series_shape"]["unstable"] is None
    assert v.parameters["series_shape"]["interleaved"] < 3


def test_clean_in_control_series_is_not_unstable():
    rng = np.random.default_rng(7)
    for noise in rng.normal(0.0, 0.01, (50, 31)):
        v = drift_verdict(10.0 * np.exp(noise), higher_is_worse=True)
        assert v.verdict != "unstable_series"


def test_shape_needs_enough_history():
    alternating = np.tile([10.0, 13.0], 4)  # 8 points: below ShapeParams.min_points
    v = drift_verdict(np.append(alternating, 10.0), higher_is_worse=True)
    assert v.verdict != "unstable_series"
    assert v.parameters["series_shape"]["unstable"] is None
    assert series_shape(np.tile([10.0, 13.0], 6)).unstable == "bimodal"

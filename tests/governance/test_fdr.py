"""Benjamini-Hochberg across a sweep: by hand, against scipy, and on verdicts."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import false_discovery_control

from aaco_pipelines.governance.drift.fdr import benjamini_hochberg, sweep_rows, sweep_verdicts
from aaco_pipelines.governance.drift.verdict import drift_verdict
from aaco_pipelines.tracelake.schema import DRIFT_VERDICTS


def test_bh_by_hand():
    # Sorted: .005 .01 .03 .04 .5 (m = 5); p * m / rank = .025 .025 .05 .05 .5, already monotone.
    p = np.array([0.01, 0.04, 0.03, 0.005, 0.5])
    reject, adjusted = benjamini_hochberg(p, q=0.05)
    assert adjusted == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])
    assert reject.tolist() == [True, True, True, True, False]
    # At q = .04 the step-up stops at rank 2: only .005 and .01.
    assert benjamini_hochberg(p, q=0.04)[0].tolist() == [True, False, False, True, False]


def test_bh_adjusted_is_monotone_in_the_sorted_p():
    # .021 * 3 / 2 = .0315 is above the next one's .03 * 3 / 3, so it is adjusted down to .03.
    _, adjusted = benjamini_hochberg(np.array([0.001, 0.021, 0.03]))
    assert adjusted == pytest.approx([0.003, 0.03, 0.03])


def test_nan_is_left_out_of_the_family():
    p = np.array([0.01, np.nan, 0.04, 0.03, np.nan, 0.005, 0.5])
    reject, adjusted = benjamini_hochberg(p)
    assert np.isnan(adjusted[[1, 4]]).all() and not reject[[1, 4]].any()
    finite = ~np.isnan(p)
    assert adjusted[finite] == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])


@pytest.mark.parametrize("seed", range(5))
def test_bh_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.random(200), rng.random(20) * 1e-3])  # some true discoveries
    p[rng.choice(p.size, 15, replace=False)] = np.nan
    rng.shuffle(p)
    reject, adjusted = benjamini_hochberg(p, q=0.1)
    finite = ~np.isnan(p)
    scipy_adjusted = false_discovery_control(p[finite], method="bh")
    assert adjusted[finite] == pytest.approx(scipy_adjusted, rel=1e-12)
    assert reject[finite].tolist() == (scipy_adjusted <= 0.1).tolist()


def test_bh_works_along_the_last_axis():
    p = np.random.default_rng(9).random((4, 30)) ** 3
    p[2, 5] = np.nan
    reject, adjusted = benjamini_hochberg(p)
    for row, r, a in zip(p, reject, adjusted, strict=True):
        one_r, one_a = benjamini_hochberg(row)
        np.testing.assert_array_equal(r, one_r)
        np.testing.assert_allclose(a, one_a, equal_nan=True)


def test_bh_rejects_bad_input():
    with pytest.raises(ValueError):
        benjamini_hochberg(np.array([0.1, 1.5]))
    with pytest.raises(ValueError):
        benjamini_hochberg(np.array([0.1]), q=0.0)
    reject, adjusted = benjamini_hochberg(np.array([]))
    assert reject.size == adjusted.size == 0


def _quiet(level: float, seed: int, n: int = 20) -> np.ndarray:
    return np.random.default_rng(seed).normal(level, level * 0.01, n)


def _sweep_fixture():
    """A clear regression, a marginal one and 30 quiet series."""
    clear = drift_verdict(np.append(_quiet(10.0, 0), 12.0), higher_is_worse=True)
    marginal = drift_verdict(np.append(_quiet(10.0, 1), 10.3), higher_is_worse=True)
    quiet = [drift_verdict(_quiet(10.0, s, 21), higher_is_worse=True) for s in range(100, 130)]
    # Pretend a lenient policy called the marginal one a regression: its p stays modest.
    marginal = dataclasses.replace(marginal, verdict="regression", decided_by="ewma")
    return clear, marginal, quiet


def test_sweep_downgrades_what_fdr_does_not_support():
    clear, marginal, quiet = _sweep_fixture()
    assert clear.p_value < 1e-6 and 2e-3 < marginal.p_value < 0.05
    swept = sweep_verdicts([clear, marginal, *quiet], q=0.05)
    assert swept[0].verdict == "regression" and swept[0].decided_by == clear.decided_by
    assert swept[1].verdict == "no_change" and swept[1].decided_by == "fdr_controlled"
    fdr = swept[1].parameters["fdr"]
    assert fdr["over"] == {"verdict": "regression", "decided_by": "ewma"}
    assert fdr["p_value"] == marginal.p_value and fdr["p_adjusted"] > 0.05
    assert fdr["family_size"] == 32 and fdr["q"] == 0.05
    assert all(v.verdict == q.verdict for v, q in zip(swept[2:], quiet, strict=True))
    assert json.loads(json.dumps(swept[1].to_dict())) == swept[1].to_dict()


def test_sweep_alone_keeps_a_modest_regression():
    _, marginal, _ = _sweep_fixture()
    (alone,) = sweep_verdicts([marginal], q=0.05)
    assert alone.verdict == "regression"  # a family of one: adjusted p = p
    assert alone.parameters["fdr"]["p_adjusted"] == pytest.approx(marginal.p_value)


def test_insufficient_history_is_outside_the_family():
    clear, _, _ = _sweep_fixture()
    short = drift_verdict(np.array([10.0, 11.0]), higher_is_worse=True)
    swept = sweep_verdicts([clear, short])
    assert swept[1].verdict == "insufficient_history"
    assert swept[1].parameters["fdr"]["p_adjusted"] is None
    assert swept[0].parameters["fdr"]["family_size"] == 1


def test_sweep_rows_on_drift_verdict_rows():
    clear, marginal, quiet = _sweep_fixture()
    rows = pa.Table.from_pylist(
        [
            {
                "metric": f"m{i}",
                "verdict": v.verdict,
                "decided_by": v.decided_by,
                "parameters_json": json.dumps(v.parameters),
            }
            for i, v in enumerate([clear, marginal, *quiet])
        ],
        schema=DRIFT_VERDICTS,  # the columns left out are null
    )
    swept = sweep_rows(rows).to_pylist()
    assert [r["verdict"] for r in swept[:2]] == ["regression", "no_change"]
    assert swept[1]["decided_by"] == "fdr_controlled"
    assert json.loads(swept[1]["parameters_json"])["fdr"]["over"]["verdict"] == "regression"


def test_a_sweep_reports_only_the_regressions_that_survive_fdr(aaco_paths):
    """22 series judged in one sweep: a regression at p = 1e-6 stays, one at p = 0.01 (BH-
    adjusted 0.11) becomes no_change in the TraceLake and in the sweep's summary."""
    import json

    import pyarrow as pa

    from aaco_pipelines.sensors.sweep import SweepResult, control_false_discoveries
    from aaco_pipelines.tracelake.schema import DRIFT_VERDICTS, conform
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(aaco_paths.tracelake)
    judged = {f"quiet{i}": ("no_change", 0.5) for i in range(20)}
    judged |= {"strong": ("regression", 1e-6), "weak": ("regression", 0.01)}
    for sid, (verdict, p) in judged.items():
        row = {"session_id": sid, "model_slug": sid, "metric": "latency_p50_ns",
               "verdict": verdict, "decided_by": "cusum", "p_value": p,
               "parameters_json": json.dumps({"p_value": p})}  # fmt: skip
        lake.replace_session_rows(
            sid, {"drift_verdicts": conform(pa.Table.from_pylist([row]), DRIFT_VERDICTS)}
        )
    results = [
        SweepResult(sid, "regression" if v == "regression" else "ok", "run", sid, 1.0, v, None)
        for sid, (v, _) in judged.items()
    ]
    after = {r.slug: r for r in control_false_discoveries(aaco_paths, results)}
    assert after["strong"].status == "regression"
    assert after["weak"].status == "ok" and "fdr_controlled" in after["weak"].verdict
    stored = lake.query("SELECT session_id, verdict, decided_by FROM drift_verdicts").to_pylist()
    by_session = {r["session_id"]: r for r in stored}
    assert by_session["weak"]["verdict"] == "no_change"
    assert by_session["weak"]["decided_by"] == "fdr_controlled"
    assert by_session["strong"]["verdict"] == "regression"

    # Judging the same sweep again (a re-run of a night's review) changes nothing.
    again = {r.slug: r for r in control_false_discoveries(aaco_paths, results)}
    assert again["strong"].status == "regression" and again["weak"].status == "ok"
    weak = lake.query("SELECT * FROM drift_verdicts WHERE session_id = 'weak'").to_pylist()[0]
    fdr = json.loads(weak["parameters_json"])["fdr"]
    assert weak["verdict"] == "no_change" and fdr["over"]["verdict"] == "regression"
    assert fdr["family_size"] == 22

"""Change points over a whole history, checked on series nobody on this project wrote.

TCPD's quality-control series come with human annotations (van den Burg & Williams 2020);
Otava's Tigerbeetle series with its maintainers' reading (changes at 16, 71, 97, a lone outlier
at 10); MongoDB's robust_series with the q values of their E-divisive implementation.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from aaco_pipelines.governance.drift.changepoint import (
    ChangePoint,
    detect_change_points,
    q_statistics,
)
from aaco_pipelines.governance.drift.changepoint_score import covering, f_measure, true_positives
from tests.helpers import SHARED

DATA = SHARED / "samples" / "changepoint"


def tcpd(i: int) -> tuple[np.ndarray, dict[str, list[int]]]:
    doc = json.loads((DATA / "tcpd" / "datasets" / f"quality_control_{i}.json").read_text())
    annotations = json.loads((DATA / "tcpd" / "annotations.json").read_text())
    return np.asarray(doc["series"][0]["raw"]), annotations[f"quality_control_{i}"]


def tigerbeetle() -> np.ndarray:
    with (DATA / "otava" / "tigerbeetle_series.csv").open() as f:
        return np.asarray([float(row["value"]) for row in csv.DictReader(f)])


def near(indices: list[int], target: int, margin: int) -> bool:
    return any(abs(i - target) <= margin for i in indices)


@pytest.fixture(scope="module")
def qc_found() -> dict[int, list[int]]:
    return {i: [p.index for p in detect_change_points(tcpd(i)[0])] for i in range(1, 6)}


@pytest.fixture(scope="module")
def tb_found() -> dict[str, list[int]]:
    values = tigerbeetle()
    return {
        m: [p.index for p in detect_change_points(values, method=m)] for m in ("e_divisive", "pelt")
    }


# --- TCPD quality control -------------------------------------------------------------------


def test_qc1_offset_and_noise_change_at_146(qc_found):
    assert near(qc_found[1], 146, 5)


def test_qc2_a_one_and_a_half_sigma_step_at_97(qc_found):
    assert near(qc_found[2], 97, 5)


def test_qc3_noise_change_at_179_but_not_the_outlier_at_42(qc_found):
    assert near(qc_found[3], 179, 5)
    assert not near(qc_found[3], 42, 5)


def test_qc4_offset_change_at_341_despite_periodic_components(qc_found):
    # E-divisive assumes independent points: the periodic component also yields splits at its
    # turns (158, 197, 267, 288, 468, 488), which only one of five annotators marked.
    assert near(qc_found[4], 341, 5)


def test_qc5_has_no_change(qc_found):
    assert qc_found[5] == []


def test_tcpd_f1_and_covering(qc_found):
    """Every annotated change is recalled; precision is lost on QC1's drift and QC4's cycle.

    Bounds: a single-change series with one extra detection scores F1 = 0.8 and with two 0.67,
    so >= 0.6 per series allows two false alarms and the mean >= 0.8 allows about one per series.
    """
    scores = {i: f_measure(tcpd(i)[1], found) for i, found in qc_found.items()}
    assert all(recall >= 0.95 for _, _, recall in scores.values())
    assert scores[2][0] == scores[5][0] == 1.0
    assert all(f1 >= 0.6 for f1, _, _ in scores.values())
    assert np.mean([f1 for f1, _, _ in scores.values()]) >= 0.8
    covers = [covering(tcpd(i)[1], found, tcpd(i)[0].size) for i, found in qc_found.items()]
    assert np.mean(covers) >= 0.75


# --- Otava Tigerbeetle ----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["e_divisive", "pelt"])
def test_tigerbeetle_changes_found_and_outlier_ignored(tb_found, method):
    found = tb_found[method]
    assert near(found, 16, 5) and near(found, 71, 5)
    assert near(found, 92, 5) and near(found, 97, 5)  # the drop is at 95
    assert not near(found, 10, 3)  # the lone outlier (15672 among ~26700)


def test_tigerbeetle_short_excursion_near_150_needs_pelt(tb_found):
    # 142-147 sit ~3% above their neighbours for 6 points; E-divisive's splits compare a
    # regime's two ends, so only PELT isolates an excursion in the middle of a long regime.
    assert near(tb_found["pelt"], 150, 5) and near(tb_found["pelt"], 142, 2)


# --- synthetic ------------------------------------------------------------------------------


def noise(n: int, sd: float = 1.0, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, sd, n)


@pytest.mark.parametrize("method", ["e_divisive", "pelt"])
@pytest.mark.parametrize("position", [2, 40, 78])
def test_a_single_huge_outlier_is_not_a_change(method, position):
    values = 100.0 + noise(80)
    values[position] = 10_000.0
    assert detect_change_points(values, method=method) == []


@pytest.mark.parametrize("method", ["e_divisive", "pelt"])
def test_a_five_percent_step_in_one_percent_noise(method):
    values = np.r_[100.0 + noise(60), 105.0 + noise(60, seed=8)]
    (point,) = detect_change_points(values, method=method)
    assert point.index == 60
    assert point.shift_pct == pytest.approx(5.0, abs=0.5)
    assert point.shift_sd == pytest.approx(5.0, abs=1.0)
    assert point.before_median == pytest.approx(100.0, abs=0.5)
    assert point.p_value <= 0.05 and point.confidence == pytest.approx(1.0 - point.p_value)


def test_a_change_of_spread_alone_is_found_by_e_divisive():
    values = np.r_[noise(100), noise(100, sd=3.0, seed=8)]
    assert near([p.index for p in detect_change_points(values)], 100, 5)


def test_min_shift_pct_ignores_changes_too_small_to_matter():
    values = np.r_[100.0 + noise(50, 0.1), 101.0 + noise(50, 0.1, seed=8)]
    assert [p.index for p in detect_change_points(values)] == [50]
    assert detect_change_points(values, min_shift_pct=2.0) == []


def test_results_are_deterministic_for_a_seed():
    values = tigerbeetle()[:120]
    first = [p.to_dict() for p in detect_change_points(values, seed=3)]
    assert first == [p.to_dict() for p in detect_change_points(values, seed=3)]
    assert set(ChangePoint.__dataclass_fields__) == set(first[0])


def test_short_constant_and_invalid_series():
    assert detect_change_points([1.0] * 9) == []
    assert detect_change_points([1.0] * 50) == []
    with pytest.raises(ValueError):
        detect_change_points([1.0, float("nan")] * 10)
    with pytest.raises(ValueError):
        detect_change_points([1.0] * 20, method="binseg")
    with pytest.raises(ValueError):
        detect_change_points([1.0] * 20, min_size=1)


def test_q_statistic_matches_mongodb_e_divisive():
    """Their q for every split of robust_series ('proper division': within-sample means over
    C(n, 2) pairs, as in Matteson & James); splits leaving one point alone are not ours."""
    spa = DATA / "mongodb_spa"
    values = np.asarray(json.loads((spa / "robust_series.json").read_text()))
    theirs = json.loads((spa / "expected_result_robust_series_proper_division.json").read_text())
    ours = q_statistics(values, 2)[0]
    np.testing.assert_allclose(ours, theirs[2 : values.size - 1], rtol=1e-9)


# --- TCPD scores ----------------------------------------------------------------------------


def test_true_positives_use_each_detection_once():
    assert true_positives({1, 10, 20, 23}, {3, 8, 20}) == {1, 10, 20}
    assert true_positives({10, 12}, {11}) == {10}  # one detection, two annotations
    assert true_positives({10}, {16}) == set()  # beyond the margin of 5
    assert true_positives(set(), {1, 2}) == set()


def test_f_measure_counts_index_zero_for_everyone():
    # No change annotated, none found: both sets are {0}, a perfect score.
    assert f_measure({"a": [], "b": []}, []) == (1.0, 1.0, 1.0)
    # One false alarm on a quiet series: precision 1/2, recall 1.
    assert f_measure({"a": []}, [40]) == pytest.approx((2 / 3, 0.5, 1.0))
    # Annotators disagree: recall averages 2/2 and 1/1; precision uses their union {0, 10}.
    assert f_measure({"a": [10], "b": []}, [12]) == (1.0, 1.0, 1.0)
    # Nothing found where one of two annotators saw a change: recall (1/2 + 1) / 2.
    assert f_measure({"a": [10], "b": []}, [0]) == pytest.approx((6 / 7, 1.0, 0.75))
    # A miss plus a false alarm: precision 1/2, recall 1/2.
    assert f_measure({"a": [10]}, [30]) == pytest.approx((0.5, 0.5, 0.5))


def test_covering_by_jaccard_of_segments():
    assert covering({"a": [5]}, [5], 10) == 1.0
    assert covering({"a": [5]}, [], 10) == 0.5  # each half overlaps [0, 10) by 5/10
    # [0,5) best matches [0,4) (4/5), [5,10) best matches [4,10) (5/6).
    assert covering({"a": [5]}, [4], 10) == pytest.approx((5 * 0.8 + 5 * 5 / 6) / 10)
    assert covering({"a": [5], "b": []}, [5], 10) == pytest.approx((1.0 + 0.5) / 2)

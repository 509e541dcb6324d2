"""ARL of the detectors against published tables, the real detectors and the `aaco detector` CLI.

A published ARL is printed to 2-3 significant digits and was itself computed numerically, so
"agrees" means: within half a unit of the last printed digit, or 0.5%, whichever is larger.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.governance.drift.arl import (
    cusum_arl,
    design_cusum,
    design_ewma,
    ewma_arl,
    simulate_arl,
)
from aaco_pipelines.governance.drift.detectors import CusumParams, EwmaParams, cusum

SHIFTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)


def published(printed: str, rel: float = 0.005):
    """`printed` as a pytest.approx with the tolerance stated in the module docstring."""
    decimals = len(printed.partition(".")[2])
    return pytest.approx(float(printed), rel=rel, abs=0.5 * 10.0**-decimals)


def table(shifts, printed: str) -> list[tuple[float, str]]:
    """A published row, kept as printed so its precision sets the tolerance."""
    return list(zip(shifts, printed.split(), strict=True))


# --- CUSUM -----------------------------------------------------------------------------------

# Lucas & Crosier (1982), Technometrics 24, Table 1: two-sided, k = 0.5, h = 4, no head start.
LUCAS_CROSIER_H4 = table(SHIFTS + (5.0,), "168 74.2 26.6 13.3 8.38 4.75 3.34 2.62 2.19 1.71 1.31")
# Montgomery, Introduction to Statistical Quality Control, Table 9.3 (from Hawkins 1993):
# the same chart with h = 5.
MONTGOMERY_H5 = table(SHIFTS, "465 139 38.0 17.0 10.4 5.75 4.01 3.11 2.57 2.01")


@pytest.mark.parametrize(("shift", "printed"), LUCAS_CROSIER_H4)
def test_two_sided_cusum_h4_matches_lucas_crosier(shift, printed):
    assert cusum_arl(0.5, 4.0, shift) == published(printed)


@pytest.mark.parametrize(("shift", "printed"), MONTGOMERY_H5)
def test_two_sided_cusum_h5_matches_montgomery(shift, printed):
    assert cusum_arl(0.5, 5.0, shift) == published(printed)


@pytest.mark.parametrize(
    ("k", "h", "shift", "printed", "source"),
    [
        (0.5, 3.0, 0.0, "117.59", "Brook & Evans (1972), section 4.3"),
        (0.5, 3.0, 1.5, "3.75", "Brook & Evans (1972), section 4.3"),
        (0.5, 3.0, -0.5, "1963", "Waldmann (1986), Table 3"),
        (0.5, 3.0, 0.5, "17.35", "Waldmann (1986), Table 5"),
        (0.0, 10.0, -0.25, "2071.51", "Vance (1986), Table 1"),
        (0.0, 10.0, 0.0, "124.66", "Vance (1986), Table 1"),
        (0.0, 10.0, 1.0, "10.75", "Vance (1986), Table 1"),
    ],
)
def test_one_sided_cusum_matches_published_values(k, h, shift, printed, source):
    assert cusum_arl(k, h, shift, sides=1) == published(printed), source


def test_one_sided_in_control_arl_is_twice_the_two_sided():
    # By symmetry 1/ARL = 2/ARL+ in control: 336 and 930 from Lucas & Crosier's 168 and 465.
    assert cusum_arl(0.5, 4.0, sides=1) == published("336")
    assert cusum_arl(0.5, 5.0, sides=1) == published("930")


def test_cusum_matches_the_sas_qc_reference_to_six_digits():
    # SAS/QC CUSUMARL (1999 manual): k = 0.25, h = 8, shift 2.5; 300 states give 2e-6.
    assert cusum_arl(0.25, 8.0, 2.5, sides=1) == pytest.approx(4.1500836225, rel=1e-5)
    assert cusum_arl(0.25, 8.0, 2.5, sides=2) == pytest.approx(4.1500826715, rel=1e-5)


# --- EWMA ------------------------------------------------------------------------------------

LUCAS_SACCUCCI_SHIFTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0)
# Lucas & Saccucci (1990), Technometrics 32, Table 3: two-sided, asymptotic (fixed) limits.
LUCAS_SACCUCCI = [
    (lam, width, s, p)
    for lam, width, row in [
        (0.50, 3.071, "500 255 88.8 35.9 17.5 6.53 3.63 2.50 1.93 1.58 1.34 1.07"),
        (0.03, 2.437, "500 76.7 29.3 17.6 12.6 8.07 5.99 4.80 4.03 3.49 3.11 2.55"),
    ]
    for s, p in table(LUCAS_SACCUCCI_SHIFTS, row)
]
# Montgomery, Table 9.11 (from Lucas & Saccucci 1990): the designs with in-control ARL 500.
MONTGOMERY_EWMA = [
    (lam, width, s, p)
    for lam, width, row in [
        (0.40, 3.054, "500 224 71.2 28.4 14.3 5.9 3.5 2.5 2.0 1.4"),
        (0.25, 2.998, "500 170 48.2 20.1 11.1 5.5 3.6 2.7 2.3 1.7"),
        (0.20, 2.962, "500 150 41.8 18.2 10.5 5.5 3.7 2.9 2.4 1.9"),
        (0.10, 2.814, "500 106 31.3 15.9 10.3 6.1 4.4 3.4 2.9 2.2"),
        (0.05, 2.615, "500 84.1 28.8 16.4 11.4 7.1 5.2 4.2 3.5 2.7"),
    ]
    for s, p in table(SHIFTS, row)
]
# Crowder (1987), Technometrics 29, Table 1: L = 2 with lam = 0.5 and 0.05.
CROWDER = [
    (0.5, 2.0, 0.0, "26.45"),
    (0.5, 2.0, 1.0, "4.91"),
    (0.5, 2.0, 2.0, "1.94"),
    (0.05, 2.0, 0.0, "127.53"),
    (0.05, 2.0, 1.0, "8.38"),
    (0.05, 2.0, 2.0, "4.04"),
]


@pytest.mark.parametrize(("lam", "width", "shift", "printed"), LUCAS_SACCUCCI)
def test_ewma_matches_lucas_saccucci(lam, width, shift, printed):
    assert ewma_arl(lam, width, shift) == published(printed)


@pytest.mark.parametrize(("lam", "width", "shift", "printed"), MONTGOMERY_EWMA)
def test_ewma_matches_montgomery_table(lam, width, shift, printed):
    assert ewma_arl(lam, width, shift) == published(printed)


@pytest.mark.parametrize(("lam", "width", "shift", "printed"), CROWDER)
def test_ewma_matches_crowder(lam, width, shift, printed):
    assert ewma_arl(lam, width, shift) == published(printed)


def test_ewma_matches_the_sas_qc_reference_to_nine_digits():
    # SAS/QC EWMAARL (1999 manual): lam = 0.25, L = 3, shift 1.
    assert ewma_arl(0.25, 3.0, 1.0) == pytest.approx(11.154267016, rel=1e-9)


def test_ewma_with_lam_one_is_the_shewhart_chart():
    assert ewma_arl(1.0, 3.0) == pytest.approx(370.398, rel=1e-5)  # 1 / P(|z| > 3)


# --- design ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "sides", "h"), [(465.0, 2, 5.0), (336.0, 1, 4.0)])
def test_design_cusum_recovers_the_published_h(target, sides, h):
    designed = design_cusum(target, k=0.5, sides=sides)
    assert designed == pytest.approx(h, abs=0.05)
    assert cusum_arl(0.5, designed, sides=sides) == pytest.approx(target, rel=1e-5)


@pytest.mark.parametrize(("lam", "width"), [(0.1, 2.814), (0.05, 2.615), (0.5, 3.071)])
def test_design_ewma_recovers_the_published_L(lam, width):
    L = design_ewma(500.0, lam=lam)
    assert L == pytest.approx(width, abs=0.005)
    assert ewma_arl(lam, L) == pytest.approx(500.0, rel=1e-5)


def test_design_rejects_an_unreachable_target():
    with pytest.raises(ValueError, match="below the shortest"):
        design_cusum(1.2)


# --- simulation of the real detectors --------------------------------------------------------


@pytest.mark.parametrize(
    ("chart", "params", "shift"),
    [
        ("cusum", CusumParams(k=0.5, h=4.0), 0.0),  # 168
        ("cusum", CusumParams(k=0.5, h=5.0), 1.0),  # 10.4
        ("cusum", CusumParams(k=0.5, h=4.0, sides=1), 0.5),  # 26.7
        ("ewma", EwmaParams(lam=0.1, L=2.814), 1.0),  # 10.3
    ],
    ids=["cusum-h4-in-control", "cusum-h5-shift-1", "cusum-one-sided-shift-0.5", "ewma-shift-1"],
)
def test_simulated_detectors_agree_with_the_numerical_arl(chart, params, shift):
    if chart == "cusum":
        arl = cusum_arl(params.k, params.h, shift, params.sides)
    else:
        arl = ewma_arl(params.lam, params.L, shift)
    est = simulate_arl(chart, params, shift, runs=4000, seed=5)
    assert est.censored == 0
    assert abs(est.mean - arl) < 4.0 * est.se


def test_exact_ewma_limits_detect_a_shift_from_the_start_sooner():
    # Tighter early limits act as a head start: same data, every run signals no later.
    asymptotic = simulate_arl("ewma", EwmaParams(lam=0.1, L=2.814), 1.0, runs=4000, seed=3)
    exact = simulate_arl(
        "ewma", EwmaParams(lam=0.1, L=2.814, limits="exact"), 1.0, runs=4000, seed=3
    )
    assert exact.mean < asymptotic.mean - 4.0 * asymptotic.se
    assert exact.mean < ewma_arl(0.1, 2.814, 1.0) - 4.0 * exact.se
    assert ewma_arl(0.1, 2.814, 1.0, "exact", runs=4000, seed=3) == exact.mean


def test_simulation_censors_runs_beyond_its_memory_bound():
    params = CusumParams(h=5.0, sides=1)  # a downward shift never reaches an upper-only chart
    est = simulate_arl("cusum", params, -1.0, runs=10, max_elements=10_000)
    assert (est.censored, est.mean) == (10, 512.0)


def test_simulation_checks_the_chart_matches_its_parameters():
    with pytest.raises(ValueError, match="does not take"):
        simulate_arl("ewma", CusumParams())


# --- one-sided CUSUM in the detector ---------------------------------------------------------


def test_one_sided_cusum_signals_only_upward_shifts():
    rng = np.random.default_rng(4)
    noise = rng.standard_normal(60)
    down = np.concatenate([noise[:30], noise[30:] - 3.0])
    up = np.concatenate([noise[:30], noise[30:] + 3.0])
    one = CusumParams(sides=1)
    assert cusum(down, CusumParams()).signal.min() == -1  # the two-sided chart sees it...
    r = cusum(down, one)
    assert not r.signal.any() and not r.lower.any()  # ...the upper-only chart does not
    first = int(np.flatnonzero(cusum(up, one).signal)[0])
    assert cusum(up, one).signal[first] == 1 and 30 <= first <= 34
    assert one.to_dict() == {"k": 0.5, "h": 5.0, "sides": 1}


def test_cusum_sides_is_validated():
    for sides in (0, 3):
        with pytest.raises(ValueError, match="sides"):
            CusumParams(sides=sides)


# --- CLI -------------------------------------------------------------------------------------


def detector(args: str) -> int:
    return main(["detector", *args.split()])


def rows(out: str) -> dict[float, float]:
    """The `shift ARL` rows of `aaco detector arl` output."""
    return {float(s): float(a) for s, a in re.findall(r"^\s*(-?\d+\.\d+)\s+(\d+\.\d+)", out, re.M)}


def number_after(label: str, out: str) -> float:
    return float(re.search(re.escape(label) + r"\s*(\d+\.\d+)", out)[1])


def test_cli_arl_prints_the_cusum_table(capsys):
    assert detector("arl --chart cusum --k 0.5 --h 5 --shift 0") == 0
    assert rows(capsys.readouterr().out) == {0.0: published("465")}
    assert detector("arl --chart cusum --sides 1 --h 4") == 0  # default shifts 0 and 1
    out = capsys.readouterr().out
    assert "1-sided" in out
    # At shift 1 the lower side of the two-sided chart almost never fires: same 8.38.
    assert rows(out) == {0.0: published("336"), 1.0: published("8.38")}


def test_cli_arl_prints_several_ewma_shifts(capsys):
    ewma = "arl --chart ewma --lambda 0.1 --L 2.814"
    assert detector(f"{ewma} --shift 0 1 --shift 2") == 0
    out = capsys.readouterr().out
    assert rows(out) == {0.0: published("500"), 1.0: published("10.3"), 2.0: published("4.4")}
    assert detector(f"{ewma} --limits exact --runs 500 --shift 1") == 0
    out = capsys.readouterr().out
    assert "exact limits" in out and "+-" in out and rows(out)[1.0] < 10.3


def test_cli_design_prints_the_limit_and_its_arls(capsys):
    assert detector("design --chart ewma --lambda 0.1 --target-arl 500") == 0
    out = capsys.readouterr().out
    assert number_after("L =", out) == pytest.approx(2.814, abs=0.005)
    assert number_after("in-control ARL", out) == pytest.approx(500.0)
    assert number_after("ARL at shift 1", out) == published("10.3")
    assert detector("design --chart cusum --target-arl 465") == 0
    assert number_after("h =", capsys.readouterr().out) == pytest.approx(5.0, abs=0.05)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("arl --chart ewma --k 0.5 --L 3", "--k does not apply to --chart ewma"),
        ("arl --chart cusum --lambda 0.2 --h 5", "--lambda does not apply to --chart cusum"),
        ("arl --chart cusum --k 0.5", "--chart cusum needs --h"),
        ("arl --chart cusum --h -1", "h must be positive"),
        ("design --chart ewma --sides 1 --target-arl 500", "--sides does not apply"),
        ("design --chart cusum --target-arl 1", "below the shortest"),
    ],
)
def test_cli_bad_combinations_are_one_line_errors_with_the_fix(args, message, capsys):
    assert detector(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Fix:" in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        "arl --chart cusum --h 5 --sides 3",
        "design --chart ewma --h 5 --target-arl 500",  # an error, not a prefix of --help
    ],
)
def test_cli_invalid_options_are_argparse_errors(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        detector(args)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err

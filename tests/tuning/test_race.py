"""A candidate raced side by side against the baseline: faster only with the interval on the
faster side, the threshold met and a second measuring process agreeing; real races both ways."""

from __future__ import annotations

import pytest

from aaco_pipelines.execution.runner import BenchmarkRequest
from aaco_pipelines.governance.gate.paired import PairedComparison
from aaco_pipelines.graph.inputs import load_model, resolve_input_specs
from aaco_pipelines.tuning.race import (
    FASTER,
    NO_CHANGE,
    SLOWER,
    TOO_SMALL,
    UNCONFIRMED,
    judged,
    race,
)
from tests import models


def _paired(effect, low, high, processes, threshold=3.0) -> PairedComparison:
    return PairedComparison(
        baseline_session="baseline", baseline_sha256="a", current_sha256="b", rounds=20,
        block_iterations=10, order="AB BA", processes=[{"rounds": 10, "effect_pct": p} for p in processes],
        latency_p50={"effect_pct": effect, "ci_low": low, "ci_high": high},
        throughput={}, threshold_pct=threshold, p_regression=0.0, decision="", severity="none",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("effect", "low", "high", "processes", "verdict"),
    [
        (+8.0, +5.0, +11.0, [8.0], SLOWER),
        (-1.0, -4.0, +2.0, [-1.0], NO_CHANGE),  # the interval holds "no change"
        (-2.0, -2.8, -1.2, [-2.0, -2.0], TOO_SMALL),  # real, but under the 3 % threshold
        (-9.0, -12.0, -6.0, [-9.0], UNCONFIRMED),  # one process alone
        (-9.0, -12.0, -6.0, [-12.0, -0.5], UNCONFIRMED),  # the second did not find it
        (-9.0, -12.0, -6.0, [-10.0, -8.0], FASTER),
    ],
)
def test_a_candidate_is_faster_only_as_the_gate_would_say_it(effect, low, high, processes, verdict):
    raced = judged(_paired(effect, low, high, processes))
    assert raced.verdict == verdict, raced.reason
    assert raced.accepted is (verdict == FASTER)
    assert raced.speedup == pytest.approx(100 / (100 + effect))
    assert raced.ci[0] <= raced.speedup <= raced.ci[1]


@pytest.fixture(scope="module")
def requests_of(tmp_path_factory):
    """Measuring requests (as a session's request.json holds them) of real models."""
    folder = tmp_path_factory.mktemp("race")

    def request(name: str, model) -> dict:
        path = models.save(model, folder / f"{name}.onnx")
        specs = resolve_input_specs(load_model(path), {}, path)
        return BenchmarkRequest("s", name, name, name, str(path), specs).to_json()

    return request


def test_a_real_win_is_found_faster_in_two_processes_and_the_reverse_is_slower(requests_of):
    """A candidate that does a twentieth of the work (the MLP without 40 extra 256-wide layers):
    a win no busy host hides, which the race must accept with a second process agreeing; raced
    the other way, a loss. (A subtler real change, optimization level `disabled` against `all`
    on a transformer block, is ~7 %: on a CI host running two workers its interval spans zero.)"""
    dims = {"hidden": 256, "batch": 64, "features": 256}
    heavy = requests_of("heavy", models.slower_mlp(40, **dims))
    light = requests_of("light", models.tiny_mlp(**dims))
    won = race(heavy, light, threshold_pct=3.0, rounds=10)
    assert won.verdict == FASTER, won.reason
    assert won.ci[0] > 1.0 and len(won.paired.processes) >= 2
    assert all(p["effect_pct"] < -1.5 for p in won.paired.processes)
    lost = race(light, heavy, threshold_pct=3.0, rounds=10)
    assert lost.verdict == SLOWER and lost.speedup < 1.0, lost.reason

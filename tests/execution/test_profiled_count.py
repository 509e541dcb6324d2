"""The profiled pass's size: the sidecar's count at least, more for a noisy measured pass, within
a cap; an explicit count exactly (execution/profiled_count.py)."""

from __future__ import annotations

import time

import numpy as np

from aaco_pipelines.execution.measuring_process import timed_pass
from aaco_pipelines.execution.profiled_count import (
    MAX_ITERATIONS,
    MAX_SECONDS,
    iterations_for,
    profiled_count,
    robust_cv,
)


def _latencies(cv: float, n: int = 200, seed: int = 0) -> np.ndarray:
    return 770_000 * (1 + cv * np.random.default_rng(seed).standard_normal(n))


def test_a_quiet_measured_pass_keeps_the_sidecars_count():
    count = profiled_count(10, _latencies(0.02))
    assert (count.minimum, count.target, count.max_seconds) == (10, 10, MAX_SECONDS)
    assert count.noise < 0.03 and "at least 10" in count.rule


def test_a_noisy_measured_pass_profiles_more_iterations_up_to_the_cap():
    counts = [profiled_count(10, _latencies(cv)).target for cv in (0.02, 0.2, 0.3, 0.5, 2.0)]
    assert counts[0] == 10 < counts[1] < counts[2] < counts[3] <= counts[4] == MAX_ITERATIONS
    assert counts[2] == iterations_for(profiled_count(10, _latencies(0.3)).noise)
    assert 35 <= counts[2] <= 60  # a shared host's CV of 0.3: about 47
    assert all(profiled_count(10, _latencies(cv)).minimum == 10 for cv in (0.02, 2.0))


def test_one_preempted_iteration_does_not_make_a_pass_look_noisy():
    steady = _latencies(0.02)
    preempted = steady.copy()
    preempted[50] *= 41
    assert robust_cv(preempted) < 1.1 * robust_cv(steady)
    assert profiled_count(10, preempted).target == 10
    assert np.std(preempted) / np.mean(preempted) > 0.5  # what the plain CV would have said


def test_an_explicit_count_runs_exactly_and_no_measured_pass_runs_the_minimum():
    exact = profiled_count(1, _latencies(2.0), exact=True)
    assert (exact.minimum, exact.target, exact.max_seconds) == (1, 1, None)
    assert profiled_count(10, None).target == 10
    assert profiled_count(10, [700_000, 800_000]).target == 10  # too few to judge


class _Sleeper:
    """A session whose every run takes `seconds`."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run(self, outputs, feeds):
        time.sleep(self.seconds)


def test_the_pass_stops_adding_iterations_at_its_time_cap_never_below_the_minimum():
    capped = timed_pass(_Sleeper(0.01), {}, 2, up_to=1000, max_seconds=0.2)
    assert 2 < len(capped["latency_ns"]) <= 21
    assert len(timed_pass(_Sleeper(0.01), {}, 5, up_to=1000, max_seconds=0.0)["latency_ns"]) == 5
    assert len(timed_pass(_Sleeper(0.0), {}, 3, up_to=7, max_seconds=10.0)["latency_ns"]) == 7
    assert len(timed_pass(_Sleeper(0.0), {}, 3)["latency_ns"]) == 3  # the measured pass's way

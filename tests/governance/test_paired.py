"""The gate's side-by-side decision (aaco diff --paired): the baseline's model version and the
current one measured again together, interleaved, decide instead of two sessions measured apart.
A slower version is a regression side by side too; the same version is not, even with the host
made busy by the test while it measures; a paired statistic cancels what hits both alike."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.side_by_side import SideBySide
from aaco_pipelines.governance.gate.decision import gate_verdict
from aaco_pipelines.governance.gate.paired import (
    judge_side_by_side,
    paired_comparison,
    session_request,
    unsure,
)
from aaco_pipelines.report.verdict_text import diff_text
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import busy_loops, copy_home, replay_session

ROUNDS = 12


@pytest.fixture(scope="module")
def swap(mlp_swap_template, tmp_path_factory):
    template, ids = mlp_swap_template
    paths = copy_home(template, tmp_path_factory.mktemp("paired") / "aaco")
    return paths, TraceLake(paths.tracelake), ids


def test_a_slower_version_is_a_regression_side_by_side(swap):
    paths, lake, (t0, _, _, slower) = swap
    stored = gate_verdict(lake, slower, baseline=t0, resamples=200)
    verdict = judge_side_by_side(stored, lake, paths, rounds=ROUNDS)
    paired = verdict.paired
    assert verdict.regression and verdict.severity == "critical"
    # found by the first measuring process, confirmed by a second
    assert paired["decision"] == "regression" and paired["rounds"] == 2 * ROUNDS
    assert [p["rounds"] for p in paired["processes"]] == [ROUNDS, ROUNDS]
    assert all(p["effect_pct"] > 50.0 for p in paired["processes"])
    assert paired["latency_p50"]["ci_low"] > 50.0  # about 5x the tiny MLP
    assert paired["baseline_session"] == t0
    assert paired["baseline_sha256"] != paired["current_sha256"]
    assert paired["order"].split()[:2] == ["AB", "BA"]
    assert verdict.metrics == stored.metrics  # the stored sessions' figures stay beside it
    lines = diff_text(verdict).splitlines()
    assert lines[0].startswith("REGRESSION (critical): mlp p50 +")
    assert "side by side with session" in lines[0]
    (row,) = [line for line in lines if line.split()[:3] == ["side", "by", "side"]]
    assert (
        "interleaved rounds" in row and "in 2 processes" in row and "REGRESSION (critical)" in row
    )
    assert json.loads(json.dumps(verdict.to_dict()))["paired"]["decision"] == "regression"


def test_the_same_version_on_a_busy_host_is_no_regression_side_by_side(swap):
    """The test makes the host busy (a spinning process per core) while the two copies of one
    version are measured side by side: both are slowed alike, the paired effect stays small."""
    paths, lake, (t0, t1, _, _) = swap
    stored = gate_verdict(lake, t1, baseline=t0, resamples=200)
    with busy_loops():
        verdict = judge_side_by_side(stored, lake, paths, rounds=ROUNDS)
    paired = verdict.paired
    assert not verdict.regression and paired["decision"] != "regression", paired
    assert paired["baseline_sha256"] == paired["current_sha256"]
    assert abs(paired["latency_p50"]["effect_pct"]) < 25.0, paired
    assert verdict.recommendation.startswith("no action: side by side")
    assert "the same version" in diff_text(verdict)


def test_a_host_slowdown_that_hits_both_cancels_in_the_paired_effect():
    """Synthetic rounds: the host's speed changes 3x from round to round, hitting A and B
    alike; B is 10 % slower. Pooled, the rounds' spread would swamp 10 %; paired, it is found
    with a tight interval."""
    rng = np.random.default_rng(1)
    host = rng.choice([1.0, 3.0], size=16)
    a = [h * 1e5 * (1 + 0.01 * rng.standard_normal(50)) for h in host]
    b = [h * 1.1e5 * (1 + 0.01 * rng.standard_normal(50)) for h in host]
    paired = paired_comparison(SideBySide(a, b, 50, "", (8, 8)), 3.0, 0.95, 0, "s", "x", "y")
    assert paired.decision == "regression" and paired.severity == "major"
    assert 9.0 < paired.latency_p50["ci_low"] <= paired.latency_p50["ci_high"] < 11.0
    assert paired.throughput["effect_pct"] == pytest.approx(-100 / 11, abs=0.5)
    same = paired_comparison(SideBySide(a, a, 50, "", (8, 8)), 3.0, 0.95, 0, "s", "x", "x")
    assert same.decision == "no_change" and same.latency_p50["effect_pct"] == 0.0


def test_a_baseline_without_its_session_folders_is_one_clear_error(swap, tmp_path):
    paths, lake, (t0, _, _, slower) = swap
    stored = gate_verdict(lake, slower, baseline=t0, resamples=50)
    (folder,) = paths.sessions.glob(f"*/{t0}")
    moved = tmp_path / "moved"
    shutil.move(folder, moved)
    try:
        with pytest.raises(AacoInputError, match="has its session folder any more"):
            judge_side_by_side(stored, lake, paths, rounds=2)
    finally:
        shutil.move(moved, folder)


def test_auto_decides_side_by_side_only_when_the_stored_sessions_cannot(swap):
    """--paired auto: a regression by the stored sessions is checked side by side; a session
    that repeats its baseline exactly (a replayed copy), judged at a threshold above its
    interval (the noise floor's and a 28 us model's iterations': a few % on a busy host, 30 %
    when this host's tails made the baseline suspect), is settled without measuring again."""
    paths, lake, (t0, _, _, slower) = swap
    assert unsure(gate_verdict(lake, slower, baseline=t0, resamples=200)) == (
        "the stored sessions say regression"
    )
    replay_session(lake, t0)
    try:
        first = gate_verdict(lake, "replay", baseline=t0, threshold_pct=15.0, resamples=500)
        p50 = first.metrics["latency_p50_ns"]
        above = max(15.0, p50["ci_high"] - p50["ci_low"])  # twice the interval's half width
        replayed = gate_verdict(lake, "replay", baseline=t0, threshold_pct=above, resamples=500)
        assert not replayed.regression and unsure(replayed) is None, replayed.metrics
    finally:
        lake.delete_sessions(["replay"])


def test_rounds_that_do_not_settle_it_are_measured_again(swap, monkeypatch):
    """Synthetic rounds of a version 10 % slower: a first batch whose host noise spans the
    threshold (the interval reaches from under 0 to over 3 %) is not decided on; the same number
    of rounds is measured again, and all of them decide. A batch that settles it stops there."""
    from aaco_pipelines.governance.gate import paired as paired_module

    paths, lake, (t0, _, _, slower) = swap
    stored = gate_verdict(lake, slower, baseline=t0, resamples=200)
    rng = np.random.default_rng(3)
    calls = []

    def rounds(ratios: list[float]) -> SideBySide:
        """Rounds whose B/A ratio of medians is each of `ratios`."""
        a = [1e5 * (1 + 0.001 * rng.standard_normal(40)) for _ in ratios]
        b = [r * 1e5 * (1 + 0.001 * rng.standard_normal(40)) for r in ratios]
        return SideBySide(a, b, 40, "AB BA")

    noisy = [1.1, 0.9, 1.3, 0.95, 1.2, 0.92, 1.15, 0.98]  # the host swung within rounds
    steady = [1.1 + 0.005 * k for k in (-2, -1, 0, 1, 2, 1, 0, -1)]
    batches = iter([rounds(noisy), rounds(steady), rounds(steady)])

    def measured(request_a, request_b, rounds):
        calls.append(rounds)
        return next(batches)

    monkeypatch.setattr(paired_module, "measure_side_by_side", measured)
    first = paired_comparison(rounds(noisy), 3.0, 0.95, 0, "s", "x", "y")
    assert not paired_module.settled(first), first.latency_p50  # such a batch is unsettled
    verdict = judge_side_by_side(stored, lake, paths, rounds=8)
    assert calls == [8, 8] and verdict.paired["rounds"] == 16
    assert verdict.paired["decision"] == "regression" and verdict.regression
    assert verdict.paired["order"] == "AB BA AB BA"


def test_a_regression_whose_interval_reaches_under_the_threshold_is_not_settled():
    """A regression by the rule (its interval clear of 0, its effect over 3 %) whose interval
    still reaches under the threshold is measured again; a 2x one is not."""
    from aaco_pipelines.governance.gate.paired import settled

    def compared(pairs: list[float]):
        """Two processes' rounds, each pair's two rounds at ratio `pairs[i]`."""
        ratios = np.repeat(pairs, 2)
        a = [np.full(40, 1e5) for _ in ratios]
        b = [np.full(40, r * 1e5) for r in ratios]
        batches = (len(ratios) // 2, len(ratios) // 2)
        return paired_comparison(SideBySide(a, b, 40, "", batches), 3.0, 0.95, 0, "s", "x", "y")

    near = compared([1.01, 1.06, 1.02, 1.07, 1.015, 1.065, 1.03, 1.05])
    assert near.decision == "regression" and near.latency_p50["ci_low"] < 3.0, near.latency_p50
    assert not settled(near)
    assert settled(compared([2.0, 1.95, 2.05, 2.0, 1.98, 2.02, 2.01, 1.99]))
    assert settled(compared([1.0, 1.001, 0.999, 1.0, 1.002, 0.998, 1.0, 1.001]))  # no change


def test_the_block_that_runs_second_is_cancelled_by_the_mirrored_pair():
    """Measured on an unchanged model: a round's second block runs a few % slower (+3.4 % for
    B after A, -4.4 % for A after B). Rounds alternate A B, B A; their ratios swing +-4 % by
    order alone. A pair (A B, B A) cancels it: the unchanged version is no change, tightly."""
    rng = np.random.default_rng(5)
    order = np.tile([1.04, 1 / 1.04], 10)  # B second, then A second
    a = [1e5 * (1 + 0.002 * rng.standard_normal(40)) for _ in order]
    b = [r * 1e5 * (1 + 0.002 * rng.standard_normal(40)) for r in order]
    paired = paired_comparison(SideBySide(a, b, 40, "", (20,)), 3.0, 0.95, 0, "s", "x", "x")
    p50 = paired.latency_p50
    assert paired.decision == "no_change" and -0.5 < p50["ci_low"] <= p50["ci_high"] < 0.5, p50


def test_a_regression_one_process_alone_finds_is_not_decided_on():
    """Two sessions in one process can differ by a few % for reasons of their own (+-1.8 % from
    process to process for one unchanged model on a quiet host). A first process finding +6 %
    with a tight interval is not a regression until a second one finds it too: one that finds
    +0.5 % leaves it unconfirmed, and the verdict says to measure again."""
    from aaco_pipelines.governance.gate.paired import settled

    def rounds(ratio: float, count: int = 8) -> SideBySide:
        a = [np.full(40, 1e5) for _ in range(count)]
        b = [np.full(40, ratio * 1e5 * (1 + 0.001 * k)) for k in range(count)]
        return SideBySide(a, b, 40, "")

    alone = paired_comparison(rounds(1.06), 3.0, 0.95, 0, "s", "x", "y")
    assert alone.decision == "uncertain" and alone.latency_p50["ci_low"] > 5.0
    assert not settled(alone)  # a second process is asked for
    both = rounds(1.06).extended(rounds(1.06))
    assert paired_comparison(both, 3.0, 0.95, 0, "s", "x", "y").decision == "regression"
    differ = paired_comparison(rounds(1.06).extended(rounds(1.005)), 3.0, 0.95, 0, "s", "x", "y")
    assert differ.decision == "uncertain"
    assert [round(p["effect_pct"], 1) for p in differ.processes] == [6.4, 0.9]


# A parent that measures two versions side by side for minutes, then is killed outright.
PARENT = """
import json, sys
from aaco_pipelines.execution.side_by_side import measure_side_by_side
a, b = (json.load(open(path)) for path in sys.argv[1:3])
measure_side_by_side(a, b, rounds=100_000)
"""


def test_the_side_by_side_process_dies_with_its_parent_and_leaves_no_folder(swap, tmp_path):
    """kill -9 of `aaco diff --paired` (or bisect) mid-measurement: its measuring process and
    temporary folder go with it, not an orphan at 70-195 % CPU for ever."""
    paths, _, (t0, _, _, slower) = swap
    requests = []
    for side, session in (("a", t0), ("b", slower)):
        requests.append(tmp_path / f"{side}.json")
        requests[-1].write_text(json.dumps(session_request(paths, session)))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *map(str, requests)],
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.monotonic() + 60
        while not (children := psutil.Process(parent.pid).children()):
            assert time.monotonic() < deadline and parent.poll() is None, "never started"
            time.sleep(0.1)
        (child,) = children
        time.sleep(2)  # measuring now
        assert list(scratch.glob("aaco-side-by-side-*"))
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        gone = time.monotonic() + 10
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < gone, "the side-by-side process outlived its parent"
            time.sleep(0.1)
        assert not list(scratch.glob("aaco-side-by-side-*"))  # removed as it died
    finally:
        parent.kill()
        for process in psutil.Process().children(recursive=True):
            process.kill()

"""Bisection: the search on its own (a comparison given by hand), then for real: eight stored
versions of a model, the sixth made slower, found side by side in at most four measurements,
stored and attached to the regression's alert."""

from __future__ import annotations

import json

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.alerts.lifecycle import alert_history, list_alerts
from aaco_pipelines.governance.gate.bisection import Comparison, bisect_versions, midpoint_pct
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.bisect import bisect_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import STEADY_SIDECAR, add_model, run_bisect_job

VERSIONS = [f"v{i}" for i in range(8)]


def _compare_with(slow_from: int, width: float = 2.0, calls=None):
    """A side-by-side comparison as if versions from `slow_from` on took 2x the time."""

    def compare(a: str, b: str, half: float | None) -> Comparison:
        if calls is not None:
            calls.append((a, b, half))
        ratio = (2.0 if int(b[1:]) >= slow_from else 1.0) / (
            2.0 if int(a[1:]) >= slow_from else 1.0
        )
        effect = (ratio - 1.0) * 100.0
        return Comparison(effect, effect - width, effect + width, 10,
                          "regression" if effect >= 3 else "no_change")  # fmt: skip

    return compare


@pytest.mark.parametrize("slow_from", range(1, 8))
def test_the_first_slower_version_is_found_in_log2_steps(slow_from):
    calls = []
    found = bisect_versions(VERSIONS, _compare_with(slow_from, calls=calls))
    assert (found.status, found.first_bad, found.last_good) == (
        "pinned", f"v{slow_from}", f"v{slow_from - 1}"
    )  # fmt: skip
    assert len(found.steps) <= 3 and len(calls) <= 4  # log2(7) midpoints and the first
    assert calls[0] == ("v0", "v7", None)  # the whole change first, then its midpoint
    assert {half for _, _, half in calls[1:]} <= {midpoint_pct(100.0)}
    assert all(step.against != step.version for step in found.steps)


def test_nothing_to_find_and_an_unclear_step_are_said():
    unchanged = bisect_versions(
        VERSIONS, lambda a, b, half: Comparison(0.5, -1, 2, 10, "no_change")
    )
    assert unchanged.status == "no_change" and unchanged.steps == []
    # a midpoint measured across the halfway mark: the search goes on by its median, and says so
    assert midpoint_pct(100.0) == pytest.approx(41.42, abs=0.01)
    wide = bisect_versions(VERSIONS, _compare_with(5, width=60.0))
    assert wide.status == "unclear" and wide.first_bad == "v5"


def test_eight_stored_versions_one_slower_found_side_by_side(aaco_paths, capsys):
    paths = aaco_paths
    sessions = []
    for i in range(8):  # a new version each night: v5 adds layers that v6 and v7 keep
        model = models.slower_mlp(200, seed=i) if i >= 5 else models.tiny_mlp(seed=i)
        path = add_model(paths, "mlp", model, STEADY_SIDECAR)
        # judged only where it got slower: a noisy moment at another version would open
        # the alert there (each version is a known change, confirmed at once)
        sessions.append(measure_model(registered_model(path), paths, analyze=i == 5))
    lake = TraceLake(paths.tracelake)
    shas = [s.request["model_sha256"] for s in sessions]
    assert len(set(shas)) == 8
    [alert] = [a for a in list_alerts(lake) if a["metric"] == "latency_p50_ns"]
    assert alert["first_session_id"] == sessions[5].session_id

    assert main(["bisect", "--alert", alert["alert_id"], "--rounds", "6", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["status"], row["first_bad_sha256"], row["last_good_sha256"]) == (
        "pinned", shas[5], shas[4]
    )  # fmt: skip
    assert row["good_session"] == sessions[4].session_id  # the latest before, another version
    assert row["versions"] == 2 and row["steps"] == 0 and row["change_ci_low"] > 100
    [event] = [e for e in alert_history(lake, alert["alert_id"]) if e["event"] == "bisected"]
    assert shas[5][:12] in event["reason"] and event["from_session"] == sessions[5].session_id

    # over the whole history, from the first version to the last: the Dagster job
    config = {"good_session": sessions[0].session_id, "bad_session": sessions[7].session_id,
              "rounds": 6}  # fmt: skip
    found = run_bisect_job(paths, config)
    assert (found["first_bad_sha256"], found["last_good_sha256"]) == (shas[5], shas[4])
    assert found["versions"] == 8 and found["steps"] <= 3
    steps = json.loads(found["result_json"])["steps"]
    assert [s["bad"] for s in steps] == [s["position"] >= 5 for s in steps]
    stored = lake.query("SELECT count(*) AS n FROM bisections").to_pylist()[0]["n"]
    assert stored == 2
    with pytest.raises(AacoInputError, match="same model version"):
        bisect_model(lake, paths, sessions[5].session_id, sessions[5].session_id)
    with pytest.raises(AacoInputError, match="before the bad one"):
        bisect_model(lake, paths, sessions[7].session_id, sessions[0].session_id)

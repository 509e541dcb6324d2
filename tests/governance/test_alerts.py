"""Alerts: one record per confirmed change, with a lifecycle. The state machine on its own (what
each session and each person does to an alert), then real measured sessions of the tiny MLP: a
slower version opens one alert, further slow sessions update it, acknowledging silences it, the
fast version measured back closes it, and marking one invalid takes its sessions out of the
metric's baseline."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.alerts import lifecycle as alerts
from aaco_pipelines.governance.alerts.lifecycle import (
    INVALID_WINDOW,
    Observation,
    _apply,
    alert_history,
    list_alerts,
    set_state,
    sync_alerts,
)
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.journal import LakeJournal
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SLOWER_LAYERS, STEADY_SIDECAR, add_model

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
REFERENCE = 100_000.0  # a p50 of 0.1 ms before the change


def _session(n: int) -> dict:
    return {"session_id": f"s{n}", "model_slug": "mlp", "target": "cpu",
            "started_at": T0 + dt.timedelta(days=n)}  # fmt: skip


def _p50(value: float, regression: bool) -> Observation:
    effect = (value - REFERENCE) / REFERENCE * 100
    return Observation("latency_p50_ns", "regression", regression, value, REFERENCE, effect,
                       f"latency_p50_ns at {value:g}", {"verdict": "regression"})  # fmt: skip


def _night(state: dict, n: int, value: float, regression: bool):
    """One session's observation applied; the events (the alerts kept in `state`)."""
    changed, events = _apply(
        state, _session(n), [_p50(value, regression)], _session(n)["started_at"]
    )
    state.update(changed)
    return [(e["event"], e["state"], e["notify"]) for e in events]


def test_one_alert_per_change_from_open_to_fixed_and_reopened():
    state: dict = {}
    assert _night(state, 1, 150_000, True) == [("opened", "new", True)]
    assert _night(state, 2, 151_000, True) == [("updated", "new", True)]  # the same alert
    assert _night(state, 2, 151_000, True) == []  # the same session again: nothing
    assert _night(state, 1, 150_000, True) == []  # an older one: nothing
    [alert] = state.values()
    assert alert["sessions"] == 2 and alert["first_session_id"] == "s1"
    alert["state"] = "acknowledged"  # as set_state leaves it
    assert _night(state, 3, 152_000, True) == [("updated", "acknowledged", False)]
    # slow but not judged a regression (drift awaits confirmation): the change persists
    assert _night(state, 4, 149_000, False) == [("updated", "acknowledged", False)]
    assert alert_state(state)["clear_sessions"] == 0
    assert _night(state, 5, 102_000, False) == []  # back within 3 %: one session is not enough
    assert _night(state, 6, 101_000, False) == [("fixed", "fixed", True)]
    assert _night(state, 7, 99_000, False) == []  # a fixed alert stays fixed
    assert _night(state, 8, 160_000, True) == [("reopened", "reopened", True)]
    assert alert_state(state)["reference"] == REFERENCE and alert_state(state)["sessions"] == 5


def test_an_alert_marked_invalid_is_silent_for_its_window_then_reopens():
    state: dict = {}
    _night(state, 1, 150_000, True)
    alert = alert_state(state)
    alert["state"], alert["invalid_until"] = "invalid", _session(1)["started_at"] + INVALID_WINDOW
    assert _night(state, 2, 150_000, True) == [("updated", "invalid", False)]
    later = 1 + INVALID_WINDOW.days + 1
    assert _night(state, later, 150_000, True) == [("reopened", "reopened", True)]


def alert_state(state: dict) -> dict:
    [alert] = state.values()
    return alert


# --- against real sessions ---------------------------------------------------------------


def _measure(paths, model, analyze: bool = True) -> str:
    path = add_model(paths, "mlp", model, STEADY_SIDECAR)
    return measure_model(registered_model(path), paths, analyze=analyze).session_id


def test_a_slower_version_opens_one_alert_people_handle_and_its_noise_leaves_the_baseline(
    aaco_paths, capsys
):
    """Measured for real; how the alert lives on over nights, through Dagster, is
    tests/dagster/test_alerts_dagster.py."""
    paths = aaco_paths
    history = [_measure(paths, models.tiny_mlp(), analyze=False) for _ in range(3)]
    lake = TraceLake(paths.tracelake)
    assert list_alerts(lake) == []
    slow = _measure(paths, models.slower_mlp(SLOWER_LAYERS))  # a new version: known at once
    [alert] = [a for a in list_alerts(lake) if a["metric"] == "latency_p50_ns"]
    assert (alert["kind"], alert["state"], alert["first_session_id"]) == ("regression", "new", slow)
    assert alert["reference"] == pytest.approx(_p50s(lake, history), rel=0.2)
    assert "model_version" in alert["evidence_json"]  # the gate's suspected cause
    opened = alert_history(lake, alert["alert_id"])
    assert [(e["event"], e["notify"], e["from_session"]) for e in opened] == [
        ("opened", True, slow)
    ]
    assert sync_alerts(lake, [slow, *history]) == []  # synced again: nothing new

    # people: the CLI names it by a prefix, says who and why
    assert (
        main(["alert", "ack", alert["alert_id"][:6], "--reason", "bisecting", "--by", "ana"]) == 0
    )
    assert "acknowledged" in capsys.readouterr().out
    # one change, one acknowledgement: the slowdown's alerts on other metrics went with it
    same_change = [a for a in list_alerts(lake) if a["first_session_id"] == slow]
    assert len(same_change) > 1 and {a["state"] for a in same_change} == {"acknowledged"}
    others = [a for a in same_change if a["alert_id"] != alert["alert_id"]]
    reasons = {e["reason"] for a in others for e in alert_history(lake, a["alert_id"])
               if e["event"] == "acknowledged"}  # fmt: skip
    assert reasons == {f"bisecting (with {alert['alert_id']})"}
    acked = [e for e in alert_history(lake, alert["alert_id"]) if e["event"] == "acknowledged"]
    assert [e["reason"] for e in acked] == ["bisecting"]  # the alert named: the reason as given
    with pytest.raises(AacoInputError, match="is acknowledged: it cannot become acknowledged"):
        set_state(lake, alert["alert_id"], "acknowledged", "again")
    with pytest.raises(AacoInputError, match="no alert 'zz'"):
        set_state(lake, "zz", "fixed", "why")
    assert main(["alert", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert any(a["alert_id"] == alert["alert_id"] and a["state"] == "acknowledged" for a in listed)

    # noise after all: its session leaves the metric's baseline, not the others'
    # (a reason that would clear the terminal and forge another event's line if printed raw)
    forged = "host patched\x1b[2J\n  2026-01-01 00:00 fixed        by root: forged"
    assert main(["alert", "invalid", alert["alert_id"], "--reason", forged, "--only"]) == 0
    nxt = _measure(paths, models.tiny_mlp())
    for metric, left_out in (("latency_p50_ns", True), ("latency_p99_ns", False)):
        row = lake.query(
            "SELECT series_json FROM drift_verdicts WHERE session_id = ? AND metric = ?",
            [nxt, metric],
        ).to_pylist()[0]
        series = json.loads(row["series_json"])
        assert (series["values"][series["session_ids"].index(slow)] is None) == left_out, metric

    # the journal keeps every alert and event: a restore brings people's word back
    state = LakeJournal(paths.tracelake).state()
    assert {r["alert_id"]: r["state"] for r in state.alert_rows()}[alert["alert_id"]] == "invalid"
    assert [e["event"] for e in state.alert_events if e["alert_id"] == alert["alert_id"]] == [
        e["event"] for e in alert_history(lake, alert["alert_id"])
    ]
    assert main(["alert", "show", alert["alert_id"]]) == 0
    shown = capsys.readouterr().out
    assert "acknowledged by ana: bisecting" in shown and "invalid" in shown
    assert "host patched\\x1b[2J\\n  2026-01-01" in shown and "\x1b" not in shown
    assert not any(line.startswith("  2026-01-01") for line in shown.splitlines())


def _p50s(lake, ids):
    rows = lake.query(
        "SELECT latency_p50_ns FROM session_records WHERE list_contains(?, session_id)", [ids]
    )["latency_p50_ns"].to_pylist()
    return sorted(rows)[len(rows) // 2]


def test_alert_ids_are_stable_per_key():
    assert alerts.alert_id("mlp", "cpu", "latency_p50_ns", "regression") == alerts.alert_id(
        "mlp", "cpu", "latency_p50_ns", "regression"
    )
    assert alerts.alert_id("mlp", "cpu", "latency_p50_ns", "regression") != alerts.alert_id(
        "mlp", "gpu0", "latency_p50_ns", "regression"
    )


def test_a_failure_updating_alerts_keeps_the_session_and_says_so(aaco_paths, monkeypatch):
    """The session is stored and complete before its alerts are synced: a bug there must not
    quarantine the measurement (it once did, to every generation session)."""
    from aaco_pipelines.stages import judge_drift

    def broken(lake, session_ids):
        raise RuntimeError("alerts table is on fire")

    monkeypatch.setattr(judge_drift, "sync_alerts", broken)
    path = add_model(aaco_paths, "mlp", models.tiny_mlp(), STEADY_SIDECAR)
    said: list[str] = []
    bundle = measure_model(
        registered_model(path), aaco_paths, on_progress=said.append, analyze=True
    )
    lake = TraceLake(aaco_paths.tracelake)
    assert lake.query("SELECT session_id FROM sessions").to_pylist() == [
        {"session_id": bundle.session_id}
    ]
    assert (
        "warning: the session is stored, its alerts were not updated (RuntimeError: alerts "
        "table is on fire)"
    ) in said

"""Objectives (SLOs): written in the sidecar or the registry's file, recorded with each run, and
judged on every session by where the figure's interval lies against the limit. Real measured
sessions of the tiny MLP; the figures are checked against numpy over the stored iterations."""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import pytest
import yaml

from aaco_pipelines.cli import main
from aaco_pipelines.cli.measuring import run_summary
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.alerts.objectives import judge_objectives
from aaco_pipelines.registry.objectives import REGISTRY_OBJECTIVES_FILE, registry_objectives
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import load_sidecar, parse_sidecar
from aaco_pipelines.report.content import render_json
from aaco_pipelines.report.markdown_report import render_markdown
from aaco_pipelines.stages.judge_drift import judge_drift
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import FAST_SIDECAR, add_model, home_paths

OBJECTIVES = {
    "latency_p50_ms": 1000.0,  # a tiny MLP takes microseconds: met
    "latency_mean_ms": 1e-6,  # a nanosecond: breached
    "latency_p99_ms": 1000.0,  # far above, but 40 samples cannot bound a p99: uncertain
    "throughput_per_s_min": 1.0,  # met
    "peak_memory_mb": 1.0,  # the worker holds an interpreter and a runtime: breached
    "ttft_p90_ms": 100.0,  # a forward session has no requests
}


def test_sidecar_objectives_are_checked_in_full(tmp_path):
    path = tmp_path / "m.yaml"
    parsed = parse_sidecar(
        {"objectives": {"latency_p99_ms": 8, "per_target": {"gpu0": {"latency_p99_ms": 4}}}}, path
    )
    assert parsed.objectives.for_target("cpu") == {"latency_p99_ms": 8.0}
    assert parsed.objectives.for_target("gpu0") == {"latency_p99_ms": 4.0}
    with pytest.raises(AacoInputError, match="unknown objectives.*latency_p98_ms") as error:
        parse_sidecar({"objectives": {"latency_p98_ms": 8}}, path)
    assert str(path) in str(error.value) and "latency_p99_ms" in str(error.value)  # the fix
    # a 400-digit limit would overflow a float, a 5e-324 one divide to Infinity in a webhook
    for bad in (-1, 0, float("nan"), True, "8", 10**400, 5e-324, float("inf")):
        with pytest.raises(AacoInputError, match="must be a number from 1e-06 to 1e"):
            parse_sidecar({"objectives": {"latency_p99_ms": bad}}, path)
    with pytest.raises(AacoInputError, match="per_target"):
        parse_sidecar({"objectives": {"per_target": [1]}}, path)


def _paths(tmp_path):
    paths = home_paths(tmp_path)
    paths.registry.mkdir(parents=True)
    return paths


def test_the_registry_file_then_the_sidecar_set_the_limits_each_run_records(tmp_path):
    """default < the registry file's entry for the model < its sidecar; the run's request
    keeps what was resolved, for its target."""
    paths = _paths(tmp_path)
    (paths.registry / REGISTRY_OBJECTIVES_FILE).write_text(
        yaml.safe_dump(
            {
                "default": {"latency_p50_ms": 100, "peak_memory_mb": 1e6},
                "models": {"mlp": {"latency_p50_ms": 50, "latency_p99_ms": 200}},
            }
        )
    )
    sidecar = dataclasses.replace(
        FAST_SIDECAR,
        objectives=parse_sidecar({"objectives": {"latency_p99_ms": 80}}, tmp_path).objectives,
    )
    path = add_model(paths, "mlp", models.tiny_mlp(), sidecar)
    assert load_sidecar(path).objectives.limits == {"latency_p99_ms": 80.0}  # saved, read back
    bundle = measure_model(registered_model(path), paths)
    assert bundle.request["objectives"] == {
        "latency_p50_ms": 50.0, "latency_p99_ms": 80.0, "peak_memory_mb": 1e6
    }  # fmt: skip
    (paths.registry / REGISTRY_OBJECTIVES_FILE).write_text("default: {latency_p42_ms: 1}\n")
    with pytest.raises(AacoInputError, match=REGISTRY_OBJECTIVES_FILE):
        measure_model(registered_model(path), paths)


def test_objectives_are_judged_by_where_the_interval_lies(aaco_paths, tmp_path, capsys):
    paths = aaco_paths
    sidecar = dataclasses.replace(
        FAST_SIDECAR,
        measured_iterations=40,
        objectives=parse_sidecar({"objectives": OBJECTIVES}, tmp_path).objectives,
    )
    path = add_model(paths, "mlp", models.tiny_mlp(), sidecar)
    # the first and the last judged (the spread reads the others' measured iterations)
    bundles = [measure_model(registered_model(path), paths, analyze=i in (0, 3)) for i in range(4)]
    lake = TraceLake(paths.tracelake)
    first, last = (_verdicts(lake, b.session_id) for b in (bundles[0], bundles[-1]))
    assert {k: v["verdict"] for k, v in last.items()} == {
        "latency_p50_ms": "met",
        "latency_mean_ms": "breached",
        "latency_p99_ms": "uncertain",
        "throughput_per_s_min": "met",
        "peak_memory_mb": "breached",
        "ttft_p90_ms": "no_data",
    }
    latencies = lake.query(
        "SELECT latency_ns FROM iterations WHERE session_id = ? AND pass = 'measured'",
        [bundles[-1].session_id],
    )["latency_ns"].to_numpy()
    assert last["latency_p50_ms"]["value"] == pytest.approx(np.percentile(latencies, 50) / 1e6)
    assert last["throughput_per_s_min"]["value"] == pytest.approx(1e9 / latencies.mean())
    peak = bundles[-1].read_json("observed.json")["worker_peak_rss_bytes"]
    assert last["peak_memory_mb"]["value"] == pytest.approx(peak / 2**20)
    p99 = last["latency_p99_ms"]
    assert p99["ci_high"] is None and "too few samples (40)" in p99["basis"]
    for row in last.values():
        if row["value"] is not None and row["ci_high"] is not None:
            assert row["ci_low"] <= row["value"] <= row["ci_high"]
    # one session alone has no session-to-session spread; the fourth is widened by its three
    # predecessors' spread
    assert first["latency_p50_ms"]["spread_pct"] is None
    assert "spread unknown (0 earlier sessions" in first["latency_p50_ms"]["basis"]
    assert last["latency_p50_ms"]["spread_sessions"] == 3
    assert last["latency_p50_ms"]["spread_pct"] > 0
    # the stage's judgement says which breaches count: the asset check fails on them
    judged = judge_drift(lake, bundles[-1])
    quality = lake.query(
        "SELECT verdict FROM measurement_quality WHERE session_id = ?", [bundles[-1].session_id]
    )["verdict"][0].as_py()
    breached = {"latency_mean_ms", "peak_memory_mb"}
    confirmed = {o["objective"] for o in judged.breaches}
    # confirmed even on a suspect measurement: contention cannot move peak memory, nor explain
    # a mean 10^4x over its limit (test_a_breach_on_a_suspect_measurement_...)
    assert confirmed == breached, quality
    # the report says it in both formats
    content = render_json(lake, bundles[-1].session_id)
    assert {o["objective"]: o["verdict"] for o in content["objectives"]} == {
        k: v["verdict"] for k, v in last.items()
    }
    markdown = render_markdown(lake, bundles[-1].session_id)
    section = markdown.split("Objectives", 1)[1]
    assert "latency_mean_ms" in section and "<= 1e-06 ms" in section and "open ms" in section
    # and the terminal: the run's summary counts them, aaco diff lists them
    summary = run_summary(paths.tracelake, bundles[-1].session_id)
    assert "1 met (" not in summary and "2 breached" in summary and "1 uncertain" in summary
    assert main(["diff", "--paired", "never"]) == 0
    printed = capsys.readouterr().out
    assert "objectives:\n  latency_mean_ms <= 1e-06 ms:" in printed
    assert main(["diff", "--paired", "never", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["objectives"]
    assert [o["objective"] for o in listed] == sorted(OBJECTIVES)


def test_a_breach_on_a_suspect_measurement_is_labelled_unless_contention_cannot_explain_it(
    tmp_path,
):
    """On a host 80 % busy (times stretched 10x at most): a p50 about 1.4x over its limit is
    labelled suspect and not confirmed; a mean 10^4x over, and a peak memory over its limit
    (which other processes do not move), are acted on, saying why."""
    paths = _paths(tmp_path)
    path = add_model(paths, "mlp", models.tiny_mlp(), FAST_SIDECAR)
    bundle = measure_model(registered_model(path), paths, analyze=True)
    lake = TraceLake(paths.tracelake)
    [p50] = lake.query(
        "SELECT latency_p50_ns FROM session_records WHERE session_id = ?", [bundle.session_id]
    )["latency_p50_ns"].to_pylist()
    limits = {
        "latency_p50_ms": p50 / 1e6 / 1.4,  # within what contention can explain
        "latency_mean_ms": p50 / 1e6 / 1e4,  # far beyond it
        "peak_memory_mb": 1.0,
    }
    with lake.connect(write=True) as con:  # as the quality check would
        con.execute(
            "UPDATE measurement_quality SET verdict = 'suspect', host_contention = 0.8, "
            "reasons_json = '[\"other processes took 80% of the host''s CPU time meanwhile\"]'"
        )
    rows = judge_objectives(lake, bundle.session_id, limits, peak_memory_bytes=2**30)
    verdicts = {r["objective"]: r for r in rows.to_pylist()}
    assert {k: r["verdict"] for k, r in verdicts.items()} == dict.fromkeys(limits, "breached")
    assert {k: r["suspect"] for k, r in verdicts.items()} == {
        "latency_p50_ms": True,
        "latency_mean_ms": False,
        "peak_memory_mb": False,
    }
    mean = verdicts["latency_mean_ms"]["basis"]
    assert "more than the 10x the measured contention (80% of the host's CPU) can explain" in mean
    assert (
        "other processes do not move this process's peak memory"
        in (verdicts["peak_memory_mb"]["basis"])
    )


def _verdicts(lake, session_id: str) -> dict[str, dict]:
    rows = lake.query("SELECT * FROM objective_verdicts WHERE session_id = ?", [session_id])
    return {r["objective"]: r for r in rows.to_pylist()}


def test_an_alias_bomb_is_refused_in_one_short_line(tmp_path):
    """A 400-byte registry objectives file of anchors of anchors expands to 9^9 values: it is
    refused as it is read, and neither it nor a big value is ever quoted whole."""
    paths = _paths(tmp_path)
    bomb = "default: {latency_p99_ms: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]}\nmodels:\n"
    previous = "a"
    for name in "bcdefghi":
        bomb += f"  {name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    (paths.registry / REGISTRY_OBJECTIVES_FILE).write_text(bomb)
    started = time.monotonic()
    with pytest.raises(AacoInputError, match="aliases expand it to more than 100,000") as error:
        registry_objectives(paths.registry, "mlp", "mlp")
    assert time.monotonic() - started < 2 and len(str(error.value)) < 1500  # the fix lists names
    deep = {"latency_p99_ms": [[list(range(1000))] * 1000] * 1000}  # a huge value, shared
    with pytest.raises(AacoInputError, match=r"not \[\[\[") as error:
        parse_sidecar({"objectives": deep}, tmp_path / "m.yaml")
    assert len(str(error.value)) < 400 and str(error.value).count("0,") < 10

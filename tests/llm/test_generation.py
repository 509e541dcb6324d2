"""LLM generation on real runs: the zoo's Llama decoder measured under LoadGen's scenarios.

One session of the zoo decoder (single stream, server, offline, curves) is measured and analysed
once for the module; the tests check its requests and steps against what generation means
(exact token counts, KV-cache growth and step counts), its figures against independent
computations (numpy over the rows, and LoadGen's own summary), the server's arrivals against the
target rate, and that a slower decoder turns the TPOT verdict to regression.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from scipy import stats

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.llm.decoder_io import detect_decoder_io
from aaco_pipelines.registry.objectives import parse_objectives
from aaco_pipelines.registry.scan import scan_registry
from aaco_pipelines.registry.sidecar import ModelSidecar, load_sidecar
from aaco_pipelines.registry.workload import Curves, GenerationWorkload, ServiceLevel
from aaco_pipelines.registry.zoo import llama_decoder
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.queries import generation_quality
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import (
    REPO,
    as_one_kernel_events_table,
    assert_plot_texts_inside,
    stamp_schema_version,
)

REAL_DECODER = REPO / "tests" / "data" / "real_models" / "llama_kv_dynamo.onnx"
OUTPUT_TOKENS = 8
PROMPT_TOKENS = 16
SERVER_QPS = 40.0
WORKLOAD = GenerationWorkload(
    prompt_tokens=PROMPT_TOKENS,
    output_tokens=OUTPUT_TOKENS,
    scenarios=("single_stream", "server", "offline"),
    requests=48,
    min_duration_s=0.5,
    batch_size=4,
    target_qps=SERVER_QPS,
    slo=ServiceLevel(ttft_ms=500.0, tpot_ms=100.0),
    curves=Curves(batch_sizes=(1, 2, 4), prompt_lengths=(8, 32), repeats=2),
)
# Objectives on the headline scenario (single_stream): far above what it takes, or below.
OBJECTIVES = {
    "ttft_p90_ms": 1e4, "tpot_p50_ms": 1e-6, "itl_p99_ms": 1e4, "e2e_p50_ms": 1e4,
    "latency_p50_ms": 1e4, "output_tokens_per_s_min": 1e9, "goodput_per_s_min": 1e-3,
    "throughput_per_s_min": 1.0,
}  # fmt: skip
SIDECAR = ModelSidecar(
    warmup_iterations=1,
    profiled_iterations=2,
    generation=WORKLOAD,
    objectives=parse_objectives(OBJECTIVES, REPO),
)
# Just enough for a drift history: one short scenario, no curves.
QUICK = ModelSidecar(
    warmup_iterations=1,
    profiled_iterations=1,
    generation=GenerationWorkload(
        prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS, requests=12, min_duration_s=0.2
    ),
)


def _paths(home: Path) -> AacoPaths:
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    paths.registry.mkdir(parents=True)
    return paths


def _register(paths: AacoPaths, name: str, model: onnx.ModelProto | Path, sidecar: ModelSidecar):
    target = paths.registry / f"{name}.onnx"
    if isinstance(model, Path):
        shutil.copyfile(model, target)
    else:
        onnx.save(model, target)
    sidecar.save(paths.registry / f"{name}.yaml")
    return next(m for m in scan_registry(paths.registry) if m.slug == name)


@pytest.fixture(scope="module")
def analysed_llama_session(tmp_path_factory):
    """One measured and analysed session of the zoo decoder: (lake, session id)."""
    paths = _paths(tmp_path_factory.mktemp("generation"))
    bundle = measure_model(_register(paths, "llama", llama_decoder(), SIDECAR), paths, analyze=True)
    lake = TraceLake(paths.tracelake)
    return lake, bundle.session_id


def _rows(lake, sql: str, sid: str) -> list[dict]:
    return lake.query(sql, {"sid": sid}).to_pylist()


def test_objectives_judge_the_headline_scenarios_requests(analysed_llama_session):
    """Each generation objective's figure is the headline scenario's (single stream), as numpy
    over its requests and the stored generation figures give it."""
    lake, sid = analysed_llama_session
    judged = {r["objective"]: r for r in _rows(
        lake, "SELECT * FROM objective_verdicts WHERE session_id = $sid", sid
    )}  # fmt: skip
    requests = lake.query(
        "SELECT * FROM requests WHERE session_id = $sid AND run = 'single_stream'", {"sid": sid}
    ).to_pydict()
    figures = {
        r["metric"]: r["value"]
        for r in _rows(
            lake,
            "SELECT metric, value FROM generation_metrics WHERE session_id = $sid AND "
            "run = 'single_stream' AND batch_size IS NULL AND source = 'aaco'",
            sid,
        )
    }
    ttft, e2e = np.array(requests["ttft_ns"]), np.array(requests["e2e_ns"])
    tpot = np.array([t for t in requests["tpot_ns"] if t is not None])
    expected = {
        "ttft_p90_ms": np.percentile(ttft, 90) / 1e6,
        "tpot_p50_ms": np.percentile(tpot, 50) / 1e6,
        "e2e_p50_ms": np.percentile(e2e, 50) / 1e6,
        "latency_p50_ms": np.percentile(e2e, 50) / 1e6,  # a generation session's latency
        "itl_p99_ms": figures["itl_p99_ns"] / 1e6,
        "output_tokens_per_s_min": figures["output_tokens_per_s"],
        "goodput_per_s_min": figures["goodput_per_s"],
    }
    for key, value in expected.items():
        assert judged[key]["value"] == pytest.approx(value, rel=1e-9), key
        assert judged[key]["samples"] >= len(ttft)
    assert judged["throughput_per_s_min"]["verdict"] == "no_data"
    assert "output_tokens_per_s_min" in judged["throughput_per_s_min"]["basis"]
    assert (
        judged["tpot_p50_ms"]["verdict"]
        == judged["output_tokens_per_s_min"]["verdict"]
        == ("breached")
    )
    assert judged["ttft_p90_ms"]["verdict"] == judged["e2e_p50_ms"]["verdict"] == "met"


def _metrics(lake, sid: str, source: str = "aaco") -> dict[tuple, float]:
    rows = _rows(
        lake,
        "SELECT run, batch_size, prompt_tokens, metric, value FROM generation_metrics "
        f"WHERE session_id = $sid AND source = '{source}'",
        sid,
    )
    return {(r["run"], r["batch_size"], r["prompt_tokens"], r["metric"]): r["value"] for r in rows}


# --- what generation means: exact counts ------------------------------------------------------


def test_every_batch_has_one_step_per_token_and_its_cache_grows_one_position_a_step(
    analysed_llama_session,
):
    lake, sid = analysed_llama_session
    steps = _rows(lake, "SELECT * FROM generation_steps WHERE session_id = $sid", sid)
    batches: dict[tuple, list[dict]] = {}
    for step in steps:
        batches.setdefault((step["run"], step["batch_id"]), []).append(step)
    assert {"single_stream", "server", "offline", "curve", "warmup", "profiled"} <= {
        run for run, _ in batches
    }
    for rows in batches.values():
        rows.sort(key=lambda r: r["step"])
        prompt = rows[0]["input_tokens"]
        assert [r["step"] for r in rows] == list(range(OUTPUT_TOKENS))
        assert [r["phase"] for r in rows] == ["prefill"] + ["decode"] * (OUTPUT_TOKENS - 1)
        assert [r["input_tokens"] for r in rows[1:]] == [1] * (OUTPUT_TOKENS - 1)
        assert [r["kv_length"] for r in rows] == [prompt + s for s in range(OUTPUT_TOKENS)]
        # 2 layers x (K and V) x 2 KV heads x 16 dims x 4 bytes per position and sequence
        assert [r["kv_bytes"] for r in rows] == [
            r["batch_size"] * r["kv_length"] * 2 * 2 * 2 * 16 * 4 for r in rows
        ]
        assert all(r["start_ns"] < r["end_ns"] for r in rows)
        assert all(a["end_ns"] <= b["start_ns"] for a, b in zip(rows, rows[1:], strict=False))
    assert {k: v for k, v in generation_quality(lake, sid).items() if k not in (
        "batches", "requests")} == {
        "batches_with_wrong_step_count": 0,
        "steps_with_wrong_kv_growth": 0,
        "steps_with_wrong_phase": 0,
        "batches_with_missing_requests": 0,
    }  # fmt: skip


def test_scenarios_batch_as_their_rules_say_and_loadgen_counts_the_same_tokens(
    analysed_llama_session,
):
    lake, sid = analysed_llama_session
    runs = _rows(
        lake,
        "SELECT run, count(*) AS n, max(batch_size) AS biggest, min(output_tokens) AS least, "
        "max(output_tokens) AS most FROM requests WHERE session_id = $sid GROUP BY run",
        sid,
    )
    by_run = {r["run"]: r for r in runs}
    assert by_run["single_stream"]["biggest"] == 1  # one query at a time
    assert by_run["offline"]["biggest"] == WORKLOAD.batch_size  # all at once: full batches
    assert by_run["server"]["biggest"] <= WORKLOAD.batch_size
    for run in WORKLOAD.scenarios:
        assert by_run[run]["n"] >= WORKLOAD.requests  # LoadGen's minimum query count
        assert by_run[run]["least"] == by_run[run]["most"] == OUTPUT_TOKENS
    # LoadGen counts the tokens of our answers itself: its rate agrees with ours.
    ours, loadgen = _metrics(lake, sid), _metrics(lake, sid, "loadgen")
    for run in ("server", "offline"):
        assert loadgen[(run, None, None, "output_tokens_per_s")] == pytest.approx(
            ours[(run, None, None, "output_tokens_per_s")], rel=0.05
        )


def test_ttft_is_queueing_plus_the_measured_prefill_step(analysed_llama_session):
    lake, sid = analysed_llama_session
    rows = _rows(
        lake,
        "SELECT r.*, s.end_ns - s.start_ns AS prefill_step_ns, s.phase "
        "FROM requests r JOIN generation_steps s ON s.session_id = r.session_id "
        "AND s.run = r.run AND s.batch_id = r.batch_id AND s.step = 0 "
        "WHERE r.session_id = $sid AND r.run IN ('single_stream', 'server', 'offline')",
        sid,
    )
    assert rows
    for r in rows:
        assert r["phase"] == "prefill"
        assert r["first_token_ns"] - r["start_ns"] == r["prefill_step_ns"]
        assert r["ttft_ns"] == r["queue_ns"] + r["prefill_step_ns"]
        assert r["tpot_ns"] == pytest.approx(
            (r["end_ns"] - r["first_token_ns"]) / (OUTPUT_TOKENS - 1)
        )
    single = [r for r in rows if r["run"] == "single_stream"]
    ttft = np.median([r["ttft_ns"] for r in single])
    prefill = np.median([r["prefill_step_ns"] for r in single])
    assert ttft - prefill < 0.5 * prefill  # one query at a time: little queueing


# --- figures against independent computations ------------------------------------------------


def test_percentiles_match_numpy_over_the_requests_and_steps(analysed_llama_session):
    lake, sid = analysed_llama_session
    requests = lake.query("SELECT * FROM requests WHERE session_id = $sid", {"sid": sid})
    steps = lake.query("SELECT * FROM generation_steps WHERE session_id = $sid", {"sid": sid})
    figures = _metrics(lake, sid)
    run_of = requests["run"].to_numpy(zero_copy_only=False)
    for run in WORKLOAD.scenarios:
        mine = requests.filter(run_of == run)
        for column, name in (("ttft_ns", "ttft"), ("tpot_ns", "tpot"), ("e2e_ns", "e2e")):
            values = mine[column].to_numpy().astype(float)
            for q in (50, 90, 99):
                expected = np.percentile(values, q)  # linear, as quantile_cont
                assert figures[(run, None, None, f"{name}_p{q}_ns")] == pytest.approx(expected)
        duration = (mine["end_ns"].to_numpy().max() - mine["arrival_ns"].to_numpy().min()) / 1e9
        tokens = mine["output_tokens"].to_numpy().sum()
        assert figures[(run, None, None, "output_tokens_per_s")] == pytest.approx(tokens / duration)
        assert figures[(run, None, None, "requests_per_s")] == pytest.approx(
            mine.num_rows / duration
        )
        # ITL: each decode step gives every sequence of its batch one token.
        itl = []
        step_run = steps["run"].to_numpy(zero_copy_only=False)
        for batch in set(mine["batch_id"].to_pylist()):
            rows = sorted(
                (r for r in steps.filter(step_run == run).to_pylist() if r["batch_id"] == batch),
                key=lambda r: r["step"],
            )
            ends = np.array([r["end_ns"] for r in rows])
            itl += list(np.repeat(np.diff(ends), rows[0]["batch_size"]))
        assert figures[(run, None, None, "itl_p99_ns")] == pytest.approx(np.percentile(itl, 99))


def _loadgen_rank(count: int, q: float) -> int:
    """The rank LoadGen reads a percentile at: of the sorted values, the one at int(count * q)."""
    return int(count * q)


def test_figures_agree_with_loadgens_own_summary(analysed_llama_session):
    """LoadGen and we time the same events from the same scheduled arrivals (its trace), so
    LoadGen's estimator over our requests gives LoadGen's own figure within 5 %: server TTFT
    p50 and p90 below capacity included. A request whose hand-over to LoadGen was preempted on
    a busy host moves an order statistic by one rank at most, so the figure may sit a rank off.
    Our figures interpolate (quantile_cont): between LoadGen's rank and the one below."""
    lake, sid = analysed_llama_session
    ours, loadgen = _metrics(lake, sid), _metrics(lake, sid, "loadgen")
    requests = lake.query(
        "SELECT run, ttft_ns, tpot_ns, e2e_ns FROM requests WHERE session_id = $sid", {"sid": sid}
    )
    run_of = requests["run"].to_numpy(zero_copy_only=False)
    for run, metric in (
        ("server", "ttft_p50_ns"),
        ("server", "ttft_p90_ns"),
        ("server", "tpot_p50_ns"),
        ("single_stream", "ttft_p50_ns"),
        ("single_stream", "tpot_p50_ns"),
        ("single_stream", "e2e_p50_ns"),
    ):
        name, q = metric.split("_")[0], int(metric.split("_p")[1][:2]) / 100
        values = np.sort(requests[f"{name}_ns"].to_numpy()[run_of == run]).astype(float)
        rank = _loadgen_rank(len(values), q)
        theirs, mine = loadgen[(run, None, None, metric)], ours[(run, None, None, metric)]
        near = values[rank - 1 : rank + 2]
        assert np.any(np.abs(near / theirs - 1) <= 0.05), (run, metric, near, theirs)
        assert values[rank - 1] - 1 <= mine <= values[rank] + 1, (run, metric, mine)


def test_server_arrivals_are_poisson_at_the_target_rate(analysed_llama_session):
    lake, sid = analysed_llama_session
    arrivals = np.array(
        [
            r["arrival_ns"]
            for r in _rows(
                lake,
                "SELECT arrival_ns FROM requests WHERE session_id = $sid AND run = 'server' "
                "ORDER BY arrival_ns",
                sid,
            )
        ]
    )
    gaps = np.diff(arrivals) / 1e9
    rate = len(gaps) / gaps.sum()
    # The rate estimate of n Poisson gaps has a relative sd of 1/sqrt(n): within 3.5 of them.
    assert abs(rate / SERVER_QPS - 1.0) < 3.5 / np.sqrt(len(gaps)), rate
    # Exponential gaps at the target rate (LoadGen's server scenario), not a fixed period.
    assert stats.kstest(gaps, "expon", args=(0, 1 / SERVER_QPS)).pvalue > 1e-3
    assert np.std(gaps) / np.mean(gaps) > 0.5
    # Arrivals are LoadGen's schedule, not when the issue callback got the GIL (which bunched
    # them: 34 % of gaps under 50 us above capacity). Of Poisson gaps 0.2 % are at 40/s.
    assert np.mean(gaps < 50e-6) < 0.05, np.sort(gaps)[:5]
    figures = _metrics(lake, sid)
    loadgen = _metrics(lake, sid, "loadgen")
    assert figures[("server", None, None, "arrival_rate_per_s")] == pytest.approx(rate, rel=1e-6)
    assert loadgen[("server", None, None, "arrival_rate_per_s")] == pytest.approx(rate, rel=0.1)


def test_curves_cover_every_point_and_bigger_batches_give_more_tokens_per_second(
    analysed_llama_session,
):
    lake, sid = analysed_llama_session
    curve = {(b, p, m): v for (run, b, p, m), v in _metrics(lake, sid).items() if run == "curve"}
    points = {(b, p) for b, p, _ in curve}
    assert points == {(1, 16), (2, 16), (4, 16), (1, 8), (1, 32)}
    for b, p in points:
        assert curve[(b, p, "requests")] == WORKLOAD.curves.repeats * b
    # The batch really ran four sequences: the KV cache the model returned at each length is
    # four times batch 1's (a batch size that was ignored would give the same cache).
    caches = {
        (r["batch_size"], r["kv_length"]): r["kv_bytes"]
        for r in _rows(
            lake,
            "SELECT DISTINCT batch_size, kv_length, kv_bytes FROM generation_steps "
            "WHERE session_id = $sid AND run = 'curve' AND batch_size IN (1, 4)",
            sid,
        )
    }
    shared = {kv for b, kv in caches if b == 4} & {kv for b, kv in caches if b == 1}
    assert shared and all(caches[(4, kv)] == 4 * caches[(1, kv)] for kv in shared)
    # And it gives more tokens/s: well over 1.5x on a quiet host, 1.48x with the suite's other
    # processes on both cores, 1.03x once with a fresh clone's CI and another suite sharing the
    # two cores, and 0.81x once (the other worker busy during batch 4 only). So the rate is
    # judged at each batch size's fastest decode step, which a neighbour's burst cannot slow:
    # a batch of 4 emits 4 tokens per step, in less than 4 times batch 1's step.
    steps = _rows(
        lake,
        "SELECT batch_size, min(end_ns - start_ns) AS fastest FROM generation_steps "
        "WHERE session_id = $sid AND run = 'curve' AND phase = 'decode' AND batch_size IN (1, 4) "
        "GROUP BY batch_size",
        sid,
    )
    peak = {r["batch_size"]: r["batch_size"] / r["fastest"] for r in steps}
    assert peak[4] > peak[1]
    assert all(curve[(b, PROMPT_TOKENS, "output_tokens_per_s")] > 0 for b in (1, 4))


# --- phases, session row, headline -----------------------------------------------------------


def test_kernel_time_is_attributed_to_onnx_nodes_per_phase(analysed_llama_session):
    lake, sid = analysed_llama_session
    rows = _rows(
        lake,
        "SELECT phase, level, name, share FROM phase_breakdown WHERE session_id = $sid",
        sid,
    )
    for phase in ("prefill", "decode"):
        nodes = [r for r in rows if r["phase"] == phase and r["level"] == "node"]
        assert sum(r["share"] for r in nodes) == pytest.approx(1.0)
        assert any(r["name"].startswith("layer0/attention") for r in nodes)
    # FLOPs are the graph's at prefill shapes: known for the prefill, not claimed for a decode
    flops = {
        r["phase"]: r["flops"]
        for r in _rows(
            lake,
            "SELECT phase, sum(flops) AS flops FROM phase_breakdown WHERE session_id = $sid "
            "AND level = 'node' GROUP BY phase",
            sid,
        )
    }
    assert flops["prefill"] > 0 and flops["decode"] is None
    # the same graph runs in both phases, and each phase's node time fits in its profiled steps
    names = {
        p: {r["name"] for r in rows if r["phase"] == p and r["level"] == "node"}
        for p in ("prefill", "decode")
    }
    assert names["prefill"] == names["decode"]
    for r in _rows(
        lake,
        "SELECT b.phase, sum(b.mean_ns) AS node_ns, any_value(s.step_ns) AS step_ns "
        "FROM phase_breakdown b JOIN (SELECT phase, avg(end_ns - start_ns) AS step_ns "
        "  FROM generation_steps WHERE session_id = $sid AND run = 'profiled' AND iteration >= 0 "
        "  GROUP BY phase) s USING (phase) "
        "WHERE b.session_id = $sid AND b.level = 'op_type' GROUP BY b.phase",
        sid,
    ):
        assert 0 < r["node_ns"] < r["step_ns"], r


def test_the_session_row_is_the_headline_scenario(analysed_llama_session):
    lake, sid = analysed_llama_session
    (row,) = _rows(lake, "SELECT * FROM sessions WHERE session_id = $sid", sid)
    e2e = [
        r["e2e_ns"]
        for r in _rows(
            lake,
            "SELECT e2e_ns FROM requests WHERE session_id = $sid AND run = 'single_stream'",
            sid,
        )
    ]
    assert row["workload"] == "generation" and row["scenario"] == "single_stream"
    assert row["latency_p50_ns"] == round(np.percentile(e2e, 50))
    assert row["measured_iterations"] == len(e2e)
    verdicts = {
        r["metric"]
        for r in _rows(lake, "SELECT metric FROM drift_verdicts WHERE session_id = $sid", sid)
    }
    assert {"ttft_p50_ns", "tpot_p50_ns", "itl_p99_ns", "output_tokens_per_s"} <= verdicts


# --- drift: a slower decoder ----------------------------------------------------------------


def test_a_slower_decoder_turns_the_tpot_verdict_to_regression(tmp_path):
    paths = _paths(tmp_path)
    # The history, analysed (aaco diff splits TTFT by their prefill kernels): one point more
    # than min_history, so one session slowed by a busy host cannot make the scale the whole
    # jump; and a decoder with eight times the layers, several times the TPOT.
    history = [
        measure_model(_register(paths, "llm", llama_decoder(), QUICK), paths, analyze=True)
        for _ in range(4)
    ]
    slower = _register(paths, "llm", llama_decoder(layers=16, intermediate=512), QUICK)
    bundle = measure_model(slower, paths, analyze=True)
    verdicts = {
        r["metric"]: r
        for r in _rows(
            TraceLake(paths.tracelake),
            "SELECT * FROM drift_verdicts WHERE session_id = $sid",
            bundle.session_id,
        )
    }
    assert verdicts["tpot_p50_ns"]["verdict"] == "regression", {
        k: (v["verdict"], v["effect_pct"], v["decided_by"]) for k, v in verdicts.items()
    }
    assert verdicts["tpot_p50_ns"]["effect_pct"] > 100.0
    # the other series move the slower way; whether they reach a verdict depends on how noisy
    # the three-session history was on a loaded host (tokens/s and TTFT carry queueing noise)
    assert verdicts["output_tokens_per_s"]["effect_pct"] < 0.0
    assert verdicts["ttft_p50_ns"]["effect_pct"] > 0.0
    assert "improvement" not in {v["verdict"] for v in verdicts.values()}
    _diff_explains_the_ttft_change(paths, [b.session_id for b in history], bundle.session_id)


def _diff_explains_the_ttft_change(paths: AacoPaths, baseline: list[str], current: str) -> None:
    """aaco diff: the TTFT change is queueing + prefill kernel + host time, and a decoder with
    eight times the layers is slower in its prefill kernels, not in its queue (single stream)."""
    from aaco_pipelines.governance.gate.decision import gate_verdict
    from aaco_pipelines.report.verdict_text import diff_text

    verdict = gate_verdict(TraceLake(paths.tracelake), current, baseline=baseline)
    generation = verdict.generation
    assert generation["scenario"] == "single_stream"
    assert generation["tpot_p50_ns"]["effect_pct"] > 100.0
    explained = generation["ttft_explained"]
    parts = [explained[f"{p}_ms"] for p in ("queueing", "prefill_kernel", "host")]
    assert sum(parts) == pytest.approx(explained["ttft_mean_delta_ms"], rel=1e-6, abs=1e-9)
    assert explained["ttft_mean_delta_ms"] > 0.0
    assert explained["prefill_kernel_ms"] > 0.0
    assert explained["dominant"] != "queueing"
    # Decided on, as the Dagster check gates them: a request-level bootstrap of TTFT and TPOT.
    tpot = verdict.metrics["tpot_p50_ns"]
    assert tpot["decision"] == "regression" and tpot["ci_low"] > 0.0
    assert "ttft_p50_ns" in verdict.metrics and verdict.regression
    assert verdict.evidence["current_requests"] > 0
    text = diff_text(verdict)
    assert "TTFT change" in text and "prefill kernel" in text
    (row,) = [line for line in text.splitlines() if line.split()[:2] == ["TPOT", "p50"]]
    assert "REGRESSION" in row


# --- the convention, as real exporters write it ------------------------------------------------


def test_the_real_exporters_decoder_is_found_and_generated_from(tmp_path):
    model = onnx.load(REAL_DECODER, load_external_data=False)
    io = detect_decoder_io(model, REAL_DECODER)
    assert (io.layers, io.kv_heads, io.head_dim, io.vocab) == (2, 2, 16, 512)
    assert io.has_attention_mask and io.has_position_ids
    paths = _paths(tmp_path)
    bundle = measure_model(_register(paths, "hf_llama", REAL_DECODER, QUICK), paths)
    lake = TraceLake(paths.tracelake)
    quality = generation_quality(lake, bundle.session_id)
    assert quality["requests"] >= 12 and quality["steps_with_wrong_kv_growth"] == 0


def test_a_decoder_without_a_sidecar_is_a_generation_workload_with_the_defaults(tmp_path):
    from aaco_pipelines.llm.decoder_io import generation_plan

    path = tmp_path / "llm.onnx"
    onnx.save(llama_decoder(), path)
    plan = generation_plan(onnx.load(path), load_sidecar(path), path)
    assert plan["workload"] == GenerationWorkload().to_dict()
    assert plan["vocab"] == 512 and plan["decoder"]["layers"] == 2


def test_a_partial_convention_is_refused_naming_the_model(tmp_path):
    model = llama_decoder()
    del model.graph.output[-1]  # present.1.value
    path = tmp_path / "broken.onnx"
    with pytest.raises(AacoInputError, match="decoder convention") as info:
        detect_decoder_io(model, path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"scenarios": ["batch"]}, "generation.scenarios must be"),
        ({"slo": {"ttft_ms": 0}}, "generation.slo.ttft_ms must be a positive number"),
        ({"curves": {"batch_sizes": [0]}}, "generation.curves.batch_sizes must be"),
        ({"output_tokens": 1.5}, "generation.output_tokens must be a positive integer"),
        ({"kv_cache": {"layout": "bshd"}}, "generation.kv_cache.layout must be"),
        ({"prompt": 3}, "unknown keys \\['prompt'\\] under generation"),
    ],
)
def test_a_bad_generation_section_is_one_line_naming_the_sidecar(tmp_path, section, message):
    path = tmp_path / "llm.onnx"
    onnx.save(llama_decoder(), path)
    (tmp_path / "llm.json").write_text(__import__("json").dumps({"generation": section}))
    with pytest.raises(AacoInputError, match=message) as info:
        load_sidecar(path)
    assert "llm.json" in str(info.value) and "\n" not in str(info.value)


def test_the_sidecar_section_round_trips(tmp_path):
    path = tmp_path / "m.onnx"
    SIDECAR.save(tmp_path / "m.yaml")
    assert load_sidecar(path) == SIDECAR
    assert dataclasses.replace(SIDECAR, generation=None).to_dict().get("generation") is None


def test_aaco_run_prints_each_scenarios_ttft_tpot_and_goodput(analysed_llama_session):
    from aaco_pipelines.cli.measuring import run_summary

    lake, sid = analysed_llama_session
    lines = run_summary(lake.path, sid).splitlines()
    assert any(
        line.split()[:2]
        == [
            "requests",
            str(
                _rows(
                    lake,
                    "SELECT measured_iterations AS n FROM sessions WHERE session_id = $sid",
                    sid,
                )[0]["n"]
            ),
        ]
        for line in lines
    )
    for run in WORKLOAD.scenarios:
        (line,) = [line for line in lines if line.split()[0] == run]
        assert (
            "TTFT p50" in line and "TPOT p50" in line and "tokens/s" in line and "goodput" in line
        )


def test_the_report_has_a_generation_section_with_loadgens_figures_and_both_plots(
    analysed_llama_session, monkeypatch
):
    from aaco_pipelines.report import plot_canvas
    from aaco_pipelines.report.content import render_json
    from aaco_pipelines.report.html import render_html

    drawn = []
    render = plot_canvas.to_svg
    monkeypatch.setattr(
        plot_canvas, "to_svg", lambda figure: drawn.append(figure) or render(figure)
    )
    lake, sid = analysed_llama_session
    generation = render_json(lake, sid)["generation"]
    assert generation["headline"] == "single_stream"
    assert [s["scenario"] for s in generation["scenarios"]] == list(WORKLOAD.scenarios)
    server = generation["scenarios"][1]
    assert server["loadgen_tpot_p50_ns"] > 0 and server["tpot_p50_ns"] > 0
    assert {(p["batch_size"], p["prompt_tokens"]) for p in generation["curves"]} == {
        (1, 16), (2, 16), (4, 16), (1, 8), (1, 32)
    }  # fmt: skip
    assert generation["phases"]["prefill"] and generation["phases"]["decode"]
    html = render_html(lake, sid)
    assert 'id="generation"' in html
    assert html.count("data:image/svg+xml;base64,") >= 2 + html.count('id="drift-')
    side_by_side = [figure for figure in drawn if len(figure.axes) == 2]
    assert len(side_by_side) == 2  # the curves and the TTFT/TPOT distributions
    for figure in drawn:
        assert_plot_texts_inside(figure)


def test_a_v8_lake_migrates_its_sessions_as_forward_passes(analysed_llama_session, tmp_path):
    import duckdb

    from aaco_pipelines.tracelake.schema import SCHEMA_VERSION

    lake, sid = analysed_llama_session
    copy = tmp_path / "v8.duckdb"
    shutil.copyfile(lake.path, copy)
    with duckdb.connect(str(copy)) as con:  # back to v8's shape
        as_one_kernel_events_table(con)
        con.execute("DROP VIEW sessions")
        for column in ("workload", "scenario"):
            con.execute(f"ALTER TABLE session_records DROP COLUMN {column}")
        for table in ("requests", "generation_steps", "generation_metrics", "phase_breakdown"):
            con.execute(f"DROP TABLE {table}")
        stamp_schema_version(con, 8)
    old = TraceLake(copy)
    with old.connect(write=True):
        pass  # the next write migrates
    assert old.schema_version() == SCHEMA_VERSION
    (row,) = _rows(old, "SELECT workload, scenario FROM sessions WHERE session_id = $sid", sid)
    assert row == {"workload": "forward", "scenario": None}
    assert _rows(old, "SELECT count(*) AS n FROM requests WHERE session_id = $sid", sid) == [
        {"n": 0}
    ]


def test_every_figure_has_the_unit_its_name_says(analysed_llama_session):
    lake, sid = analysed_llama_session
    units = {
        (r["metric"], r["source"]): r["unit"]
        for r in _rows(
            lake,
            "SELECT DISTINCT metric, source, unit FROM generation_metrics WHERE session_id = $sid",
            sid,
        )
    }
    assert units[("ttft_p50_ns", "aaco")] == units[("ttft_p50_ns", "loadgen")] == "ns"
    assert (
        units[("output_tokens_per_s", "aaco")] == units[("output_tokens_per_s", "loadgen")] == "1/s"
    )
    assert units[("duration_s", "aaco")] == "s"
    assert units[("slo_attainment", "aaco")] == units[("result_valid", "loadgen")] == ""


def _decoder_whose_cache_grows_two_positions_a_step() -> onnx.ModelProto:
    """The zoo decoder with its last cache position repeated in each present.* output and no
    attention mask (which would catch the extra position): it runs, and every figure looks
    plausible, but the cache grows by two positions a step (an exporter bug)."""
    model = llama_decoder()
    graph = model.graph
    for node in list(graph.node):  # the softmax takes the unmasked scores
        if node.name.endswith("/attention/mask"):
            graph.node.remove(node)
        elif node.op_type == "Softmax" and node.input[0].endswith("/attention/mask"):
            node.input[0] = node.input[0].replace("/attention/mask", "/attention/scale")
    graph.initializer.extend(
        onnx.numpy_helper.from_array(np.array([v], np.int64), name)
        for name, v in (("last.start", -1), ("last.end", 2**62), ("last.axis", 2))
    )
    for output in graph.output:
        if not output.name.startswith("present."):
            continue
        producer = next(n for n in graph.node if output.name in n.output)
        grown = f"{output.name}.grown"
        producer.output[list(producer.output).index(output.name)] = grown
        graph.node.extend(
            [
                onnx.helper.make_node(
                    "Slice", [grown, "last.start", "last.end", "last.axis"], [f"{grown}.last"]
                ),
                onnx.helper.make_node("Concat", [grown, f"{grown}.last"], [output.name], axis=2),
            ]
        )
    return model


def test_a_cache_that_grows_wrong_fails_aaco_run_naming_the_rule(tmp_path, capsys, monkeypatch):
    """`aaco run` refuses a generation session that broke a rule of generation, in one line
    naming the model and the rule (exit 2), as the Dagster check generation_complete blocks
    it; the session leaves no rows, and its evidence goes to failed/."""
    from aaco_pipelines.cli import main

    paths = _paths(tmp_path / "home")
    model = _register(
        paths, "stuck_cache", _decoder_whose_cache_grows_two_positions_a_step(), QUICK
    )
    with pytest.raises(AacoInputError, match="did not grow the KV cache") as refused:
        measure_model(model, paths, analyze=True)
    assert "stuck_cache" in str(refused.value)
    lake = TraceLake(paths.tracelake)
    assert lake.query("SELECT count(*) AS n FROM session_records")["n"][0].as_py() == 0
    assert list(paths.failed_sessions.rglob("failure.json"))

    monkeypatch.setenv("AACO_HOME", str(tmp_path / "cli_home"))
    code = main(["run", "--model", str(model.path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert any("stuck_cache" in line and "did not grow the KV cache" in line for line in err)
    assert not any("Traceback" in line for line in err)


def test_on_the_cpu_generation_is_a_plain_onnx_runtime_loop(tmp_path):
    """On the CPU provider the Generator runs the decoder as a plain loop would (session.run,
    numpy past): the same tokens a hand-written loop samples, and no IOBinding, whose per-step
    cost made a small decoder's TPOT 1.7x a plain loop's on this host."""
    import onnxruntime as ort

    from aaco_pipelines.llm.engine import Generator

    model = llama_decoder()
    path = tmp_path / "llama.onnx"
    onnx.save(model, path)
    io = detect_decoder_io(model, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    prompts = np.random.default_rng(3).integers(0, 512, (2, 8))

    class NoBinding:
        def __getattr__(self, name):
            if name == "io_binding":
                raise AssertionError("an IOBinding on the CPU")
            return getattr(session, name)

    generated = Generator(NoBinding(), io).generate(prompts, 6).tokens
    names = [o.name for o in session.get_outputs()]
    past = {
        n: np.zeros((2, io.kv_heads, 0, io.head_dim), np.float32)
        for layer in range(io.layers)
        for n in io.past_names(layer)
    }
    ids, length, expected = prompts.astype(np.int64), 0, []
    for _ in range(6):
        new = ids.shape[1]
        feeds = {"input_ids": ids, **past}
        if io.has_attention_mask:
            feeds["attention_mask"] = np.ones((2, length + new), np.int64)
        if io.has_position_ids:
            feeds["position_ids"] = np.tile(np.arange(length, length + new), (2, 1))
        outputs = dict(zip(names, session.run(None, feeds), strict=True))
        token = outputs["logits"][:, -1, :].argmax(-1)
        expected.append(token)
        past = {
            p: outputs[q]
            for layer in range(io.layers)
            for p, q in zip(io.past_names(layer), io.present_names(layer), strict=True)
        }
        ids, length = token[:, None].astype(np.int64), length + new
    assert generated.tolist() == np.stack(expected, axis=1).tolist()

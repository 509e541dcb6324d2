"""The search on a real export measured at a poor configuration (bert_classic_ts, a torch.onnx
export, at optimization level `disabled`): the runtime's own level is found faster and accepted,
dynamic int8 is rejected by its outputs before any timing, and a spent budget tries nothing."""

from __future__ import annotations

import shutil

import pytest

from aaco_pipelines.execution.runner import BenchmarkRequest
from aaco_pipelines.graph.inputs import load_model, resolve_input_specs
from aaco_pipelines.registry.sidecar import ModelSidecar, load_sidecar
from aaco_pipelines.tuning.candidates import (
    INT8_DYNAMIC,
    graph_candidates,
    runtime_candidates,
)
from aaco_pipelines.tuning.race import FASTER
from aaco_pipelines.tuning.search import NOT_TRIED, REJECTED_INACCURATE, search
from tests.helpers import DATA

BERT = DATA / "real_models" / "bert_classic_ts.onnx"


@pytest.fixture(scope="module")
def poor(tmp_path_factory) -> dict:
    """The export's measuring request at optimization level `disabled`: no fusion at all."""
    folder = tmp_path_factory.mktemp("poor")
    for suffix in (".onnx", ".json"):
        shutil.copy(BERT.with_suffix(suffix), folder / f"bert{suffix}")
    path = folder / "bert.onnx"
    specs = resolve_input_specs(load_model(path), load_sidecar(path).inputs, path)
    request = BenchmarkRequest("s", "bert", "bert", "sha", str(path), specs).to_json()
    return {**request, "graph_optimization_level": "disabled"}


def test_a_known_win_is_accepted_and_an_accuracy_breaker_rejected_before_timing(poor, tmp_path):
    sidecar = ModelSidecar(graph_optimization_level="disabled")
    level_all = next(
        c for c in runtime_candidates(sidecar, cores=2) if c.name.endswith("level all")
    )
    int8 = next(c for c in graph_candidates({"MatMul"}) if c.rewrite == INT8_DYNAMIC)
    lines: list[str] = []
    result = search(poor, [int8, level_all], tmp_path, say=lines.append)  # 20 rounds a process
    by_name = {t.name: t for t in result.tried}
    rejected = by_name[int8.name]
    assert rejected.verdict == REJECTED_INACCURATE and "over its limit" in rejected.reason
    assert rejected.speedup is None and rejected.accuracy["max_rel_error"] > 1e-3  # not timed
    won = by_name[level_all.name]
    assert won.verdict == FASTER and won.ci[0] > 1.0, won.reason
    assert won.accuracy["max_rel_error"] <= 1e-3  # a reordering: within the default limits
    assert (result.verdict, result.best) == ("improved", won)
    assert any(line.startswith("tune: 2/2 graph optimization level all") for line in lines)


def test_a_spent_budget_tries_nothing_and_says_so(poor, tmp_path):
    candidates = runtime_candidates(ModelSidecar(graph_optimization_level="disabled"), cores=2)
    result = search(poor, candidates, tmp_path, budget_s=0.0)
    assert result.verdict == "no_improvement" and result.best is None
    assert {t.verdict for t in result.tried} == {NOT_TRIED}
    assert all(t.reason == "the 0 s budget was spent" for t in result.tried)

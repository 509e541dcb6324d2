"""`aaco tune`'s candidates: each a named change the model does not already have, a rewrite only
where the real exported graph has what it acts on, ordered by what the decided class points at."""

from __future__ import annotations

import onnx
import pytest

from aaco_pipelines.registry.sidecar import ModelSidecar, parse_sidecar
from aaco_pipelines.tuning.candidates import (
    FP16,
    INT8_DYNAMIC,
    RUNTIME,
    TRANSFORMER_FUSIONS,
    graph_candidates,
    runtime_candidates,
    search_order,
)
from tests.helpers import DATA

CORPUS = DATA / "real_models"


def _op_types(name: str) -> set[str]:
    model = onnx.load(CORPUS / f"{name}.onnx", load_external_data=False)
    return {node.op_type for node in model.graph.node}


def test_runtime_candidates_are_the_changes_the_model_does_not_already_have(tmp_path):
    sidecar = ModelSidecar(intra_op_threads=2, disabled_optimizers=("NchwcTransformer",))
    found = {c.name: c for c in runtime_candidates(sidecar, cores=2)}
    assert set(found) == {
        "graph optimization level basic",
        "graph optimization level extended",  # not all (its own), never disabled
        "no disabled optimizers",
        "intra-op threads 1",  # not 2 (its own)
    }
    # each is the model's sidecar with its change, and reads back as a sidecar
    level = parse_sidecar(
        found["graph optimization level basic"].sidecar(sidecar), tmp_path / "m.yaml"
    )
    assert (level.graph_optimization_level, level.intra_op_threads) == ("basic", 2)
    threads = parse_sidecar(found["intra-op threads 1"].sidecar(sidecar), tmp_path / "m.yaml")
    assert threads.intra_op_threads == 1 and threads.disabled_optimizers == ("NchwcTransformer",)
    eight = {c.name for c in runtime_candidates(ModelSidecar(), cores=8)}
    assert {"intra-op threads 1", "intra-op threads 4", "intra-op threads 8"} <= eight


@pytest.mark.parametrize(
    ("model", "rewrites"),
    [
        ("bert_ts", {TRANSFORMER_FUSIONS, INT8_DYNAMIC, FP16}),  # attention, LayerNorm, MatMul
        ("llama_dynamo", {TRANSFORMER_FUSIONS, INT8_DYNAMIC, FP16}),  # RMSNorm's ReduceMean
        ("resnet_ts", {INT8_DYNAMIC, FP16}),  # convolutions and one Gemm: nothing to fuse
    ],
)
def test_a_rewrite_is_offered_only_where_the_exported_graph_has_what_it_acts_on(model, rewrites):
    assert {c.rewrite for c in graph_candidates(_op_types(model))} == rewrites
    assert graph_candidates({"Relu", "Identity"}) == []


def test_the_decided_class_orders_the_search_and_an_undecided_one_leaves_it_cheapest_first():
    everything = runtime_candidates(ModelSidecar(), cores=2) + graph_candidates(
        _op_types("bert_ts")
    )
    memory = search_order(everything, "memory-bound", decided=True)
    assert memory[0].focus == "precision" and memory[0].kind == "graph"  # fewer bytes first
    launch = search_order(everything, "launch-bound", decided=True)
    assert [c.focus for c in launch[:3]] == ["fusion"] * 3
    assert launch[0].kind == RUNTIME  # within a focus, the cheaper runtime change first
    cpu = search_order(everything, "cpu-bound", decided=True)
    assert cpu[0].name.startswith("intra-op threads")
    undecided = search_order(everything, "memory-bound", decided=False)
    kinds = [c.kind for c in undecided]
    assert kinds == sorted(kinds, key=lambda k: k != RUNTIME)  # runtime changes, then rewrites
    assert search_order(everything, "throttled", decided=True) == []  # the clock, not the model
    assert sorted(c.name for c in memory) == sorted(c.name for c in everything)  # none lost

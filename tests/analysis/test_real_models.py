"""Attribution on real architectures exported by PyTorch and shaped by ONNX Runtime's own tools
(tests/data/real_models, made by benchmarks/real_models/export_corpus.py): every model's node
time lands on its original ONNX nodes (>= 95 %) at every optimization level, NCHWc on and off,
with every original node and every runtime node still reported, and nothing counted twice."""

from __future__ import annotations

import dataclasses
import json

import pyarrow.compute as pc
import pytest

from aaco_pipelines.analysis.attribution.coverage import (
    OPTIMIZATION_CONFIGS,
    attribution_coverage,
    profile_model,
)
from aaco_pipelines.analysis.attribution.mapping import can_fuse
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import load_sidecar
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import DATA, FAST_SIDECAR

CORPUS = DATA / "real_models"
MODELS = sorted(path.stem for path in CORPUS.glob("*.onnx"))
ATTRIBUTED = 0.95


def test_the_corpus_has_the_architectures_it_promises():
    expected = {
        "resnet_ts", "mobilenetv2_ts", "efficientnet_ts", "regnet_dynamo", "convnext_ts",
        "convnext_dynamo", "vit_ts", "unet_ts", "bert_ts", "llama_dynamo", "whisper_encoder_ts",
        "t5_ts", "resnet_qdq", "mobilenetv2_qoperator", "bert_dynamic_int8", "bert_ort_fused",
        "control_flow_ts", "control_flow_cond_dynamo", "control_flow_scan_helper",
    }  # fmt: skip
    assert expected <= set(MODELS)
    assert all((CORPUS / f"{name}.onnx").stat().st_size < 3 << 20 for name in MODELS)


@pytest.mark.parametrize("config", list(OPTIMIZATION_CONFIGS))
@pytest.mark.parametrize("name", MODELS)
def test_real_model_time_is_attributed_to_its_onnx_nodes(name, config, tmp_path):
    profiled = profile_model(CORPUS / f"{name}.onnx", config, tmp_path)
    coverage = attribution_coverage(profiled)
    per_node, mapping = coverage["per_node"].to_pylist(), coverage["mapping"].to_pylist()
    unattributed = [r for r in per_node if r["method"] == "runtime_inserted"]
    assert coverage["share"] >= ATTRIBUTED, unattributed[:5]

    # Nothing silently dropped: every original node is reported (run, or eliminated), and every
    # runtime node the profile shows has rows whose shares sum to one.
    originals = set(profiled.extract.nodes["node_name"].to_pylist())
    assert {r["onnx_node"] for r in mapping if r["onnx_node"]} == originals
    runtime_rows: dict[str, float] = {}
    for row in mapping:
        if row["runtime_node"]:
            runtime_rows[row["runtime_node"]] = (
                runtime_rows.get(row["runtime_node"], 0) + row["share"]
            )
    assert {r["node_name"] for r in per_node} <= set(runtime_rows)
    assert all(abs(total - 1.0) < 1e-9 for total in runtime_rows.values())

    # A fused runtime node only ever covers ops it can execute.
    for row in mapping:
        if row["method"] in ("fused_anchor", "fused_absorbed"):
            assert can_fuse(row["runtime_op_type"], row["onnx_op_type"]), row

    # Nothing counted twice: a control-flow node keeps only its own time, not its subgraph's,
    # so the nodes' time fits in the runs (ONNX Runtime runs one node at a time here).
    runs = pc.sum(pc.equal(profiled.events["event_name"], "model_run")).as_py()
    assert coverage["node_ns"] <= profiled.run_ns + runs * 1_000


def test_subgraph_nodes_are_graph_rows_with_their_parent_and_costs(tmp_path):
    profiled = profile_model(CORPUS / "control_flow_ts.onnx", "basic", tmp_path)
    nodes = {r["node_name"]: r for r in profiled.extract.nodes.to_pylist()}
    assert nodes["/Loop"]["parent_node"] is None
    assert nodes["/Slice"]["parent_node"] == "/Loop"  # in the Loop's body
    assert nodes["/a/Gemm"]["parent_node"] == nodes["/b/Gemm"]["parent_node"] == "/If"
    assert nodes["/If"]["parent_node"] == "/Loop"
    assert nodes["/a/Gemm"]["flops"] > 0  # the cost model reaches into subgraphs
    indexes = [r["node_index"] for r in nodes.values()]
    assert sorted(indexes) == list(range(len(nodes)))
    # A control-flow node's own time is its profiled span less that of the nodes directly in
    # its body (which carry their own time), exactly: not a timing race on a busy host.
    coverage = attribution_coverage(profiled)
    times = {r["node_name"]: r["ns"] for r in coverage["per_node"].to_pylist()}
    spans = profiled.events.filter(pc.equal(profiled.events["category"], "Node"))
    spans = spans.filter(pc.greater_equal(spans["iteration"], 0)).group_by("node_name")
    span = {
        r["node_name"]: r["duration_ns_sum"]
        for r in spans.aggregate([("duration_ns", "sum")]).to_pylist()
    }
    for holder in ("/Loop", "/If"):
        body = [name for name, row in nodes.items() if row["parent_node"] == holder]
        assert times[holder] == span[holder] - sum(span.get(name, 0) for name in body) > 0


def test_a_sidecar_sets_the_optimization_level_of_a_measured_session(aaco_paths):
    """Through the whole pipeline: the sidecar's level and disabled transformers reach ONNX
    Runtime, subgraph nodes reach the TraceLake, and the op breakdown explains the time."""
    path = aaco_paths.registry / "control_flow_ts.onnx"
    path.write_bytes((CORPUS / "control_flow_ts.onnx").read_bytes())
    sidecar = dataclasses.replace(
        FAST_SIDECAR, graph_optimization_level="basic", disabled_optimizers=("NchwcTransformer",)
    )
    sidecar.save(aaco_paths.registry / "control_flow_ts.yaml")
    assert load_sidecar(path).graph_optimization_level == "basic"
    bundle = measure_model(registered_model(path), aaco_paths, analyze=True)

    request = json.loads(bundle.file("request.json").read_text())
    assert request["graph_optimization_level"] == "basic"
    assert request["disabled_optimizers"] == ["NchwcTransformer"]
    lake = TraceLake(aaco_paths.tracelake)
    parent = lake.query("SELECT parent_node FROM graph_nodes WHERE node_name = '/b/Gemm'")[
        "parent_node"
    ].to_pylist()
    assert parent == ["/If"]
    shares = {
        r["name"]: r["share"]
        for r in lake.query(
            "SELECT name, share FROM op_breakdown WHERE session_id = ? AND level = 'node'",
            [bundle.session_id],
        ).to_pylist()
    }
    assert sum(shares.values()) == pytest.approx(1.0)
    assert sum(v for k, v in shares.items() if k.startswith("(unmatched)")) < 1 - ATTRIBUTED
    assert shares.get("/Gather", 0) > 0  # a node of the Loop's body, by its own name


def test_an_unknown_optimization_level_is_refused_naming_the_sidecar(aaco_paths):
    from aaco_pipelines.errors import AacoInputError

    path = aaco_paths.registry / "m.onnx"
    path.write_bytes((CORPUS / "control_flow_scan_helper.onnx").read_bytes())
    (aaco_paths.registry / "m.yaml").write_text("graph_optimization_level: 99\n")
    with pytest.raises(AacoInputError, match="graph_optimization_level") as error:
        load_sidecar(path)
    assert "m.yaml" in str(error.value) and "extended" in str(error.value)

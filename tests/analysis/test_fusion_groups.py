"""Fusion groups: the nodes ONNX Runtime ran as one become one roofline point, with the group's
FLOPs, the bytes crossing its boundary and the whole time of the runtime nodes serving it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aaco_pipelines.analysis.attribution.fusion_groups import FUSED_SQL, fusion_groups
from aaco_pipelines.analysis.envelope.choice import save_envelope
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.schema import GRAPH_EDGES, GRAPH_NODES, conform
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.analysis.test_attribution import _mapping
from tests.helpers import FAST_SIDECAR, KERNELS_SCHEMA, synthetic_envelope


def test_a_conv_block_is_one_group_per_fused_kernel_with_its_layout_helpers(tmp_path):
    """ONNX Runtime's own optimization of a conv block: Conv+BatchNormalization+Relu is one
    group named after its Conv, the residual Add joins its Conv, and the NCHWc layout nodes it
    inserted belong to the group of the node they convert for."""
    mapping, optimized = _mapping(tmp_path, models.conv_block_model(), (1, 3, 32, 32))
    graph_nodes = _graph_nodes(models.conv_block_model(), tmp_path)
    groups, members = fusion_groups(pa.Table.from_pylist(mapping), graph_nodes)
    group_of = dict(
        zip(members["onnx_node"].to_pylist(), members["group_name"].to_pylist(), strict=True)
    )
    assert group_of["conv1"] == group_of["bn1"] == group_of["relu1"] == "conv1"
    assert group_of["conv2"] == group_of["bn2"] == group_of["residual_add"] == "conv2"
    assert group_of["pool"] != "conv2"
    types = dict(
        zip(groups["group_name"].to_pylist(), groups["group_op_type"].to_pylist(), strict=True)
    )
    assert types["conv1"] == "Conv+BatchNormalization+Relu"
    runtime_names = {n.name for n in optimized.graph.node}
    assert set(groups["runtime_node"].to_pylist()) == runtime_names  # each in one group
    helpers = {
        r["runtime_node"]: r["onnx_node"] for r in mapping if r["method"] == "inserted_helper"
    }
    runtime_group = dict(
        zip(groups["runtime_node"].to_pylist(), groups["group_name"].to_pylist(), strict=True)
    )
    assert helpers and all(runtime_group[h] == group_of[o] for h, o in helpers.items())


def _graph_nodes(model, tmp_path) -> pa.Table:
    from aaco_pipelines.graph.extract import extract_graph
    from aaco_pipelines.registry.sidecar import InputSpec

    path = models.save(model, tmp_path / "graph.onnx")
    spec = {model.graph.input[0].name: InputSpec(shape=(1, 3, 32, 32), dtype="float32")}
    return extract_graph(path, spec).nodes


@pytest.mark.parametrize(
    ("side_reader", "expected_bytes"),
    [
        (False, 400 + 100 + 400),  # x and w read, y written: t1 never leaves the group
        (True, 400 + 100 + 400 + 400),  # a node outside reads t1: it is written out
    ],
)
def test_a_groups_bytes_are_those_crossing_its_boundary(side_reader, expected_bytes):
    """conv (x, w -> t1) and relu (t1 -> y) run as one kernel: the group moves x, w and y, not
    t1 twice more; its FLOPs are both nodes', its time the kernel's whole time."""
    nodes = [
        _node("conv", 0, "Conv", flops=1000, moved=400 + 100 + 400),
        _node("relu", 1, "Relu", flops=100, moved=400 + 400),
    ]
    edges = [
        _edge("x", None, "conv", 400),
        _edge("w", None, "conv", 100),
        _edge("t1", "conv", "relu", 400),
        _edge("y", "relu", None, 400),
    ]
    if side_reader:
        nodes.append(_node("side", 2, "Identity", flops=0, moved=800))
        edges.append(_edge("t1", "conv", "side", 400))
    groups = pa.table(
        {"runtime_node": ["fused_conv"], "group_name": ["conv"], "group_op_type": ["Conv+Relu"]}
    )
    members = pa.table({"group_name": ["conv", "conv"], "onnx_node": ["conv", "relu"]})
    kernels = pa.table(
        {
            "iteration": [0, 1],
            "node_name": ["fused_conv", "fused_conv"],
            "kernel_name": ["fused_conv", "fused_conv"],
            "kernel_family": [None, None],
            "duration_ns": [1000, 1200],
        },
        schema=KERNELS_SCHEMA,
    )
    with engine.connect() as con:
        for name, table in {
            "graph_nodes": conform(pa.Table.from_pylist(nodes), GRAPH_NODES),
            "graph_edges": conform(pa.Table.from_pylist(edges), GRAPH_EDGES),
            "groups": groups,
            "members": members,
            "kernels": kernels,
        }.items():
            con.register(name, table)
        [row] = (
            con.sql(FUSED_SQL.format(kernels="kernels"), params={"sid": "s", "sha": "m"})
            .to_arrow_table()
            .to_pylist()
        )
    assert row["level"] == "fused" and row["name"] == "conv" and row["op_type"] == "Conv+Relu"
    assert row["mean_ns"] == 1100 and row["share"] == 1.0
    assert row["flops"] == 1100
    assert row["bytes_moved"] == expected_bytes


def _node(name: str, index: int, op_type: str, flops: int, moved: int) -> dict:
    return {
        "model_sha256": "m",
        "node_index": index,
        "node_name": name,
        "op_type": op_type,
        "flops": flops,
        "bytes_moved": moved,
    }


def _edge(tensor: str, src: str | None, dst: str | None, size: int) -> dict:
    return {
        "model_sha256": "m",
        "tensor_name": tensor,
        "src_node": src,
        "dst_node": dst,
        "bytes": size,
    }


def test_a_measured_sessions_roofline_places_each_fusion_group_once(tmp_path):
    """A conv block measured by ONNX Runtime: its roofline points are the fusion groups, each
    with exactly the time its member nodes were given between them, their FLOPs, and fewer
    bytes than the members' own (what passed between them stayed inside)."""
    paths = AacoPaths(home=tmp_path, registry=tmp_path / "registry", tracelake=tmp_path / "l.db")
    path = models.save(models.conv_block_model(), paths.registry / "conv.onnx")
    FAST_SIDECAR.save(paths.registry / "conv.yaml")
    lake = TraceLake(paths.tracelake)
    save_envelope(lake, synthetic_envelope(5e10, 1e10))  # spares the envelope sweep
    session_id = measure_model(registered_model(path), paths, analyze=True).session_id
    breakdown = lake.query("SELECT * FROM op_breakdown WHERE session_id = ?", [session_id])
    node = breakdown.filter(pc.equal(breakdown["level"], "node")).to_pylist()
    fused = breakdown.filter(pc.equal(breakdown["level"], "fused")).to_pylist()
    members = {
        r["onnx_node"]: r["runtime_node"]
        for r in lake.query(
            "SELECT * FROM node_attribution WHERE session_id = ?", [session_id]
        ).to_pylist()
    }
    conv1 = next(r for r in fused if r["name"] == "conv1")
    parts = [r for r in node if r["name"] in ("conv1", "bn1", "relu1")]
    assert conv1["op_type"] == "Conv+BatchNormalization+Relu" and len(parts) == 3
    assert conv1["mean_ns"] == pytest.approx(sum(r["mean_ns"] for r in parts))
    assert conv1["flops"] == sum(r["flops"] for r in parts)
    assert 0 < conv1["bytes_moved"] < sum(r["bytes_moved"] for r in parts)
    assert sum(r["share"] for r in fused) == pytest.approx(1.0)
    points = lake.query(
        "SELECT onnx_node, op_type FROM roofline_points WHERE session_id = ?", [session_id]
    ).to_pylist()
    assert sorted(p["onnx_node"] for p in points) == sorted(r["name"] for r in fused)
    assert not {"bn1", "relu1", "residual_add"} & {p["onnx_node"] for p in points}
    assert members["relu1"] == members["conv1"]

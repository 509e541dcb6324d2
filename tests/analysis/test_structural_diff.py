"""The structural diff on real ONNX Runtime sessions that differ for a known reason: the same
model at optimization levels basic and all, with the GELU fusion disabled by name, and two
versions of a real exported BERT whose second layer's GELU changed. Every fusion ONNX Runtime's
own optimized graphs (each bundle's optimized_model.onnx) show on one side only is reported, and
nothing else; root cause names the lost fusion as a suspect."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from aaco_pipelines.analysis.comparison.structural_diff import scope, structural_diff
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.gate.root_cause import explain_change
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import load_sidecar
from aaco_pipelines.stages.attribute import attribute
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import DATA, FAST_SIDECAR, add_model, store_sessions

# GeluFusion by every name ONNX Runtime has registered it under (one per level since 1.20);
# a name the runtime does not know is ignored.
NO_GELU_FUSION = ("GeluFusion", "GeluFusionL1", "GeluFusionL2")
GELU = ["gelu/div", "gelu/erf", "gelu/add", "gelu/mul", "gelu/half"]
BERT = DATA / "real_models" / "bert_ts.onnx"
ACTIVATION = "/encoder/layer.1/intermediate/intermediate_act_fn/"


def _measure(paths: AacoPaths, lake: TraceLake, name: str, model, sidecar) -> str:
    bundle = measure_model(registered_model(add_model(paths, name, model, sidecar)), paths)
    attribute(lake, bundle)
    return bundle.session_id


def halved_gelu(model: onnx.ModelProto, layer: int) -> onnx.ModelProto:
    """The model with one layer's GELU scaling by 0.5 (a Mul named .../Scale) where it divided
    by sqrt(2) (.../Div): every other node keeps its name, and the pattern is no GELU any more."""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    scope_name = f"/encoder/layer.{layer}/intermediate/intermediate_act_fn/"
    for node in changed.graph.node:
        if node.name == scope_name + "Constant":
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(0.5, np.float32)))
        if node.name == scope_name + "Div":
            node.op_type, node.name = "Mul", scope_name + "Scale"
    onnx.checker.check_model(changed)
    return changed


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> tuple[TraceLake, dict[str, str]]:
    """Analysed sessions: the transformer block at basic, at all, and at all without the GELU
    fusion; bert_ts and its version with layer 1's GELU halved."""
    home = tmp_path_factory.mktemp("structural_diff")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    lake, block, ids = TraceLake(paths.tracelake), models.transformer_block(), {}
    for label, level, disabled in (
        ("basic", "basic", ()), ("all", "all", ()), ("no_gelu", "all", NO_GELU_FUSION),
    ):  # fmt: skip
        sidecar = dataclasses.replace(
            FAST_SIDECAR, graph_optimization_level=level, disabled_optimizers=disabled
        )
        ids[label] = _measure(paths, lake, "block", block, sidecar)
    bert_sidecar = dataclasses.replace(FAST_SIDECAR, inputs=load_sidecar(BERT).inputs)
    bert = onnx.load(BERT)
    ids["bert"] = _measure(paths, lake, "bert", bert, bert_sidecar)
    ids["bert_v2"] = _measure(paths, lake, "bert", halved_gelu(bert, 1), bert_sidecar)
    return lake, ids


def fused_nodes(lake: TraceLake, session: str) -> set[tuple[str, str]]:
    """ONNX Runtime's own word: the (op type, name) of the nodes of the session's optimized
    graph that run under no original node's name (what a fusion made)."""
    [row] = lake.query(
        "SELECT bundle_path, model_sha256 FROM sessions WHERE session_id = ?", [session]
    ).to_pylist()
    originals = set(
        lake.query(
            "SELECT node_name FROM graph_nodes WHERE model_sha256 = ?", [row["model_sha256"]]
        )["node_name"].to_pylist()
    )
    path = f"{row['bundle_path']}/optimized_model.onnx"
    graph = onnx.load(path, load_external_data=False).graph
    return {(n.op_type, n.name) for n in graph.node if n.name not in originals}


def fused_only_on_one_side(lake: TraceLake, a: str, b: str) -> tuple[set, set]:
    """The fused nodes (fused_nodes) of each session that the other one lacks."""
    fused_a, fused_b = fused_nodes(lake, a), fused_nodes(lake, b)
    return fused_a - fused_b, fused_b - fused_a


def reported(diff, side: str) -> set:
    """The (fused op, runtime node) of each fused group the diff reports on one side."""
    return {
        (group["fused_op"], runtime)
        for change in diff.fusions
        for group in getattr(change, f"groups_{side}")
        for runtime in group["runtime_nodes"]
    }


def test_basic_against_all_reports_every_fusion_the_levels_differ_in_and_nothing_else(sessions):
    lake, ids = sessions
    diff = structural_diff(lake, ids["basic"], ids["all"])
    only_basic, only_all = fused_only_on_one_side(lake, ids["basic"], ids["all"])
    assert only_all, "the levels fuse alike here: the test would prove nothing"
    assert (reported(diff, "a"), reported(diff, "b")) == (only_basic, only_all)
    # As ONNX Runtime fuses this block: the GELU gained whole, the second Gemm reshaped into a
    # FusedGemm with its Relu; the LayerNorm and first Gemm (fused at both levels) unreported.
    changes = {f.label: f for f in diff.fusions}
    if "Gelu" in changes:
        assert changes["Gelu"].change == "gained" and changes["Gelu"].members == GELU
        assert (changes["Gelu"].kernels_a, changes["Gelu"].kernels_b) == (5.0, 1.0)
        assert changes["Gelu"].where == "gelu"
    assert not {m for f in diff.fusions for m in f.members} & {"ln/mean", "fc1/matmul"}
    assert diff.kernel_count_changes == []
    assert diff.only_in_a == diff.only_in_b == []


def test_disabling_one_fusion_reports_exactly_that_fusion_lost(sessions):
    lake, ids = sessions
    diff = structural_diff(lake, ids["all"], ids["no_gelu"])
    only_all, only_disabled = fused_only_on_one_side(lake, ids["all"], ids["no_gelu"])
    assert {op for op, _ in only_all} == {"Gelu"} and not only_disabled
    [lost] = diff.fusions
    assert (lost.change, lost.fused_a, lost.fused_b) == ("lost", ["Gelu"], [])
    assert reported(diff, "a") == only_all
    assert lost.members == GELU and lost.where == "gelu" and lost.anchor in GELU
    assert (lost.kernels_a, lost.kernels_b) == (1.0, 5.0)  # one kernel became five
    # Its time: the members' together on each side, with a bootstrap CI of the difference.
    assert lost.a_ms > 0 and lost.b_ms > 0
    assert lost.delta_ms == pytest.approx(lost.b_ms - lost.a_ms)
    assert lost.ci_low_ms is not None and lost.ci_low_ms <= lost.ci_high_ms
    [total] = diff.fusion_totals
    assert (total.change, total.label, total.count, total.where) == ("lost", "Gelu", 1, "gelu")
    assert diff.kernel_count_changes == []
    gone = {k.kernel for k in diff.kernels if k.change == "vanished"}
    came = {k.kernel for k in diff.kernels if k.change == "appeared"}
    assert gone == {"Gelu"} and "Erf" in came and came <= {"Div", "Erf", "Add", "Mul"}
    # Every node that ran is a row once, largest difference first, with both sides' medians.
    names = [n.node for n in diff.nodes]
    assert len(names) == len(set(names)) and set(GELU) <= set(names)
    assert [abs(n.delta_ms) for n in diff.nodes] == sorted(
        (abs(n.delta_ms) for n in diff.nodes), reverse=True
    )
    assert diff.to_dict()["fusions"][0]["label"] == "Gelu"


def test_two_versions_of_a_real_model_align_by_name_and_guess_nothing(sessions):
    """bert_ts against itself with layer 1's GELU divided by sqrt(2) no more: that GELU's
    fusion is lost on the nodes both versions have, its replaced node is only in each version,
    and nothing of layer 0 (whose GELU is still fused) is reported."""
    lake, ids = sessions
    diff = structural_diff(lake, ids["bert"], ids["bert_v2"])
    assert diff.model_sha256_a != diff.model_sha256_b
    assert diff.only_in_a == [ACTIVATION + "Div"] and diff.only_in_b == [ACTIVATION + "Scale"]
    [lost] = diff.fusions
    assert (lost.change, lost.fused_a, lost.fused_b) == ("lost", ["Gelu"], [])
    assert lost.members == [ACTIVATION + n for n in ("Erf", "Add", "Mul", "Mul_1")]
    assert lost.where == ACTIVATION.rstrip("/")
    # ONNX Runtime numbers the nodes it makes (Gelu_token_18), so across versions its graphs
    # are compared by how many nodes of each fused op they have: one Gelu fewer.
    fused = [Counter(op for op, _ in fused_nodes(lake, ids[s])) for s in ("bert", "bert_v2")]
    assert fused[0] - fused[1] == Counter({"Gelu": 1}) and not fused[1] - fused[0]
    # What else moved stays in the layer that changed (a layout helper of its Gemm now serves
    # another node); every other node is aligned on both sides.
    assert all(
        n.node.startswith("/encoder/layer.1/intermediate/") for n in diff.kernel_count_changes
    )
    unaligned = {n.node for n in diff.nodes if not (n.in_a and n.in_b)}
    assert unaligned <= {ACTIVATION + "Div", ACTIVATION + "Scale"}
    assert {k.kernel for k in diff.kernels if k.change == "vanished"} <= {"Div"}


def test_root_cause_names_the_lost_fusion(sessions):
    lake, ids = sessions
    suspects = explain_change(lake, [ids["all"]], ids["no_gelu"])
    assert sum(s.posterior for s in suspects) == pytest.approx(1.0)
    [fusion] = [s for s in suspects if s.kind == "fusion_change"]
    assert fusion.name.startswith("Gelu fusion lost at gelu: ")
    assert "95% CI" in fusion.name
    assert fusion.before == "Gelu, 1 kernels/iteration"
    assert fusion.after == "run apart, 5 kernels/iteration"
    total = structural_diff(lake, ids["all"], ids["no_gelu"]).fusion_totals[0]
    assert fusion.explained_ms == pytest.approx(total.delta_ms)
    assert fusion.detail["fusion"]["count"] == 1
    # Across two model versions, beside the model change itself.
    suspects = explain_change(lake, [ids["bert"]], ids["bert_v2"])
    assert {"model_version", "fusion_change"} <= {s.kind for s in suspects}
    [fusion] = [s for s in suspects if s.kind == "fusion_change"]
    assert fusion.name.startswith(f"Gelu fusion lost at {ACTIVATION.rstrip('/')}: ")


def test_sessions_that_cannot_be_aligned_are_one_line_naming_the_fix(tmp_path):
    lake = TraceLake(tmp_path / "lake.duckdb")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    store_sessions(
        lake,
        [
            {"session_id": sid, "model_slug": slug, "started_at": t0 + dt.timedelta(hours=i)}
            for i, (sid, slug) in enumerate((("a", "block"), ("b", "block"), ("c", "other")))
        ],
    )
    for a, b, message, fix in (
        ("a", "ghost", "no session 'ghost'", "two session ids"),
        ("a", "c", "different models \\(block and other\\)", "one model"),
        ("a", "b", "session a has not been analysed", "aaco run analyses"),
    ):
        with pytest.raises(AacoInputError, match=message) as error:
            structural_diff(lake, a, b)
        assert fix in str(error.value) and "\n" not in str(error.value)


def test_scope_is_the_members_common_name_scope():
    layer = "/encoder/layer.3/output/LayerNorm/"
    assert scope([layer + "ReduceMean", layer + "Sub", layer + "Pow"]) == layer.rstrip("/")
    assert scope(["fc2/matmul", "fc2/bias", "fc2/relu"]) == "fc2"
    assert scope(["ln/mean", "ln/max"]) == "ln"  # "ln/m" is no scope
    assert scope(["a", "b"]) == "" and scope(["alone"]) == ""


def test_a_session_shows_what_changed_since_the_previous_one_in_its_report_and_drift(tmp_path):
    """The model measured without its GELU fusion, then with it: the second session's drift
    judgement and its report (JSON and Markdown) say the fusion was gained; the first has no
    previous session to compare with."""
    from aaco_pipelines.report.content import render_json
    from aaco_pipelines.report.markdown_report import render_markdown
    from aaco_pipelines.report.structure_text import structure_tables
    from aaco_pipelines.stages.judge_drift import judge_drift

    paths = AacoPaths(home=tmp_path, registry=tmp_path / "registry", tracelake=tmp_path / "l.db")
    paths.registry.mkdir()
    block = models.transformer_block()
    first_sidecar = dataclasses.replace(FAST_SIDECAR, disabled_optimizers=NO_GELU_FUSION)
    path = add_model(paths, "block", block, first_sidecar)
    first = measure_model(registered_model(path), paths, analyze=True)
    add_model(paths, "block", block, FAST_SIDECAR)
    second = measure_model(registered_model(path), paths, analyze=True)
    lake = TraceLake(paths.tracelake)
    assert render_json(lake, first.session_id)["structure"] is None
    judged = judge_drift(lake, second)
    assert [(f.change, f.label) for f in judged.structure.fusions] == [("gained", "Gelu")]
    report = render_json(lake, second.session_id)["structure"]
    assert report["session_a"] == first.session_id
    assert report["headline"].startswith("0 fusions lost, 1 gained")
    assert [f["label"] for f in report["fusions"]] == ["Gelu"]
    markdown = render_markdown(lake, second.session_id)
    assert "## Structure since the previous session" in markdown
    # both sides' critical paths, as aaco diff --structure prints them
    paths = judged.structure.critical_paths
    assert paths["a"]["path_p50_ns"] > 0 and paths["b"]["path_p50_ns"] > 0
    tables = dict(structure_tables(judged.structure))
    rows = tables["critical path (aaco whatif re-times it)"]
    assert rows[1][0] == "critical path per iteration" and rows[1][1].endswith(" ms")


def test_the_diff_is_computed_once_kept_and_read_back_by_report_and_cli(
    tmp_path, monkeypatch, capsys
):
    """The drift stage keeps each session's diff (structural_diffs); the report and `aaco diff
    --structure` of that pair read it back, attributing no kernels again; a session without a
    kept row (judged before v22) is diffed when asked."""
    import json

    from aaco_pipelines.analysis.comparison import stored_structure
    from aaco_pipelines.analysis.comparison.structure_records import structural_diff_from_dict
    from aaco_pipelines.cli import main
    from aaco_pipelines.report.content import render_json

    paths = AacoPaths(home=tmp_path, registry=tmp_path / "registry", tracelake=tmp_path / "l.db")
    paths.registry.mkdir()
    block = models.transformer_block()
    path = add_model(paths, "block", block, replace_sidecar(NO_GELU_FUSION))
    first = measure_model(registered_model(path), paths, analyze=True).session_id
    add_model(paths, "block", block, FAST_SIDECAR)
    second = measure_model(registered_model(path), paths, analyze=True).session_id
    lake = TraceLake(paths.tracelake)
    rows = {r["session_id"]: r for r in lake.query("SELECT * FROM structural_diffs").to_pylist()}
    assert rows[first]["previous_session_id"] is None and rows[first]["diff_json"] is None
    kept = rows[second]
    assert kept["previous_session_id"] == first
    changes = lake.query(
        "SELECT f->>'change' AS change, count(*) AS n FROM structural_diffs, "
        "unnest(CAST(diff_json->'$.fusions' AS JSON[])) AS t(f) WHERE session_id = ? GROUP BY 1",
        [second],
    ).to_pylist()
    assert changes == [{"change": "gained", "n": 1}]  # no fusion lost; queryable as kept
    computed = structural_diff(lake, first, second)
    assert structural_diff_from_dict(json.loads(kept["diff_json"])) == computed

    def no_recomputing(*args, **kwargs):
        raise AssertionError("the kept diff was computed again")

    monkeypatch.setattr(stored_structure, "structural_diff", no_recomputing)
    assert render_json(lake, second)["structure"]["session_a"] == first
    monkeypatch.setenv("AACO_HOME", str(tmp_path))
    monkeypatch.setenv("AACO_REGISTRY", str(paths.registry))
    monkeypatch.setenv("AACO_TRACELAKE", str(paths.tracelake))
    assert main(["diff", "--structure", first, second, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fusions"][0]["label"] == "Gelu"

    monkeypatch.undo()
    with lake.transaction() as con:
        con.execute("DELETE FROM structural_diffs WHERE session_id = ?", [second])
    assert render_json(lake, second)["structure"]["session_a"] == first  # diffed again


def replace_sidecar(disabled: tuple[str, ...]):
    return dataclasses.replace(FAST_SIDECAR, disabled_optimizers=disabled)

"""The bundled zoo: reproducible files, valid models that really run, and the shapes that make
each one a useful workload (not just "an ONNX file")."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.sidecar import load_sidecar
from aaco_pipelines.registry.zoo import ZOO_MODEL_NAMES, build_model, build_zoo, zoo_sidecar

EXPECTED_OUTPUTS = {
    "resnet_cnn": {"logits": (1, 10)},
    "bert_encoder": {"last_hidden_state": (1, 64, 128)},
    "mlp": {"logits": (32, 10)},
    "launch_bound": {"y": (1, 16)},
    "memory_bound": {
        "row_energy": (8, 1024, 1),
        "column_sum": (8, 1, 1024),
        "row_peak": (8, 1024, 1),
    },
    "compute_bound": {"y": (512, 1024)},
    # the prefill of an 8-token prompt: logits, and a present per layer of 8 positions
    "llama_decoder": {
        "logits": (1, 8, 512),
        **{f"present.{i}.{kind}": (1, 2, 8, 16) for i in range(2) for kind in ("key", "value")},
    },
}


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("zoo") / "registry"  # does not exist yet
    build_zoo(directory)
    return directory


@pytest.fixture(scope="module")
def zoo_models(zoo_dir) -> dict[str, onnx.ModelProto]:
    return {name: onnx.load(zoo_dir / f"{name}.onnx") for name in ZOO_MODEL_NAMES}


def _sha256s(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def _feeds(model: onnx.ModelProto, name: str) -> dict[str, np.ndarray]:
    """Inputs as a runner would make them: the sidecar's spec, else the graph's static shape."""
    rng = np.random.default_rng(0)
    if name == "llama_decoder":  # a prefill: an 8-token prompt and an empty cache
        return {
            "input_ids": rng.integers(0, 512, (1, 8), dtype=np.int64),
            "attention_mask": np.ones((1, 8), np.int64),
            "position_ids": np.arange(8, dtype=np.int64)[None],
            **{
                f"past_key_values.{i}.{kind}": np.zeros((1, 2, 0, 16), np.float32)
                for i in range(2)
                for kind in ("key", "value")
            },
        }
    specs = zoo_sidecar(name).inputs
    feeds = {}
    for graph_input in model.graph.input:
        if graph_input.name in specs:
            spec = specs[graph_input.name]
            feeds[graph_input.name] = rng.integers(spec.low, spec.high, spec.shape).astype(
                spec.dtype
            )
            continue
        dims = graph_input.type.tensor_type.shape.dim
        assert all(d.HasField("dim_value") for d in dims), f"{name} needs a sidecar input spec"
        shape = [d.dim_value for d in dims]
        feeds[graph_input.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _session(path: Path, optimized_to: Path | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the "optimized model is hardware specific" warning
    if optimized_to is not None:
        options.optimized_model_filepath = str(optimized_to)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


def test_build_zoo_writes_every_model_with_its_sidecar(zoo_dir):
    assert sorted(p.name for p in zoo_dir.iterdir()) == sorted(
        [f"{n}.onnx" for n in ZOO_MODEL_NAMES] + [f"{n}.yaml" for n in ZOO_MODEL_NAMES]
    )
    for name in ZOO_MODEL_NAMES:
        assert load_sidecar(zoo_dir / f"{name}.onnx") == zoo_sidecar(name)


def test_build_zoo_returns_model_paths_and_is_byte_reproducible(zoo_dir, tmp_path):
    paths = build_zoo(tmp_path)
    assert paths == [tmp_path / f"{n}.onnx" for n in ZOO_MODEL_NAMES]
    assert _sha256s(tmp_path) == _sha256s(zoo_dir)


def test_only_if_empty_leaves_a_registry_with_models_alone(zoo_dir, tmp_path):
    (tmp_path / "mine.onnx").write_bytes(b"user model")
    assert build_zoo(tmp_path, only_if_empty=True) == []
    assert [p.name for p in tmp_path.iterdir()] == ["mine.onnx"]

    before = {p.name: p.stat().st_mtime_ns for p in zoo_dir.iterdir()}
    assert build_zoo(zoo_dir, only_if_empty=True) == []
    assert {p.name: p.stat().st_mtime_ns for p in zoo_dir.iterdir()} == before


def test_only_if_empty_seeds_a_folder_with_only_sidecars(tmp_path):
    (tmp_path / "notes.yaml").write_text("tags: {}\n")
    assert len(build_zoo(tmp_path, only_if_empty=True)) == len(ZOO_MODEL_NAMES)


def test_zoo_is_small_on_disk(zoo_dir):
    assert sum(p.stat().st_size for p in zoo_dir.iterdir()) < 25 * 2**20


@pytest.mark.parametrize("name", ZOO_MODEL_NAMES)
def test_model_is_valid_and_loadable_by_onnxruntime_1_22(zoo_dir, zoo_models, name):
    model = zoo_models[name]
    onnx.checker.check_model(str(zoo_dir / f"{name}.onnx"), full_check=True)
    assert model.ir_version <= 10
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 17)}
    node_names = [node.name for node in model.graph.node]
    assert all(node_names) and len(set(node_names)) == len(node_names)


@pytest.mark.parametrize("name", ZOO_MODEL_NAMES)
def test_model_runs_with_finite_outputs_of_expected_shape(zoo_dir, zoo_models, name):
    session = _session(zoo_dir / f"{name}.onnx")
    output_names = [o.name for o in session.get_outputs()]
    results = session.run(None, _feeds(zoo_models[name], name))
    shapes = {n: r.shape for n, r in zip(output_names, results, strict=True)}
    assert shapes == EXPECTED_OUTPUTS[name]
    for result in results:
        assert np.isfinite(result).all()
        assert result.std() > 0  # not a constant (e.g. saturated) output


def test_sidecars_tag_the_zoo_and_its_signatures():
    tags = {name: zoo_sidecar(name).tags for name in ZOO_MODEL_NAMES}
    assert all(t["zoo"] == "true" for t in tags.values())
    assert {n: t.get("signature") for n, t in tags.items() if "signature" in t} == {
        "launch_bound": "launch-bound",
        "memory_bound": "memory-bound",
        "compute_bound": "compute-bound",
    }
    assert {n: t.get("family") for n, t in tags.items() if "family" in t} == {
        "resnet_cnn": "cnn",
        "bert_encoder": "transformer",
        "mlp": "mlp",
        "llama_decoder": "llm",
    }


def test_resnet_has_residual_cnn_structure(zoo_models):
    ops = _ops(zoo_models["resnet_cnn"])
    for op in ("Conv", "BatchNormalization", "Relu", "Add", "GlobalAveragePool", "Gemm"):
        assert ops[op] >= 1, op
    assert ops["MaxPool"] + ops["AveragePool"] >= 1
    assert ops["Add"] >= 3  # one skip connection per residual block


def test_bert_is_a_multi_layer_encoder_with_dynamic_input(zoo_models):
    model = zoo_models["bert_encoder"]
    ops = _ops(model)
    assert ops["Softmax"] >= 4 and ops["LayerNormalization"] >= 8 and ops["Erf"] >= 4
    assert ops["Gather"] >= 1
    (graph_input,) = model.graph.input
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [d.dim_param for d in graph_input.type.tensor_type.shape.dim] == ["batch", "sequence"]
    assert zoo_sidecar("bert_encoder").inputs["input_ids"].shape == (1, 64)


def test_bert_runs_at_other_batch_and_sequence_sizes(zoo_dir):
    session = _session(zoo_dir / "bert_encoder.onnx")
    ids = np.random.default_rng(1).integers(0, 1000, (2, 16), dtype=np.int64)
    (hidden,) = session.run(None, {"input_ids": ids})
    assert hidden.shape == (2, 16, 128) and np.isfinite(hidden).all()


def test_bert_gelu_is_the_pattern_onnxruntime_fuses(zoo_dir, tmp_path):
    _session(zoo_dir / "bert_encoder.onnx", optimized_to=tmp_path / "bert.opt.onnx")
    optimized = _ops(onnx.load(tmp_path / "bert.opt.onnx"))
    assert optimized["Erf"] == 0
    assert optimized["Gelu"] + optimized["BiasGelu"] + optimized["FastGelu"] >= 4


def test_launch_bound_keeps_hundreds_of_nodes_after_ort_optimization(zoo_dir, zoo_models, tmp_path):
    assert len(zoo_models["launch_bound"].graph.node) >= 400
    _session(zoo_dir / "launch_bound.onnx", optimized_to=tmp_path / "launch.opt.onnx")
    assert len(onnx.load(tmp_path / "launch.opt.onnx").graph.node) >= 300


def test_memory_bound_input_is_at_least_32_mib(zoo_models):
    (graph_input,) = zoo_models["memory_bound"].graph.input
    elements = np.prod([d.dim_value for d in graph_input.type.tensor_type.shape.dim])
    assert elements * 4 >= 32 * 2**20
    ops = _ops(zoo_models["memory_bound"])
    assert ops["ReduceSum"] + ops["ReduceMean"] >= 2
    assert ops["MatMul"] + ops["Gemm"] + ops["Conv"] == 0


def test_compute_bound_multiplies_large_matrices(zoo_models):
    model = zoo_models["compute_bound"]
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 4
    for node in matmuls:
        k, n = weights[node.input[1]]
        assert k >= 1024 and n >= 1024


def test_build_model_matches_the_written_file(zoo_dir):
    assert build_model("mlp").SerializeToString() == (zoo_dir / "mlp.onnx").read_bytes()


@pytest.mark.parametrize("lookup", [build_model, zoo_sidecar])
def test_unknown_model_name_lists_the_valid_names(lookup):
    with pytest.raises(AacoInputError) as info:
        lookup("resnet50")
    assert "resnet50" in str(info.value)
    assert all(name in str(info.value) for name in ZOO_MODEL_NAMES)


def test_unwritable_registry_is_an_input_error(tmp_path):
    not_a_folder = tmp_path / "registry"
    not_a_folder.write_text("a file where the registry folder should be")
    with pytest.raises(AacoInputError, match="registry"):
        build_zoo(not_a_folder)

"""Registry scanning, slugs and sidecars."""

from __future__ import annotations

import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.scan import model_slug, scan_registry
from aaco_pipelines.registry.sidecar import InputSpec, ModelSidecar, load_sidecar
from tests import models


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("ResNet-50", "resnet_50"),
        ("bert|base,v2", "bert_base_v2"),
        ("a/b c", "a_b_c"),
        ("---", "model"),
    ],
)
def test_slugs_are_safe_partition_keys(name, slug):
    assert model_slug(name) == slug


def test_scan_finds_only_onnx_files_with_hash_and_sidecar(tmp_path):
    models.save(models.tiny_mlp(), tmp_path / "MLP-A.onnx")
    models.save(models.tiny_mlp(seed=1), tmp_path / "mlp_b.onnx")
    ModelSidecar(measured_iterations=7).save(tmp_path / "mlp_b.json")
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "sub").mkdir()
    found = scan_registry(tmp_path)
    assert [m.slug for m in found] == ["mlp_a", "mlp_b"]
    assert found[0].sha256 != found[1].sha256
    assert {m.sidecar.name if m.sidecar else None for m in found} == {None, "mlp_b.json"}


def test_sidecar_round_trip_yaml_and_json(tmp_path):
    sidecar = ModelSidecar(
        inputs={"ids": InputSpec(shape=(1, 64), dtype="int64", low=0, high=1000)},
        measured_iterations=12,
        execution_providers=("CPUExecutionProvider",),
        tags={"family": "bert"},
    )
    for suffix in (".yaml", ".json"):
        model = tmp_path / f"m{suffix.strip('.')}.onnx"
        sidecar.save(model.with_suffix(suffix))
        assert load_sidecar(model) == sidecar


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("inputs: {x: {dtype: float32}}", "needs a shape"),
        ("inputs: {x: {shape: [batch, 3]}}", "positive integers"),
        ("measured_iterations: 0", "positive integer"),
        ("warmup: 3", "unknown sidecar keys"),
        ("inputs: [", "cannot be parsed"),
    ],
)
def test_bad_sidecars_name_the_file_and_the_fix(tmp_path, text, fragment):
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(AacoInputError) as err:
        load_sidecar(tmp_path / "m.onnx")
    assert fragment in str(err.value)
    assert str(tmp_path / "m.yaml") in str(err.value)
    assert "Fix:" in str(err.value)

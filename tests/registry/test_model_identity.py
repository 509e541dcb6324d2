"""One model, one slug, one drift series: names that slugging would merge stay apart, adding a
file never renames another model's partition, and a slug holding another model's sessions is
refused before anything is measured."""

from __future__ import annotations

import re
import unicodedata

import dagster as dg

from aaco_pipelines.assets import models_partitions, targets_partitions
from aaco_pipelines.cli import main
from aaco_pipelines.registry.scan import model_slug, scan_registry, slug_conflicts
from aaco_pipelines.resources import ModelRegistryResource
from aaco_pipelines.sensors import model_registry_sensor
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SHARED, error_lines, store_sessions

HASHED = re.compile(r"[a-z0-9_]+_[0-9a-f]{8}")


def test_names_that_slugging_would_merge_get_their_own_slug():
    assert model_slug("ResNet-50") == "resnet_50"  # ASCII names keep the key they always had
    assert HASHED.fullmatch(model_slug("模型")) and model_slug("模型").startswith("model_")
    assert model_slug("模型") != model_slug("网络")
    assert model_slug("net🚀") != model_slug("net🔥") != model_slug("net")
    assert model_slug("Café").startswith("cafe_") and model_slug("Café") != model_slug("Cafe")
    decomposed = unicodedata.normalize("NFD", "Café")  # as macOS file systems return it
    assert model_slug(decomposed) == model_slug("Café")
    assert model_slug(model_slug("模型")) == model_slug("模型")  # a slug names its own model
    long_a, long_b = "m" * 240 + "a", "m" * 240 + "b"  # near the 255-byte file name limit
    assert len(model_slug(long_a)) <= 100 and model_slug(long_a) != model_slug(long_b)


def test_adding_a_file_never_changes_another_models_slug(tmp_path):
    """Files arrive one by one, in an order where each newcomer sorts before the earlier ones
    (the old numeric suffix went by name order): every model keeps its first slug, or, where
    two files claim one slug, neither is measured and both are named."""
    names = ["网络", "模型", "foo_bar", "Foo-Bar", "net🔥", "net🚀", "resnet"]
    first_slug: dict[str, str] = {}
    for name in names:
        models.save(models.tiny_mlp(), tmp_path / f"{name}.onnx")
        slugs = {m.name: m.slug for m in scan_registry(tmp_path)}
        first_slug.setdefault(name, slugs.get(name))
        for earlier, slug in slugs.items():
            assert slug == first_slug[earlier], f"adding {name} renamed {earlier}"
    assert set(slugs) == set(names) - {"foo_bar", "Foo-Bar"}
    conflict = str(slug_conflicts(tmp_path)["foo_bar"])
    assert "Foo-Bar.onnx and foo_bar.onnx" in conflict and "rename" in conflict


def _run(model_path) -> int:
    return main(["run", "--model", str(model_path), "--iterations", "5", "--no-profile"])


def test_run_of_two_models_with_cjk_names_keeps_two_series(aaco_paths, tmp_path, capsys):
    first = models.save(models.tiny_mlp(seed=1), tmp_path / "a" / "模型.onnx")
    second = models.save(models.tiny_mlp(seed=2), tmp_path / "b" / "网络.onnx")
    assert _run(first) == 0 and _run(second) == 0
    capsys.readouterr()
    rows = TraceLake(aaco_paths.tracelake).query(
        "SELECT model_name, model_slug, count(*) OVER (PARTITION BY model_slug) AS in_series "
        "FROM sessions ORDER BY started_at"
    )
    assert rows["model_name"].to_pylist() == ["模型", "网络"]
    slugs = rows["model_slug"].to_pylist()
    assert slugs[0] != slugs[1] and all(HASHED.fullmatch(s) for s in slugs)
    assert rows["in_series"].to_pylist() == [1, 1]  # neither judged against the other


def _nothing_measured(paths) -> bool:
    return not any(paths.sessions.glob("2*/*")) and not any(paths.failed_sessions.glob("*/*"))


def test_a_slug_holding_another_models_sessions_is_refused_before_measuring(
    aaco_paths, tmp_path, capsys
):
    """Sessions of `Foo-Bar` (or of `模型`, stored as `model` before the hash rule) own their
    slug: `foo_bar.onnx` and `model.onnx` are refused, in one line naming both models, by
    `aaco run` and by `aaco ingest`, before any worker starts."""
    lake = TraceLake(aaco_paths.tracelake)
    store_sessions(
        lake,
        [
            {"session_id": "s1", "model_name": "Foo-Bar", "model_slug": "foo_bar"},
            {"session_id": "s2", "model_name": "模型", "model_slug": "model"},
        ],
    )
    trace = SHARED / "samples" / "profilers" / "hpctraining_mi250_laplacian_rocprofv1_results.csv"
    for model, owner in (("foo_bar", "Foo-Bar"), ("model", "模型")):
        path = models.save(models.tiny_mlp(), aaco_paths.registry / f"{model}.onnx")
        for argv in (
            ["run", "--model", str(path), "--iterations", "5", "--no-profile"],
            ["ingest", str(trace), "--name", model],
        ):
            assert main(argv) == 2
            err = error_lines(capsys.readouterr().err)
            assert len(err) == 1 and err[0].startswith("aaco: error: "), err
            assert f"'{model}'" in err[0] and f"'{owner}'" in err[0] and "Fix: rename" in err[0]
            assert str(path if argv[0] == "run" else trace) in err[0]
    assert _nothing_measured(aaco_paths)
    assert sorted(lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist()) == [
        "s1",
        "s2",
    ]


def test_registry_sensor_keeps_each_models_partition(aaco_paths):
    resources = {
        "registry": ModelRegistryResource(
            home=str(aaco_paths.home),
            registry=str(aaco_paths.registry),
            tracelake=str(aaco_paths.tracelake),
        )
    }
    registry = aaco_paths.registry
    with dg.instance_for_test() as instance:

        def tick(cursor=None):
            context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources)
            return model_registry_sensor(context)

        models.save(models.tiny_mlp(seed=1), registry / "网络.onnx")
        first = tick()
        [network] = [r.partition_key.keys_by_dimension["model"] for r in first.run_requests]
        instance.add_dynamic_partitions(models_partitions.name, [network])
        instance.add_dynamic_partitions(targets_partitions.name, ["cpu"])

        models.save(models.tiny_mlp(seed=2), registry / "模型.onnx")  # sorts before 网络
        second = tick(first.cursor)
        [model] = [r.partition_key.keys_by_dimension["model"] for r in second.run_requests]
        assert model != network  # only the new model runs, in a partition of its own
        assert second.dynamic_partitions_requests[0].partition_keys == [model]
        instance.add_dynamic_partitions(models_partitions.name, [model])

        models.save(models.tiny_mlp(seed=3), registry / "Foo-Bar.onnx")
        models.save(models.tiny_mlp(seed=4), registry / "foo_bar.onnx")
        third = tick(second.cursor)
        assert not third.run_requests  # neither of two files claiming one slug
        message = third.skip_reason.skip_message
        assert "Foo-Bar.onnx and foo_bar.onnx are both model 'foo_bar'" in message
        assert sorted(instance.get_dynamic_partitions(models_partitions.name)) == sorted(
            [network, model]
        )


def test_registry_list_names_the_files_that_share_a_slug(aaco_paths, capsys):
    models.save(models.tiny_mlp(seed=1), aaco_paths.registry / "Foo-Bar.onnx")
    models.save(models.tiny_mlp(seed=2), aaco_paths.registry / "foo_bar.onnx")
    models.save(models.tiny_mlp(seed=3), aaco_paths.registry / "模型.onnx")
    assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 models") and model_slug("模型") in out
    assert "not measured: " in out and "Foo-Bar.onnx and foo_bar.onnx" in out

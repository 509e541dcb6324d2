"""A model's identity is its registry entry, not its file name (issue 26, item 7): a file
outside the registry with a registry model's name used to join that model's drift series and
raise a false regression. It now gets a series of its own (its name's slug and a digest of
where it is); a registry file given by path is still that registry entry."""

from __future__ import annotations

import re

from aaco_pipelines.cli import main
from aaco_pipelines.registry.identity import model_at, outside_slug
from aaco_pipelines.registry.scan import MAX_SLUG_CHARS
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import FAST_SIDECAR, add_model

OWN_SERIES = re.compile(r"bert_[0-9a-f]{8}")


def _run(path) -> int:
    return main(["run", "--model", str(path), "--iterations", "5", "--no-profile"])


def test_a_same_named_file_from_elsewhere_is_never_in_the_registry_models_series(
    aaco_paths, tmp_path, capsys
):
    registered = add_model(aaco_paths, "bert", models.tiny_mlp(seed=1))
    elsewhere = models.save(
        models.slower_mlp(extra_layers=20), tmp_path / "elsewhere" / "bert.onnx"
    )
    FAST_SIDECAR.save(elsewhere.with_suffix(".yaml"))
    assert _run(registered) == 0 and _run(elsewhere) == 0  # the registry file by path, then not
    capsys.readouterr()
    rows = TraceLake(aaco_paths.tracelake).query(
        "SELECT model_name, model_slug, count(*) OVER (PARTITION BY model_slug) AS in_series "
        "FROM sessions ORDER BY started_at"
    )
    assert rows["model_name"].to_pylist() == ["bert", "bert"]
    registry_slug, outside = rows["model_slug"].to_pylist()
    assert registry_slug == "bert" and OWN_SERIES.fullmatch(outside)
    assert rows["in_series"].to_pylist() == [1, 1]  # the slower file is judged against nothing
    assert main(["registry", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    bert = next(line.split() for line in listed if line.split()[:1] == ["bert"])
    assert bert[3] == "1"  # one version: the other file's content is not bert's


def test_the_outside_series_is_stable_for_the_file_and_apart_for_a_copy(aaco_paths, tmp_path):
    add_model(aaco_paths, "bert", models.tiny_mlp(seed=1))
    first = models.save(models.tiny_mlp(seed=2), tmp_path / "a" / "bert.onnx")
    copy = models.save(models.tiny_mlp(seed=2), tmp_path / "b" / "bert.onnx")
    assert model_at(aaco_paths.registry / "bert.onnx", aaco_paths.registry).slug == "bert"
    slug = model_at(first, aaco_paths.registry).slug
    assert OWN_SERIES.fullmatch(slug)
    models.save(models.tiny_mlp(seed=3), first)  # edited in place: a new version, same series
    assert model_at(first, aaco_paths.registry).slug == slug
    assert model_at(tmp_path / "a" / ".." / "a" / "bert.onnx", aaco_paths.registry).slug == slug
    assert model_at(copy, aaco_paths.registry).slug not in (slug, "bert")
    (tmp_path / "link").symlink_to(aaco_paths.registry)  # the registry reached another way
    assert model_at(tmp_path / "link" / "bert.onnx", aaco_paths.registry).slug == "bert"
    (tmp_path / "bert_link.onnx").symlink_to(aaco_paths.registry / "bert.onnx")
    assert model_at(tmp_path / "bert_link.onnx", aaco_paths.registry).slug == "bert"
    # A registry entry that is a link to a store of large models is still that entry.
    stored = models.save(models.tiny_mlp(seed=4), tmp_path / "store" / "big.onnx")
    (aaco_paths.registry / "big.onnx").symlink_to(stored)
    assert model_at(aaco_paths.registry / "big.onnx", aaco_paths.registry).slug == "big"


def test_an_outside_slug_fits_the_slug_length_limit(tmp_path):
    path = tmp_path / ("m" * 240 + ".onnx")
    slug = outside_slug(path)
    assert len(slug) <= MAX_SLUG_CHARS and re.fullmatch(r"[a-z0-9_]+_[0-9a-f]{8}", slug)

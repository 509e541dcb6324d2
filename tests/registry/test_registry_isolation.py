"""One bad registry file never poisons the others (issue 26, item 2): a model whose external
data `offset` is "abc" used to raise ValueError from the registry scan, ending `aaco registry
list`, `aaco run` of another model, `aaco sweep` and the registry sensor in a traceback. Now it is
reported (registry list, doctor, the sensor's log) with its fix and skipped; every other model is
measured. Offsets and lengths are non-negative integers, or one error naming the weight."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import onnx
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.cli.doctor_checks import WARNING, check_registry
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.registry.external_data import external_files, hashed_model, model_sha256
from aaco_pipelines.registry.scan import find_model, read_registry, scan_registry
from aaco_pipelines.resources import ModelRegistryResource
from aaco_pipelines.sensors import model_registry_sensor
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import FAST_SIDECAR, add_model


def save_with_external_data(path: Path, key: str = "offset", value: str | None = None) -> Path:
    """The tiny MLP with every weight in `<stem>.weights`; `value` rewrites the `key` entry of
    its first weight, as a crafted or damaged model file would have it."""
    location = f"{path.stem}.weights"
    onnx.save_model(
        models.tiny_mlp(), str(path), save_as_external_data=True, location=location,
        size_threshold=0,
    )  # fmt: skip
    if value is not None:
        model = onnx.load(str(path), load_external_data=False)
        entries = model.graph.initializer[0].external_data
        found = [entry for entry in entries if entry.key == key]
        if found:
            found[0].value = value
        else:
            entries.add(key=key, value=value)
        onnx.save_model(model, str(path))
    FAST_SIDECAR.save(path.with_suffix(".yaml"))
    return path


def bad_registry(registry: Path) -> Path:
    """A registry of one good model (`good`) and one whose offset is "abc" (`bad`)."""
    good = models.save(models.tiny_mlp(seed=2), registry / "good.onnx")
    FAST_SIDECAR.save(good.with_suffix(".yaml"))
    return save_with_external_data(registry / "bad.onnx", value="abc")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("offset", "abc"),
        ("offset", "-8"),
        ("length", "-1"),
        ("offset", "1e3"),
        ("offset", " 4"),
        ("length", "+16"),
        ("offset", "٣"),  # a digit, but not ASCII
        ("offset", "9" * 5000),  # past int()'s digit limit and int64
        ("length", "9223372036854775808"),  # 2**63
    ],
)
def test_offsets_and_lengths_are_byte_counts_or_one_error(tmp_path, key, value):
    path = save_with_external_data(tmp_path / "m.onnx", key, value)
    with pytest.raises(AacoInputError) as raised:
        external_files(path)
    message = str(raised.value)
    assert f"external-data {key} " in message and "not a whole number of bytes" in message
    assert str(path) in message and "Fix: re-save the model" in message and "\n" not in message
    sha, problem = hashed_model(path)
    assert problem is not None and sha == model_sha256(path)  # hashed as a plain file


def test_good_offsets_and_lengths_still_read(tmp_path):
    path = save_with_external_data(tmp_path / "m.onnx")
    assert external_files(path) == ["m.weights"]
    assert hashed_model(path)[1] is None


def test_the_scan_reports_the_bad_model_and_keeps_the_others(tmp_path):
    bad = bad_registry(tmp_path)
    models.save(models.tiny_mlp(seed=3), tmp_path / "sided.onnx")
    (tmp_path / "sided.yaml").write_text("min_measured_seconds: 1e300\n")
    gone = save_with_external_data(tmp_path / "gone.onnx")
    (tmp_path / "gone.weights").unlink()
    scan = read_registry(tmp_path)
    assert [m.slug for m in scan.models] == ["good"]
    assert [m.slug for m in scan_registry(tmp_path)] == ["good"]
    problems = {slug: str(error) for slug, error in scan.problems.items()}
    assert sorted(problems) == ["bad", "gone", "sided"]
    assert problems["bad"].startswith(f"{bad}: weight 'w1' has external-data offset 'abc'")
    assert problems["gone"].startswith(f"{gone}: external weight file 'gone.weights'")
    assert "min_measured_seconds" in problems["sided"] and "<= 3600" in problems["sided"]
    assert str(tmp_path / "sided.yaml") in problems["sided"]
    # Asking for a model reads its own file only, and a bad one is its one-line error.
    assert find_model(tmp_path, "good").slug == "good"
    with pytest.raises(AacoInputError, match="offset 'abc'"):
        find_model(tmp_path, "bad")


def test_registry_list_and_doctor_name_the_bad_model_and_its_fix(aaco_paths, capsys):
    bad = bad_registry(aaco_paths.registry)
    assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 models in ") and "1 not measured (below)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.startswith("  ")}
    assert rows["bad"][-2:] == ["NOT", "MEASURED"] and rows["good"][3] == "0"
    [why] = [line for line in out.splitlines() if line.startswith("not measured: ")]
    assert f"{bad}: weight 'w1' has external-data offset 'abc'" in why and "Fix: " in why

    check = check_registry(aaco_paths)
    assert check.status == WARNING and "1 models" in check.detail
    assert "1 not measured" in check.detail and "offset 'abc'" in check.detail
    assert main(["doctor"]) == 0
    doctor = capsys.readouterr().out
    [row] = [line for line in doctor.splitlines() if line.startswith("Model registry")]
    assert "warning" in row and "offset 'abc'" in row


def test_run_measures_the_good_model_and_refuses_the_bad_one_in_one_line(aaco_paths, capsys):
    bad = bad_registry(aaco_paths.registry)
    assert main(["run", "--model", "good", "--iterations", "5", "--no-profile"]) == 0
    capsys.readouterr()
    for name in ("bad", str(bad)):
        assert main(["run", "--model", name, "--no-profile"]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith(f"aaco: error: {bad}: weight 'w1'")
        assert "offset 'abc'" in err and "Fix: re-save the model" in err
    slugs = TraceLake(aaco_paths.tracelake).query("SELECT model_slug FROM sessions")
    assert slugs["model_slug"].to_pylist() == ["good"]


def test_the_sensor_requests_the_good_models_and_logs_the_bad_one(aaco_paths, capsys):
    bad_registry(aaco_paths.registry)
    resources = {
        "registry": ModelRegistryResource(
            home=str(aaco_paths.home),
            registry=str(aaco_paths.registry),
            tracelake=str(aaco_paths.tracelake),
        )
    }
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources=resources)
        first = model_registry_sensor(context)
        requested = [r.partition_key.keys_by_dimension["model"] for r in first.run_requests]
        assert requested == ["good"]
        assert first.dynamic_partitions_requests[0].partition_keys == ["good"]
        err = capsys.readouterr().err  # the sensor's log, as dagster writes it
        logged = [line for line in err.splitlines() if "not measured: " in line]
        assert len(logged) == 1 and "WARNING" in logged[0]
        assert "bad.onnx: weight 'w1' has external-data offset 'abc'" in logged[0]

        # Nothing new: the skip reason, which the UI shows for the tick, names the bad model.
        context = dg.build_sensor_context(
            instance=instance, resources=resources, cursor=first.cursor
        )
        second = model_registry_sensor(context)
        assert not second.run_requests
        assert "not measured: " in second.skip_reason.skip_message
        assert "offset 'abc'" in second.skip_reason.skip_message


def test_sweep_measures_the_good_models(aaco_paths, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    bad_registry(aaco_paths.registry)
    add_model(aaco_paths, "other", models.tiny_mlp(seed=4))
    assert main(["sweep"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "2 runs: 0 failed, 0 regressed"
    (skipped,) = [line for line in err.splitlines() if line.startswith("not measured:")]
    assert "bad.onnx" in skipped and "Fix:" in skipped, err  # said, not silently left out
    assert main(["sweep", "--models", "bad"]) == 2  # asked for by name: its own error
    assert "bad.onnx" in capsys.readouterr().err
    slugs = TraceLake(aaco_paths.tracelake).query("SELECT model_slug FROM sessions ORDER BY 1")
    assert slugs["model_slug"].to_pylist() == ["good", "other"]

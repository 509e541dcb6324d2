"""What an install brings (pyproject's extras): ONNX Runtime per host, never both builds; the
scale-out packages only with `cluster`; statsmodels only for the tests. And where an extra is
needed and missing, one line naming it (aaco_pipelines/extras.py)."""

from __future__ import annotations

import sys

import pytest
import tomllib

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from tests import models
from tests.helpers import REPO, add_model

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for r in requirements}


def test_the_runtime_and_the_scale_out_packages_are_extras():
    base, extras = _names(PROJECT["dependencies"]), PROJECT["optional-dependencies"]
    assert not base & {"onnxruntime", "onnxruntime-rocm", "statsmodels", "pandas"}
    assert not base & {"dagster-postgres", "psycopg2-binary", "dagster-celery"}
    assert _names(extras["cpu"]) == {"onnxruntime"} and _names(extras["rocm"]) == {
        "onnxruntime-rocm"
    }
    assert _names(extras["cluster"]) == {"dagster-postgres", "psycopg2-binary", "dagster-celery"}
    assert "statsmodels" in _names(extras["dev"])


def test_a_missing_runtime_is_one_line_naming_the_extra(aaco_paths, capsys, monkeypatch):
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if no build were installed
    assert main(["run", "--model", "tiny", "--provider", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "onnxruntime is not installed" in err, err
    assert "pip install -e '.[cpu]'" in err and "Traceback" not in err


def test_scaling_out_without_the_cluster_extra_is_one_line(tmp_path, monkeypatch):
    from aaco_pipelines.instance import POSTGRES_ENV, prepare_dagster_home, routes_runs

    monkeypatch.setitem(sys.modules, "dagster_postgres", None)
    monkeypatch.setitem(sys.modules, "dagster_celery", None)
    monkeypatch.setitem(sys.modules, "dagster_celery.launcher", None)
    monkeypatch.setenv(POSTGRES_ENV, "postgresql://aaco@127.0.0.1:1/dagster")
    with pytest.raises(AacoInputError) as info:
        prepare_dagster_home(tmp_path / "dagster")
    assert "dagster_postgres is not installed" in str(info.value)
    assert (
        "'.[cluster]'" in str(info.value) and not (tmp_path / "dagster" / "dagster.yaml").exists()
    )
    assert routes_runs(object()) is False  # no launcher of ours can be configured

"""What an install brings (pyproject's extras): ONNX Runtime per host, never both builds; the
scale-out packages only with `cluster`; statsmodels only for the tests. And where an extra is
needed and missing, one line naming it (aaco_pipelines/foundation/extras.py).

And what it is installed as: one top-level name. The Dagster project's folders (assets/,
resources/, sensors/) sit at the top of the repository but must not install as top-level
`assets`, `resources`, `sensors`, which would shadow, or be shadowed by, a user's own Dagster
project in the same environment. The wheel is built for real, from a copy of the sources, with
setuptools' own build backend."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from tests import models
from tests.helpers import REPO, add_model

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
INSTALLED_AS = {
    "aaco_pipelines": "aaco_pipelines",
    "assets": "aaco_pipelines/assets",
    "resources": "aaco_pipelines/resources",
    "sensors": "aaco_pipelines/sensors",
}
SOURCES = ("pyproject.toml", "README.md", *INSTALLED_AS)


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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The project's wheel, built from a copy of its sources (the checkout stays untouched)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO / name, source / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from setuptools import build_meta; build_meta.build_wheel({str(out)!r})",
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_installs_one_top_level_name(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist() if ".dist-info/" not in name}
    assert tops == {"aaco_pipelines"}
    (top_level,) = [n for n in wheel.namelist() if n.endswith(".dist-info/top_level.txt")]
    assert wheel.read(top_level).decode().split() == ["aaco_pipelines"]


def test_the_wheel_holds_every_module_of_the_four_folders(wheel):
    """A package left out of pyproject's list would be missing here, not in the checkout."""
    expected = {
        f"{INSTALLED_AS[folder]}/{path.relative_to(REPO / folder).as_posix()}"
        for folder in INSTALLED_AS
        for path in (REPO / folder).rglob("*.py")
    }
    expected.add("aaco_pipelines/instance/dagster.yaml")
    assert expected - set(wheel.namelist()) == set()


def test_the_installed_code_location_loads_and_leaves_a_users_assets_alone(wheel, tmp_path):
    """Unpacked as pip would install it, beside a user's own `assets` package."""
    site = tmp_path / "site"
    wheel.extractall(site)
    user = tmp_path / "user_project"
    (user / "assets").mkdir(parents=True)
    (user / "assets" / "__init__.py").write_text("WHOSE = 'the user'\n")
    probe = (
        "import assets, aaco_pipelines.definitions as d, aaco_pipelines.assets as ours;"
        "print(assets.WHOSE); print(ours.__file__); print(len(d.defs.resolve_asset_graph().get_all_asset_keys()))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(user)])}
    ran = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    whose, ours_file, asset_count = ran.stdout.split("\n")[:3]
    assert whose == "the user"
    assert Path(ours_file).is_relative_to(site)
    assert int(asset_count) >= 8

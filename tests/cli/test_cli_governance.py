"""`aaco diff`, `aaco baseline` and `aaco sweep`: the CI gate's exit codes (0 pass, 1 regression
with --fail-on-regression, 2 user error), baselines from the command line, and a headless sweep
whose runs land in the Dagster instance while a broken model fails alone."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import add_model, trust_every_measurement


@pytest.fixture(scope="module")
def mlp_swap_home(tmp_path_factory):
    """Two sessions of the tiny MLP, then one of its slower replacement, under one AACO_HOME."""
    home = tmp_path_factory.mktemp("cli_governance")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    ids = [
        measure_model(registered_model(add_model(paths, "mlp", model)), paths).session_id
        for model in (models.tiny_mlp(), models.tiny_mlp(), models.slower_mlp())
    ]
    trust_every_measurement(paths.tracelake)  # these tests are about windows, not this host
    return paths, ids


@pytest.fixture
def mlp_swap_session_ids(mlp_swap_home, monkeypatch):
    """The session ids of mlp_swap_home, with AACO_HOME pointing at it and no baselines left by
    an earlier test."""
    paths, ids = mlp_swap_home
    monkeypatch.setenv("AACO_HOME", str(paths.home))
    monkeypatch.setenv("AACO_TRACELAKE", str(paths.tracelake))
    with TraceLake(paths.tracelake).connect(write=True) as con:
        con.execute("DELETE FROM baselines")
    return ids


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _p50_regressed(out: str) -> bool:
    """A critical regression whose p50 row says so. The headline names the worst metric, which
    on a busy host may be p99 (a few preempted iterations of the slower session; these tests
    trust every measurement), so the p50 is read from its row."""
    p50 = next(line for line in out.splitlines() if line.lstrip().startswith("p50 latency"))
    return out.startswith("REGRESSION (critical): mlp ") and p50.endswith("REGRESSION (critical)")


def test_diff_exit_codes(mlp_swap_session_ids, capsys, tmp_path, monkeypatch):
    """The stored sessions' gate (--paired never: nothing measured again)."""
    t0, t1, slower = mlp_swap_session_ids
    stored = ("diff", "--paired", "never")
    code, out, err = _run(
        capsys, *stored, "--baseline", t0, "--current", slower, "--fail-on-regression"
    )
    assert code == 1 and _p50_regressed(out) and not err
    assert "model_version" in out and "bisect the model change" in out
    assert _run(capsys, *stored, "--baseline", t0, "--current", slower)[0] == 0  # report only
    code, out, _ = _run(
        capsys, *stored, "--baseline", slower, "--current", t1, "--fail-on-regression"
    )
    assert code == 0 and out.startswith("no regression") and "faster" in out
    code, out, _ = _run(capsys, *stored, "--json", "--baseline", t0, "--current", "latest")
    verdict = json.loads(out)
    assert code == 0 and verdict["regression"] and verdict["session_id"] == slower
    assert verdict["suspected_cause"]["kind"] == "model_version"
    assert verdict["recommendation"] and len(verdict["suspects"]) <= 3
    for argv, expected in (
        (["--baseline", "ghost"], "no baseline or session named 'ghost'"),
        (["--threshold", "0"], "threshold must be above 0"),
        (["--current", "nope"], "no session 'nope'"),
    ):
        code, _, err = _run(capsys, "diff", "--fail-on-regression", *argv)
        assert code == 2 and len(err.splitlines()) == 1 and expected in err and "Fix:" in err
    monkeypatch.setenv("AACO_TRACELAKE", str(tmp_path / "missing.duckdb"))
    code, _, err = _run(capsys, "diff")
    assert code == 2 and "no TraceLake" in err and not (tmp_path / "missing.duckdb").exists()


def test_diff_paired_decides_side_by_side(mlp_swap_session_ids, capsys):
    """--paired measures the baseline's version and this session's again, interleaved, and
    decides on that: the slower replacement fails the gate, one copy of the tiny MLP against
    another passes it. Without --paired (auto), a regression by the stored sessions is decided
    side by side too."""
    t0, t1, slower = mlp_swap_session_ids
    code, out, err = _run(
        capsys, "diff", "--baseline", t0, "--current", slower, "--paired", "--rounds", "6",
        "--fail-on-regression",
    )  # fmt: skip
    assert code == 1 and out.startswith("REGRESSION (critical): mlp p50 +")
    assert "side by side with session" in out.splitlines()[0]
    assert "12 interleaved rounds" in out and "in 2 processes" in out  # confirmed by a second
    assert "side by side (6 interleaved rounds): asked for" in err
    code, out, err = _run(capsys, "diff", "--baseline", t0, "--current", slower, "--rounds", "6")
    assert code == 0 and "side by side with session" in out.splitlines()[0]
    assert err.splitlines() == [
        "aaco: measuring mlp's baseline version and this session's side by side "
        "(6 interleaved rounds): the stored sessions say regression"
    ]
    code, out, _ = _run(
        capsys, "diff", "--json", "--baseline", t0, "--current", t1, "--paired", "--rounds", "6"
    )
    verdict = json.loads(out)
    assert code == 0 and verdict["paired"]["baseline_sha256"] == verdict["paired"]["current_sha256"]
    assert verdict["paired"]["decision"] != "regression" and not verdict["regression"]


def test_diff_falls_back_on_the_stored_sessions_only_where_paired_was_not_written(
    mlp_swap_session_ids, mlp_swap_home, capsys, tmp_path
):
    """The baseline's session folder is gone, so its version cannot be measured again: by
    default the stored sessions' verdict stands, said in one stderr line; --paired written
    (bare or auto) makes it the one-line error, exit 2."""
    paths, _ = mlp_swap_home
    t0, _, slower = mlp_swap_session_ids
    (folder,) = paths.sessions.glob(f"*/{t0}")
    shutil.move(folder, tmp_path / "moved")
    try:
        args = ("diff", "--baseline", t0, "--current", slower, "--fail-on-regression")
        code, out, err = _run(capsys, *args)
        assert code == 1 and _p50_regressed(out)
        assert "side by side" not in out
        measuring, fallback = err.splitlines()
        assert measuring.endswith("interleaved rounds): the stored sessions say regression")
        assert fallback == (
            "aaco: cannot measure side by side (none of the baseline's sessions has its "
            "session folder any more: its model version cannot be measured again): the stored "
            "sessions' verdict stands"
        )
        for paired in (["--paired"], ["--paired", "auto"], ["--paired", "always"]):
            code, out, err = _run(capsys, *args, *paired)
            assert code == 2 and not out and err.splitlines()[-1].startswith("aaco: error: ")
            assert "has its session folder any more" in err and "Fix:" in err
    finally:
        shutil.move(tmp_path / "moved", folder)


def test_baseline_create_list_show_pin(mlp_swap_session_ids, capsys):
    t0, t1, slower = mlp_swap_session_ids
    code, out, _ = _run(
        capsys, "baseline", "create", "release", "--sessions", t0, t1, "--note", "v1"
    )
    assert code == 0 and "created baseline release" in out and "mlp on cpu" in out
    assert t0 in out and t1 in out and "v1" in out and "(pinned)" not in out
    code, _, err = _run(capsys, "baseline", "create", "release", "--sessions", t0)
    assert code == 2 and "already exists" in err and "--replace" in err
    code, out, err = _run(capsys, "baseline", "create", "recent", "--model", "mlp", "--last", "2")
    assert code == 0 and "sessions (2)" in out and t1 in out and slower in out and not err
    code, out, err = _run(capsys, "baseline", "create", "most", "--model", "mlp", "--last", "50")
    assert code == 0 and "sessions (3)" in out  # made, and said in one line to rest on 3
    assert err.splitlines() == [
        "aaco: warning: baseline most rests on 3 sessions where the last 50 were asked for: "
        "its spread is a guess from few points (measure the model again, then --replace it)"
    ]
    code, _, err = _run(capsys, "baseline", "create", "x", "--sessions", t0, "--last", "2")
    assert code == 2 and "--target and --last" in err

    code, out, _ = _run(capsys, "baseline", "list")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and [r[0] for r in rows] == ["baseline", "release", "recent", "most"]
    assert rows[1][6] == rows[2][6] == "-"  # none pinned yet (p50 is two words)
    code, _, err = _run(capsys, "baseline", "list", "--model", "other")
    assert code == 2 and "no sessions of model 'other'" in err  # a model never measured

    code, out, _ = _run(capsys, "baseline", "pin", "release")
    assert code == 0 and out.strip() == "pinned baseline release for mlp on cpu"
    assert "release  (pinned)" in _run(capsys, "baseline", "show", "release")[1]
    code, _, err = _run(capsys, "baseline", "show", "ghost")
    assert code == 2 and "no baseline named 'ghost'" in err

    # Without --baseline, diff gates on the pinned baseline.
    code, out, _ = _run(capsys, "diff", "--paired", "never", "--current", slower, "--json")
    assert json.loads(out)["baseline"] | {"session_ids": None} == {
        "source": "pinned", "name": "release", "model_slug": "mlp", "target": "cpu",
        "session_ids": None, "n_sessions": 2,
    }  # fmt: skip


def test_sweep_records_runs_and_a_broken_model_fails_alone(aaco_paths, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    add_model(aaco_paths, "tiny_a", models.tiny_mlp())
    add_model(aaco_paths, "Tiny-B", models.tiny_mlp(seed=3))
    models.write_corrupt_model(aaco_paths.registry / "broken.onnx")

    code, _, err = _run(capsys, "sweep", "--models", "tiny_a,ghost")
    assert code == 2 and "no registry models ['ghost']" in err and "tiny_b" in err

    code, out, _ = _run(capsys, "sweep")
    lines = {line.split()[1]: line.split() for line in out.splitlines()[1:-1]}
    assert code == 1 and out.splitlines()[-1] == "3 runs: 1 failed, 0 regressed"
    assert lines["broken"][0] == "failed" and "not a valid ONNX model" in out
    assert lines["tiny_a"][:3] == ["ok", "tiny_a", "p50"]
    assert lines["tiny_b"][-3:-2] == ["insufficient_history"]

    sessions = TraceLake(aaco_paths.tracelake).query("SELECT model_slug FROM sessions ORDER BY 1")
    assert sessions["model_slug"].to_pylist() == ["tiny_a", "tiny_b"]
    with dg.DagsterInstance.from_config(str(aaco_paths.dagster_home)) as instance:
        runs = instance.get_runs()
        assert {r.job_name for r in runs} == {"measure_model"}
        status = {r.tags["dagster/partition"]: r.status for r in runs}
        assert status == {  # model x target partitions: this host measures on cpu
            "broken|cpu": dg.DagsterRunStatus.FAILURE,
            "tiny_a|cpu": dg.DagsterRunStatus.SUCCESS,
            "tiny_b|cpu": dg.DagsterRunStatus.SUCCESS,
        }
        assert {r.tags["aaco/trigger"] for r in runs} == {"sweep"}
        assert set(instance.get_dynamic_partitions("models")) == {"broken", "tiny_a", "tiny_b"}
        assert instance.get_dynamic_partitions("targets") == ["cpu"]

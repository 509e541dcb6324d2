"""The command line in a newcomer's first hour (issue 27): `aaco run`'s progress is full only
when the run is over, and the run records the target this host measures on and names the lake
it wrote to; `aaco report` prints to the terminal; both export formats hold the same events; a
misspelled model name gets "did you mean"; AACO_HOME is one place per user, not the current
folder."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.cli.common import lake_where
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.report.session_files import REPORTS, session_files
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.tracelake import ducklake
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SHARED, add_model, home_paths

RPD = SHARED / "samples" / "profilers" / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"
BAR = re.compile(r"^  \[([#-]{20})\]\s+[\d.]+s  (.*)$")


class FirstRun(NamedTuple):
    """`aaco run --model tiny_mlp` under AACO_TARGET=gpu0 in a fresh AACO_HOME: its paths,
    exit code, stdout and stderr."""

    paths: AacoPaths
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> FirstRun:
    paths = home_paths(tmp_path_factory.mktemp("first_hour") / "aaco")
    add_model(paths, "tiny_mlp", models.tiny_mlp())
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AACO_HOME", str(paths.home))
        env.setenv("AACO_TARGET", "gpu0")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "--model", "tiny_mlp", "--iterations", "5", "--no-profile"])
    return FirstRun(paths, code, out.getvalue(), err.getvalue())


@pytest.fixture
def first_hour_home(first_run, monkeypatch) -> FirstRun:
    """first_run, with AACO_HOME pointing at it."""
    monkeypatch.setenv("AACO_HOME", str(first_run.paths.home))
    return first_run


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- aaco run: progress, target, where the session went ------------------------------------------


def test_the_progress_bar_is_full_and_says_done_only_when_the_run_is_over(first_run):
    assert first_run.code == 0, first_run.err
    lines = [BAR.match(line) for line in first_run.err.splitlines()]
    progress = [(m[1].count("#"), m[2]) for m in lines if m]
    assert progress and progress[-1] == (20, "done")  # the last line, and the only full one
    assert all(filled < 20 for filled, _ in progress[:-1]), progress
    assert [message for _, message in progress].count("done") == 1
    analysing = next(i for i, (_, m) in enumerate(progress) if m.startswith("analysing"))
    assert analysing < len(progress) - 1  # the analysis came before the bar filled up


def test_run_publishes_the_report_and_trace_a_dagster_run_would(first_run):
    """`aaco run` ends with the publish stage, as performance_drift does: the report and the
    trace under AACO_HOME/reports, their paths printed; --no-publish skips them."""
    [session] = (
        TraceLake(first_run.paths.tracelake)
        .query("SELECT session_id FROM sessions")["session_id"]
        .to_pylist()
    )
    files = session_files(first_run.paths.home, session)
    assert f"  report        {files.report}" in first_run.out.splitlines()
    assert f"  trace         {files.trace}" in first_run.out.splitlines()
    assert session in files.report.read_text()
    assert json.loads(files.trace.read_text())  # a whole trace, not a partial one
    assert "publishing" in first_run.err


def test_ingest_with_no_publish_writes_no_report(aaco_paths, monkeypatch, capsys):
    """--no-publish skips the publish stage: no report folder, no publishing step or path."""
    monkeypatch.setenv("AACO_HOME", str(aaco_paths.home))
    trace = SHARED / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
    code, out, err = _run(capsys, "ingest", str(trace), "--no-publish")
    assert code == 0, err
    assert "publishing" not in err and not (aaco_paths.home / REPORTS).exists()
    labels = [line.split()[0] for line in out.splitlines()]
    assert "report" not in labels and "trace" not in labels and labels[-1] == "next"


def test_run_records_the_target_this_host_measures_on(first_run):
    """README: a session's target is the device this host measures on, its AACO_TARGET; the
    Dagster runs record it so, and `aaco run` records it the same."""
    lake = TraceLake(first_run.paths.tracelake)
    assert lake.query("SELECT target FROM session_records")["target"].to_pylist() == ["gpu0"]
    [session] = lake.query("SELECT session_id FROM sessions")["session_id"].to_pylist()
    assert first_run.out.splitlines()[0] == f"session {session} -> {first_run.paths.tracelake}"


def test_the_shared_lake_is_named_by_its_masked_description(aaco_paths, monkeypatch):
    """Against a shared lake the sessions go to DuckLake, not to AACO_HOME's DuckDB file: that
    is what is named, without the catalog's password."""
    assert lake_where(aaco_paths) == str(aaco_paths.tracelake)
    monkeypatch.setenv(ducklake.CATALOG_ENV, "dbname=lake host=db.example password=s3cret")
    monkeypatch.setenv(ducklake.DATA_ENV, "/mnt/lake")
    where = lake_where(aaco_paths)
    assert (
        where.startswith("the shared DuckLake at /mnt/lake/ (catalog: ") and "db.example" in where
    )
    assert "s3cret" not in where and "tracelake.duckdb" not in where


def test_run_against_a_shared_lake_prints_that_lake(aaco_paths, monkeypatch, capsys):
    """The DuckLake environment only (make test runs it there): a real catalog."""
    pytest.importorskip("duckdb_extension_ducklake", reason="the DuckLake environment")
    from tests.services import postgres_server

    add_model(aaco_paths, "tiny", models.tiny_mlp())
    with postgres_server() as url:
        server = urlsplit(url)
        catalog = (
            f"dbname={server.path[1:]} host={server.hostname} port={server.port} "
            f"user={server.username}"
        )
        monkeypatch.setenv(ducklake.CATALOG_ENV, catalog)
        monkeypatch.setenv(ducklake.DATA_ENV, str(aaco_paths.home / "shared"))
        code, out, err = _run(capsys, "run", "--model", "tiny", "--iterations", "3", "--no-profile")
    assert code == 0, err
    first = out.splitlines()[0]
    assert "the shared DuckLake at" in first and str(aaco_paths.home / "shared") in first
    assert "tracelake.duckdb" not in out and not aaco_paths.tracelake.exists()


# --- aaco report to the terminal ---------------------------------------------------------------


def test_report_goes_to_the_terminal_without_output(first_hour_home, tmp_path, monkeypatch, capsys):
    [session] = (
        TraceLake(first_hour_home.paths.tracelake)
        .query("SELECT session_id FROM sessions")["session_id"]
        .to_pylist()
    )
    code, out, err = _run(capsys, "report", "--format", "md")
    assert code == 0 and not err and session in out and out.lstrip().startswith("#")
    code, out, _ = _run(capsys, "report", "--format", "json")
    assert code == 0 and json.loads(out)["session"]["session_id"] == session
    code, out, _ = _run(capsys, "report", "--format", "html", "--output", "-")
    assert code == 0 and out.lstrip().lower().startswith("<!doctype html")
    # HTML, which a terminal cannot show, goes to the session's file under AACO_HOME/reports,
    # where its run published it, never into the current folder
    monkeypatch.chdir(tmp_path)
    written = session_files(first_hour_home.paths.home, session).report
    written.unlink()
    code, out, _ = _run(capsys, "report")
    assert code == 0 and written.is_file() and str(written) in out
    assert written.read_text().lower().startswith("<!doctype html")
    assert list(tmp_path.iterdir()) == []


# --- aaco export: one count of events in both formats ------------------------------------------


def _exported(capsys, tmp_path: Path, session: str) -> dict[str, int]:
    """{format: the event count `aaco export` prints}, after checking the JSON file's events
    (metadata records aside) number as many."""
    counts = {}
    for fmt, name in (("perfetto", "trace.json"), ("perfetto-proto", "trace.pftrace")):
        output = tmp_path / name
        code, out, err = _run(
            capsys, "export", "--session", session, "--format", fmt, "--output", str(output)
        )
        assert code == 0, err
        counts[fmt] = int(re.match(r"wrote (\d+) events to ", out)[1])
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert counts["perfetto"] == sum(event["ph"] != "M" for event in events)
    return counts


def test_both_export_formats_count_the_same_events_of_a_measured_session(
    first_hour_home, tmp_path, capsys
):
    counts = _exported(capsys, tmp_path, "latest")
    assert counts["perfetto"] == counts["perfetto-proto"] > 0


def test_both_export_formats_count_the_same_events_of_a_sample_trace(aaco_paths, tmp_path, capsys):
    """The RPD sample: kernels that cross on a queue (the protobuf's extra lanes) and telemetry
    counters."""
    ingest_trace(RPD, aaco_paths, name="vllm")
    counts = _exported(capsys, tmp_path, "latest")
    assert counts["perfetto"] == counts["perfetto-proto"] > 8948  # every kernel, and more


# --- did you mean ------------------------------------------------------------------------------


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aaco: error: ") and "Fix:" in lines[0], err
    return lines[0]


def test_a_misspelled_model_name_gets_did_you_mean(aaco_paths, capsys):
    add_model(aaco_paths, "bert_encoder", models.tiny_mlp())
    add_model(aaco_paths, "resnet_cnn", models.tiny_mlp(seed=1))
    code, _, err = _run(capsys, "run", "--model", "bert_encodr")
    assert code == 2 and "did you mean 'bert_encoder'?" in _one_error(err)
    code, _, err = _run(capsys, "run", "--model", "Bert-Encoder.onnx")  # not a file here
    assert code == 2 and "did you mean 'bert_encoder'?" in _one_error(err)
    code, _, err = _run(capsys, "run", "--model", "zzz")  # nothing close: what to do instead
    line = _one_error(err)
    assert code == 2 and "did you mean" not in line and "aaco registry list" in line
    typo = str(aaco_paths.registry / "resnet_cn.onnx")  # a path: the file beside it
    code, _, err = _run(capsys, "run", "--model", typo)
    line = _one_error(err)
    assert code == 2 and "model file not found" in line
    assert f"did you mean '{aaco_paths.registry / 'resnet_cnn.onnx'}'?" in line
    assert not aaco_paths.tracelake.exists()  # refused before anything was measured


def test_a_misspelled_model_of_a_baseline_gets_did_you_mean(first_hour_home, capsys):
    for command in (["create", "b", "--model", "tiny_mpl"], ["list", "--model", "tiny_mpl"]):
        code, out, err = _run(capsys, "baseline", *command)
        line = _one_error(err)
        assert code == 2 and not out and "'tiny_mpl'" in line and "did you mean 'tiny_mlp'?" in line
    assert _run(capsys, "baseline", "list", "--model", "tiny_mlp")[1].startswith("no baselines")


# --- AACO_HOME: one place per user -------------------------------------------------------------


def test_aaco_home_is_one_place_per_user_whatever_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("AACO_HOME", raising=False)
    home = tmp_path / "user"
    env = {"HOME": str(home)}
    homes = set()
    for folder in (tmp_path / "a", tmp_path / "b"):
        folder.mkdir()
        monkeypatch.chdir(folder)
        homes.add(AacoPaths.from_env(env).home)
    assert homes == {home / ".aaco"}
    assert AacoPaths.from_env({**env, "XDG_DATA_HOME": str(tmp_path / "xdg")}).home == (
        tmp_path / "xdg" / "aaco"
    )
    assert AacoPaths.from_env({**env, "XDG_DATA_HOME": "relative"}).home == home / ".aaco"
    explicit = AacoPaths.from_env({**env, "AACO_HOME": str(tmp_path / "mine")})
    assert explicit.home == tmp_path / "mine" and explicit.tracelake.parent == tmp_path / "mine"


def test_an_old_aaco_folder_here_is_said_once_not_silently_left(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("AACO_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    project = tmp_path / "project"
    (project / ".aaco" / "registry").mkdir(parents=True)
    monkeypatch.chdir(project)
    code, out, err = _run(capsys, "registry", "list")
    assert code == 0 and str(tmp_path / "user" / ".aaco" / "registry") in out
    [line] = err.splitlines()
    assert line.startswith("aaco: note: ") and str(project / ".aaco") in line
    assert f"AACO_HOME={project / '.aaco'}" in line  # how to keep using it
    monkeypatch.setenv("AACO_HOME", str(project / ".aaco"))  # chosen: nothing to say
    code, out, err = _run(capsys, "registry", "list")
    assert code == 0 and not err and str(project / ".aaco" / "registry") in out
    monkeypatch.delenv("AACO_HOME", raising=False)
    (tmp_path / "user" / ".aaco").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "user")  # where the default is: no other one to mention
    assert _run(capsys, "registry", "list")[2] == ""


def test_the_suite_never_uses_the_real_aaco_home(tmp_path_factory):
    """Every test runs under a temporary AACO_HOME (tests/conftest.py), whatever the shell set
    and wherever pytest was started: never ~/.aaco, never one in the current folder."""
    assert AacoPaths.from_env().home.is_relative_to(tmp_path_factory.getbasetemp())

"""Every command that reports has `--json` (issue 45): each one's output is one JSON document,
parsed here, with the fields a script reads checked against the lake it came from; `aaco
sessions` lists the sessions; `aaco run` and `aaco ingest` name their files and the command
to run next; reports and traces go to AACO_HOME/reports by default."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.report.session_files import session_files
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SHARED, add_model, home_paths
from tests.ui_support import free_port

CSV_TRACE = SHARED / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_kernel_trace.csv"


class Printed(NamedTuple):
    code: int
    out: str
    err: str


def _main(*argv: str) -> Printed:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return Printed(code, out.getvalue(), err.getvalue())


class LakeHome(NamedTuple):
    """Two `aaco run --json` of tiny_mlp and one `aaco ingest --json` of a rocprofv3 csv, in
    one AACO_HOME: what each printed."""

    paths: AacoPaths
    first: Printed
    second: Printed
    ingest: Printed


@pytest.fixture(scope="module")
def lake_home(tmp_path_factory, host_envelopes) -> LakeHome:
    from aaco_pipelines.analysis.envelope import choice as envelope_choice
    from aaco_pipelines.analysis.envelope import measure as envelope

    def once(target: str = "cpu", providers=None, **kwargs):  # conftest's, for a module
        key = (target, tuple(providers or ()))
        if key not in host_envelopes:
            host_envelopes[key] = envelope.measure_envelope(target, providers, **kwargs)
        return host_envelopes[key]

    paths = home_paths(tmp_path_factory.mktemp("cli_json") / "aaco")
    add_model(paths, "tiny_mlp", models.tiny_mlp())
    run = ("run", "--model", "tiny_mlp", "--iterations", "5", "--no-profile", "--json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AACO_HOME", str(paths.home))
        patch.setattr(envelope_choice, "measure_envelope", once)
        first, second = _main(*run), _main(*run)
        ingested = _main("ingest", str(CSV_TRACE), "--name", "decode_attn", "--json")
    return LakeHome(paths, first, second, ingested)


@pytest.fixture
def home(lake_home, monkeypatch) -> LakeHome:
    monkeypatch.setenv("AACO_HOME", str(lake_home.paths.home))
    return lake_home


def _lake_sessions(paths: AacoPaths) -> list[dict]:
    return (
        TraceLake(paths.tracelake)
        .query("SELECT session_id, model_slug, latency_p50_ns FROM sessions ORDER BY started_at")
        .to_pylist()
    )


# --- aaco run / ingest --json ------------------------------------------------------------------


def test_run_json_is_the_sessions_figures_and_files(home):
    first, second = (json.loads(p.out) for p in (home.first, home.second))
    assert home.first.code == home.second.code == 0, home.first.err
    stored = {row["session_id"]: row for row in _lake_sessions(home.paths)}
    assert first["session_id"] in stored and second["session_id"] in stored
    row = stored[first["session_id"]]
    assert first["model"] == "tiny_mlp" and first["measured_iterations"] == 5
    assert first["latency_ms"]["p50"] == pytest.approx(row["latency_p50_ns"] / 1e6)
    assert first["providers"] == ["CPUExecutionProvider"]
    assert first["bottleneck"]["class"] and 0 < first["bottleneck"]["confidence"] <= 1
    assert first["measurement"]["verdict"] in ("ok", "suspect", "unknown")
    assert isinstance(first["measurement"]["reasons"], list)  # decoded, not JSON text
    assert first["top_op"]["name"] and first["memory"]["peak_rss_mib"] > 0
    assert first["lake"] == str(home.paths.tracelake)
    # the files a Dagster run publishes, where it publishes them
    files = session_files(home.paths.home, first["session_id"])
    assert first["report"] == str(files.report) and first["trace"] == str(files.trace)
    assert first["session_id"] in files.report.read_text()
    assert json.loads(files.trace.read_text())["traceEvents"]
    # what to run next: the report; the gate only once there is an earlier session
    sid = first["session_id"]
    assert first["next"] == [f"aaco report --session {sid} --format md"]
    assert second["next"][1] == f"aaco diff --current {second['session_id']}"


def test_run_says_what_it_does_first_on_stderr(home):
    lines = home.first.err.splitlines()
    assert lines[0].startswith("aaco run: measuring tiny_mlp (") and lines[0].endswith(" ...")
    assert str(home.paths.registry / "tiny_mlp.onnx") in lines[0]
    assert "analysing" in home.first.err  # the progress, on stderr, with --json too


def test_run_text_ends_with_its_files_and_the_next_commands(home):
    printed = _main("run", "--model", "tiny_mlp", "--iterations", "3", "--no-profile")
    assert printed.code == 0, printed.err
    sid = printed.out.splitlines()[0].split()[1]
    tail = printed.out.splitlines()[-4:]
    files = session_files(home.paths.home, sid)
    assert [line.split(None, 1) for line in tail[:3]] == [
        ["report", str(files.report)],
        ["trace", str(files.trace)],
        ["next", f"aaco report --session {sid} --format md"],
    ]
    diff = f"aaco diff --current {sid}"  # aligned under the first command
    assert tail[3].strip() == diff and tail[3].index(diff) == tail[2].index("aaco report")
    # and the commands it names work
    assert _main("diff", "--current", sid, "--paired", "never", "--json").code in (0, 1)


def test_ingest_json_is_the_session_its_class_and_files(home):
    printed = json.loads(home.ingest.out)
    assert home.ingest.code == 0, home.ingest.err
    assert printed["trace_source"] == "rocprofv3_csv"
    stored = {row["session_id"]: row for row in _lake_sessions(home.paths)}
    assert stored[printed["session_id"]]["model_slug"] == "decode_attn"
    assert "bottleneck" in printed and printed["verdicts"]["latency_p50_ns"]
    assert Path(printed["report"]).is_file() and Path(printed["trace"]).is_file()
    assert printed["next"] == [f"aaco report --session {printed['session_id']} --format md"]
    assert home.ingest.err.splitlines()[0] == f"aaco ingest: reading {CSV_TRACE} ..."


# --- aaco sessions -----------------------------------------------------------------------------


def test_sessions_json_lists_every_session_newest_first(home):
    printed = _main("sessions", "--json")
    listed = json.loads(printed.out)
    stored = _lake_sessions(home.paths)
    assert printed.code == 0 and listed["total"] == len(stored) >= 3
    assert [s["session_id"] for s in listed["sessions"]] == [
        s["session_id"] for s in reversed(stored)
    ]
    ingested = json.loads(home.ingest.out)["session_id"]
    row = next(s for s in listed["sessions"] if s["session_id"] == ingested)
    assert row["trace_source"] == "rocprofv3_csv" and row["model_slug"] == "decode_attn"
    assert row["decided"] is json.loads(home.ingest.out)["decided"]  # as ingest said
    run = next(s for s in listed["sessions"] if s["model_slug"] == "tiny_mlp")
    assert run["measurement"] in ("ok", "suspect") and run["bottleneck"] and run["latency_p50_ns"]


def test_sessions_of_one_model_and_a_limit(home):
    of_model = json.loads(_main("sessions", "--model", "tiny_mlp", "--json").out)
    assert of_model["model"] == "tiny_mlp" and of_model["total"] >= 2
    assert {s["model_slug"] for s in of_model["sessions"]} == {"tiny_mlp"}
    one = json.loads(_main("sessions", "--model", "tiny_mlp", "--limit", "1", "--json").out)
    assert one["total"] == of_model["total"] and len(one["sessions"]) == 1
    assert one["sessions"][0] == of_model["sessions"][0]  # the newest


def test_sessions_text_is_a_table_of_the_newest(home):
    printed = _main("sessions", "--model", "tiny_mlp", "--limit", "1")
    lines = printed.out.splitlines()
    newest = json.loads(_main("sessions", "--model", "tiny_mlp", "--json").out)["sessions"][0]
    assert printed.code == 0 and lines[0].endswith(
        f"of tiny_mlp in {home.paths.tracelake}, newest first"
    )
    assert lines[1].split()[:3] == ["session", "started", "model"]
    assert lines[2].split()[0] == newest["session_id"] and " ms " in lines[2]
    assert lines[-1].startswith("  ... and ") and "--limit 0" in lines[-1]


def test_sessions_without_a_lake_and_a_misspelled_model(aaco_paths):
    printed = _main("sessions", "--json")
    assert printed.code == 0 and json.loads(printed.out)["sessions"] == []
    assert _main("sessions").out.startswith("no sessions in ")


def test_a_misspelled_model_of_sessions_gets_did_you_mean(home):
    printed = _main("sessions", "--model", "tiny_mpl")
    assert printed.code == 2 and not printed.out and "did you mean 'tiny_mlp'?" in printed.err


# --- registry, baseline, doctor, alert --json ---------------------------------------------------


def test_registry_list_json_has_each_model_and_its_history(home):
    broken = add_model(home.paths, "broken", models.tiny_mlp(seed=2))
    sidecar = broken.with_suffix(".yaml")
    sidecar.write_text("measured_iterations: -3\n")  # a sidecar that cannot be measured by
    try:
        listed = json.loads(_main("registry", "list", "--json").out)
    finally:
        broken.unlink()
        sidecar.unlink()
    by_model = {m["model"]: m for m in listed["models"]}
    tiny = by_model["tiny_mlp"]
    assert listed["registry"] == str(home.paths.registry) and listed["history_known"]
    assert tiny["measurable"] and tiny["versions"] == 1 and tiny["last_p50_ms"] > 0
    assert tiny["path"] == str(home.paths.registry / "tiny_mlp.onnx") and len(tiny["sha256"]) == 64
    assert not by_model["broken"]["measurable"] and "broken.yaml" in by_model["broken"]["problem"]


def test_registry_list_json_before_any_session(aaco_paths):
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    listed = json.loads(_main("registry", "list", "--json").out)
    assert listed["history_known"] and "no TraceLake" in listed["note"]
    assert [(m["model"], m["versions"], m["last_verdict"]) for m in listed["models"]] == [
        ("tiny", 0, None)
    ]


def test_baseline_list_json_is_every_field_of_each_baseline(home):
    runs = [json.loads(p.out)["session_id"] for p in (home.first, home.second)]
    assert _main("baseline", "create", "json-check", "--sessions", *runs, "--replace").code == 0
    listed = json.loads(_main("baseline", "list", "--model", "tiny_mlp", "--json").out)
    [baseline] = [b for b in listed if b["name"] == "json-check"]
    assert sorted(baseline["session_ids"]) == sorted(runs) and baseline["n_sessions"] == 2
    assert baseline["model_slug"] == "tiny_mlp" and baseline["latency_p50_ns"] > 0
    assert json.loads(_main("baseline", "list", "--model", "decode_attn", "--json").out) == []


def test_doctor_json_is_every_check(home):
    checks = json.loads(_main("doctor", "--json").out)
    by_name = {c["name"]: c for c in checks}
    assert {"Python", "ONNX Runtime", "TraceLake", "Model registry"} <= set(by_name)
    assert all(c["status"] in ("OK", "missing", "warning", "problem") for c in checks)
    assert by_name["TraceLake"]["status"] == "OK"
    assert str(home.paths.tracelake) in by_name["TraceLake"]["detail"]


def test_alert_list_json_is_a_list(home):
    alerts = json.loads(_main("alert", "list", "--json").out)
    assert isinstance(alerts, list)
    assert all({"alert_id", "state", "model_slug"} <= set(a) for a in alerts)


# --- reports and traces go to AACO_HOME/reports by default --------------------------------------


def test_report_and_export_default_to_the_reports_folder(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # never the current folder
    sid = json.loads(home.first.out)["session_id"]
    files = session_files(home.paths.home, sid)
    files.report.unlink()
    printed = _main("report", "--session", sid)
    assert printed.code == 0 and str(files.report) in printed.out
    assert files.report.read_text().lower().startswith("<!doctype html")
    printed = _main("export", "--session", sid)  # no --output needed
    assert printed.code == 0 and f" to {files.trace} " in printed.out
    proto = files.trace.with_suffix("").with_suffix(".perfetto-trace")
    printed = _main("export", "--session", sid, "--format", "perfetto-proto")
    assert printed.code == 0 and proto.stat().st_size > 0 and str(proto) in printed.out
    assert list(tmp_path.iterdir()) == []


# --- aaco sweep --json -------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_sweep_json_is_each_models_run(aaco_paths, monkeypatch):
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    monkeypatch.setenv("DAGSTER_HOME", str(aaco_paths.dagster_home))
    printed = _main("sweep", "--json")
    swept = json.loads(printed.out)
    assert printed.code == 0, printed.err
    [run] = swept["runs"]
    assert (run["slug"], run["status"], run["error"]) == ("tiny", "ok", None)
    stored = _lake_sessions(aaco_paths)
    assert [s["session_id"] for s in stored] == [run["session_id"]]
    assert run["latency_p50_ms"] == pytest.approx(stored[0]["latency_p50_ns"] / 1e6, abs=1e-4)
    assert swept["failed"] == swept["regressed"] == [] and swept["dagster_home"]
    assert "  ok " in printed.err  # the per-model line, kept off stdout


# --- aaco detector --json ----------------------------------------------------------------------


def test_detector_json_is_the_arl_at_each_shift_and_the_designed_limit():
    arl = json.loads(_main("detector", "arl", "--chart", "cusum", "--h", "5", "--json").out)
    assert arl["options"] == {"sides": 2, "k": 0.5, "h": 5.0}
    assert [a["shift"] for a in arl["arl"]] == [0.0, 1.0]
    assert arl["arl"][0]["arl"] == pytest.approx(465, rel=0.005)  # Montgomery's table
    text = _main("detector", "arl", "--chart", "cusum", "--h", "5").out.splitlines()
    assert float(text[-1].split()[1]) == pytest.approx(arl["arl"][1]["arl"], abs=0.01)
    simulated = json.loads(
        _main(
            "detector",
            "arl",
            "--chart",
            "ewma",
            "--L",
            "2.7",
            "--limits",
            "exact",
            "--runs",
            "200",
            "--shift",
            "1",
            "--json",
        ).out  # fmt: skip
    )["arl"][0]["arl"]
    assert simulated["runs"] == 200 and 0 < simulated["se"] < simulated["mean"]
    design = json.loads(
        _main("detector", "design", "--chart", "cusum", "--target-arl", "370", "--json").out
    )
    assert design["in_control_arl"] == pytest.approx(370, rel=1e-3) and 4 < design["h"] < 5
    assert design["arl_at_shift_1"] < 370


# --- aaco open ---------------------------------------------------------------------------------


def _recording_browser(tmp_path: Path, fetch: bool) -> tuple[dict, Path]:
    """A $BROWSER that writes down the URL it is given (and, like ui.perfetto.dev, fetches the
    trace that URL names): the environment to run `aaco open` with, and the record."""
    record = tmp_path / "opened.txt"
    script = tmp_path / "browser.py"
    script.write_text(
        "import sys, urllib.parse, urllib.request\n"
        f"open({str(record)!r}, 'a').write(sys.argv[1] + '\\n')\n"
        + (
            "url = sys.argv[1].split('?url=', 1)[1]\n"
            f"open({str(record)!r}, 'a').write(urllib.request.urlopen(url).read()[:20].decode())\n"
            if fetch
            else ""
        )
    )
    browser = f"{sys.executable} {script} %s"
    return {**os.environ, "BROWSER": browser, "AACO_REPORTS_PORT": str(free_port())}, record


def test_open_shows_the_report_and_serves_the_trace_until_perfetto_fetched_it(home, tmp_path):
    """`aaco open` hands the browser the report's file; `--trace` serves the trace on loopback
    and hands it ui.perfetto.dev's link to it, returning once the trace was fetched."""
    aaco = str(Path(sys.executable).with_name("aaco"))
    session = json.loads(home.second.out)["session_id"]
    env, record = _recording_browser(tmp_path, fetch=False)
    done = subprocess.run([aaco, "open", session], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = session_files(home.paths.home, session).report
    assert record.read_text().splitlines() == [report.as_uri()]
    (tmp_path / "trace").mkdir()
    env, record = _recording_browser(tmp_path / "trace", fetch=True)
    done = subprocess.run(
        [aaco, "open", session, "--trace", "--wait", "60"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    link, fetched = record.read_text().splitlines()
    port = env["AACO_REPORTS_PORT"]
    assert link == (
        f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/{session}.perfetto.json"
    )
    assert fetched.startswith("{") and "opened" in done.stdout

"""What a newcomer meets in the Dagster UI in the first hour, checked without a browser: no
sign-up dialog, no Celery tag on a single host, a busy port refused before anything starts,
asset pages whose numbers Dagster does not chart across unrelated models, whose plots are
named, and which point at the session's HTML report and Perfetto trace. Neutral evidence reads
neutral. The browser's view is tests/dagster/test_ui_e2e.py's."""

from __future__ import annotations

import json
import os
import socket
import time

import dagster as dg
import pytest
import yaml
from dagster._core.launcher import LaunchRunContext
from dagster_celery.launcher import CeleryRunLauncher

from aaco_pipelines.analysis.bottleneck.classification import judge
from aaco_pipelines.assets import (
    MODEL_ASSETS,
    model_target_key,
    models_partitions,
    targets_partitions,
)
from aaco_pipelines.cli import main
from aaco_pipelines.instance import TEMPLATE, event_log_settings, prepare_dagster_home
from aaco_pipelines.instance.launcher import DeviceQueueRunLauncher
from aaco_pipelines.report.markdown_report import render_markdown
from aaco_pipelines.report.session_files import session_files
from aaco_pipelines.resources import (
    BenchmarkRunnerResource,
    ModelRegistryResource,
    RecordIOManager,
    TraceLakeResource,
)
from aaco_pipelines.sensors.jobs import run_tags
from aaco_pipelines.stages import publish as publish_module
from tests import models
from tests.helpers import add_model
from tests.ui_support import MODEL_ASSET_KEYS, PER_SESSION_KEYS

QUEUE_TAG = "dagster-celery/queue"
PLOTS = {
    "kernel_attribution": "op_breakdown_plot",
    "bottleneck_report": "roofline_plot",
    "performance_drift": "drift_latency_p50_ns_plot",
}
REPORT, TRACE = "html_report (all plots)", "perfetto_trace (ui.perfetto.dev)"


# --- the sign-up dialog ----------------------------------------------------------------------


def test_a_new_dagster_home_shows_no_sign_up_dialog(tmp_path):
    home = prepare_dagster_home(tmp_path / "dagster")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.nux_enabled is False


def test_a_dagster_home_aaco_wrote_before_gets_the_dialog_turned_off_once(tmp_path):
    """Its comments and edits are kept; a home whose dagster.yaml says anything about `nux`, or
    is not AACO's, is the user's choice."""
    old = tmp_path / "old"
    old.mkdir()
    template = TEMPLATE.read_text().replace("nux:\n  enabled: false\n", "")
    edited = template.replace("max_concurrent_runs: 4", "max_concurrent_runs: 2  # mine")
    (old / "dagster.yaml").write_text(edited.rstrip("\n"))  # and no final newline
    prepare_dagster_home(old)
    prepare_dagster_home(old)
    text = (old / "dagster.yaml").read_text()
    assert text.startswith(edited.rstrip("\n")) and text.count("nux:") == 1
    assert yaml.safe_load(text)["nux"] == {"enabled": False}
    with dg.DagsterInstance.from_config(str(old)) as instance:
        assert instance.nux_enabled is False

    for name, content in {
        "chosen": template + "nux:\n  enabled: true\n",
        "users": "telemetry:\n  enabled: false\n",
    }.items():
        home = tmp_path / name
        home.mkdir()
        (home / "dagster.yaml").write_text(content)
        prepare_dagster_home(home)
        assert (home / "dagster.yaml").read_text() == content, name


# --- the Celery queue tag --------------------------------------------------------------------


def test_only_a_routed_instance_tags_runs_with_a_celery_queue(monkeypatch):
    """A single host's runs carry no `dagster-celery/queue` tag (a newcomer took it for Celery
    having to run); the routing launcher tags each run with its device's queue as it sends it."""
    assert QUEUE_TAG not in run_tags("model_registry", "gpu1")
    assert run_tags("model_registry", "gpu1")["aaco/device"] == "gpu1"

    sent = []
    monkeypatch.setattr(CeleryRunLauncher, "launch_run", lambda self, context: sent.append(context))
    with dg.instance_for_test() as instance:
        launcher = DeviceQueueRunLauncher(
            default_queue="cpu", broker="redis://127.0.0.1:1/0", backend="redis://127.0.0.1:1/0"
        )
        launcher.register_instance(instance)
        run = instance.add_run(
            dg.DagsterRun(
                job_name="measure_model",
                tags={**run_tags("ui", "gpu3"), "dagster/partition/target": "gpu3"},
            )
        )
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
        assert sent[0].dagster_run.tags[QUEUE_TAG] == "gpu3"
        assert instance.get_run_by_id(run.run_id).tags[QUEUE_TAG] == "gpu3"


# --- a busy port -----------------------------------------------------------------------------


@pytest.fixture
def no_exec(monkeypatch):
    """`aaco ui` becomes Dagster with os.execve: here that would replace the test process."""
    started = []

    def refuse(path, argv, env):
        started.append(argv)
        raise AssertionError(f"Dagster was started: {argv}")

    monkeypatch.setattr(os, "execve", refuse)
    return started


def test_a_busy_port_is_one_line_naming_it_and_the_fix_before_anything_starts(
    aaco_paths, monkeypatch, capsys, no_exec
):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["ui", "--port", str(port)]) == 2
        err = capsys.readouterr().err.strip()
        monkeypatch.setenv("AACO_UI_PORT", str(port))  # chosen by the variable: the same
        assert main(["ui"]) == 2
        assert capsys.readouterr().err.strip() == err
    assert len(err.splitlines()) == 1 and f"port {port} on 127.0.0.1 is already in use" in err
    assert f"--port {port + 1}" in err and f"AACO_UI_PORT={port + 1}" in err
    assert not no_exec
    assert not aaco_paths.dagster_home.exists()  # no instance prepared, no zoo built
    assert not any(aaco_paths.registry.iterdir())


def test_a_port_that_is_no_number_is_one_line(aaco_paths, monkeypatch, capsys, no_exec):
    monkeypatch.setenv("AACO_UI_PORT", "30o0")
    assert main(["ui"]) == 2
    err = capsys.readouterr().err
    assert "AACO_UI_PORT must be a TCP port number" in err and "'30o0'" in err
    assert not no_exec


# --- evidence that favours nothing -----------------------------------------------------------


def test_evidence_that_every_class_but_one_explains_alike_reads_neutral():
    """No clock drop is as likely launch-, cpu-, memory- or compute-bound: it was said to
    favour launch-bound (the first of the tied classes)."""
    assert judge("clock_drop", 0.0).favours == "neutral (against throttled)"
    assert judge("runqueue_wait_ratio", 0.0).favours == "neutral (against cpu-bound)"
    assert judge("launch_tax", 0.5).favours == "launch-bound"  # a real lead stays named
    assert judge("clock_drop", None).favours is None


# --- the asset pages -------------------------------------------------------------------------


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(overrides=event_log_settings(tmp_path / "dagster")) as instance:
        yield instance


def _metadata(instance, key: str) -> dict:
    event = instance.get_latest_materialization_event(dg.AssetKey(key))
    return event.asset_materialization.metadata


def test_session_pages_chart_nothing_name_their_plots_and_point_at_report_and_trace(
    instance, aaco_paths, monkeypatch
):
    written = []
    write = publish_module.publish

    def timed(*args):
        started = time.perf_counter()
        files = write(*args)
        written.append(time.perf_counter() - started)
        return files

    monkeypatch.setattr("aaco_pipelines.assets.drift.publish", timed, raising=False)
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    instance.add_dynamic_partitions(models_partitions.name, ["tiny"])
    instance.add_dynamic_partitions(targets_partitions.name, ["cpu"])
    paths = aaco_paths
    resources = {
        "registry": ModelRegistryResource(
            home=str(paths.home), registry=str(paths.registry), tracelake=str(paths.tracelake)
        ),
        "tracelake": TraceLakeResource(database=str(paths.tracelake)),
        "runner": BenchmarkRunnerResource(timeout_s=120, memory_limit_mb=4096),
        "io_manager": RecordIOManager(),
    }
    started = time.perf_counter()
    result = dg.materialize(
        MODEL_ASSETS,
        partition_key=model_target_key("tiny", "cpu"),
        instance=instance,
        resources=resources,
    )
    run_s = time.perf_counter() - started
    assert result.success
    print(f"\nreport and trace: {sum(written):.2f} s of a {run_s:.1f} s run")

    numeric = (dg.IntMetadataValue, dg.FloatMetadataValue)
    for key in MODEL_ASSET_KEYS:
        meta = _metadata(instance, key)
        charted = [label for label, value in meta.items() if isinstance(value, numeric)]
        assert not charted, (key, charted)  # Dagster would join them across partitions
    session_id = _metadata(instance, "performance_drift")["session_id"].value
    files = session_files(paths.home, session_id)
    for key in PER_SESSION_KEYS:
        meta = _metadata(instance, key)
        assert meta[REPORT].value == str(files.report), key
        assert meta[TRACE].value == str(files.trace), key
        # the summary first, in plain text; then the session, its report and trace, its plot
        assert list(meta)[0] == "summary" and isinstance(meta["summary"], dg.TextMetadataValue)
        assert list(meta)[1:4] == ["session_id", REPORT, TRACE], (key, list(meta))
        if key in PLOTS:
            assert list(meta)[4] == PLOTS[key], (key, list(meta))
            assert "](data:image/svg+xml;base64," in meta[PLOTS[key]].value
    page = files.report.read_text()
    assert 'id="plot-roofline"' in page and 'id="plot-drift-latency_p50_ns"' in page
    assert json.loads(files.trace.read_text())["traceEvents"]

    attribution = _metadata(instance, "kernel_attribution")
    columns = [c.name for c in attribution["top_op_types"].schema.columns]  # table metadata
    assert columns[:2] == ["op type", "p50 / iter"], columns  # the op type once
    # The pages say what the report says: its sections' sentences, its tables' rows.
    report = render_markdown(paths.tracelake, session_id)
    for key, title in (
        ("kernel_attribution", "Where the time went"),
        ("bottleneck_report", "Bottleneck"),
        ("critical_path", "Critical path: what to fix first"),
        ("performance_drift", "Drift"),
    ):
        paragraphs = _metadata(instance, key)[title].value.split("\n\n")
        assert all(p in report for p in paragraphs), (key, title)
    top_ops = attribution["top_ops"]
    first_column = top_ops.schema.columns[0].name
    top_op = top_ops.records[0].data[first_column]
    assert f"| {top_op} |" in report.split("## Where the time went")[1]
    assert attribution["launch_tax"].value.endswith("%")  # text with its unit
    kernels = _metadata(instance, "bottleneck_report")["kernel_findings"].value
    assert kernels.startswith("no GPU kernels"), kernels  # the CPU provider: nothing invented
    drift = _metadata(instance, "performance_drift")
    assert drift["verdict_needs"].value.startswith("3 earlier sessions of this model")
    for key in PER_SESSION_KEYS:  # every table is table metadata, six columns at most
        for label, value in _metadata(instance, key).items():
            text = value.value if isinstance(value, dg.MarkdownMetadataValue) else ""
            assert not text.startswith("| "), (key, label)  # no Markdown table behind a click
            if isinstance(value, dg.TableMetadataValue):
                assert len(value.schema.columns) <= 6, (key, label)
    checks = {c.check_name: c.metadata for c in result.get_asset_check_evaluations()}
    assert isinstance(checks["telemetry_rate"]["sampling_hz"], dg.FloatMetadataValue)
    assert isinstance(checks["iterations_complete"]["measured_rows"], dg.TextMetadataValue)

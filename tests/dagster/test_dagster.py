"""The Dagster layer on a real instance: the whole graph, bad partitions, sensors, schedule."""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import subprocess
import sys

import dagster as dg
import pytest

from aaco_pipelines.assets import (
    MODEL_ASSETS,
    NIGHT_ASSETS,
    model_target_key,
    models_partitions,
    targets_partitions,
)
from aaco_pipelines.assets.partitions import NIGHT_TAG
from aaco_pipelines.instance import event_log_settings
from aaco_pipelines.registry.objectives import parse_objectives
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import InputSpec, ModelSidecar
from aaco_pipelines.registry.workload import Curves, GenerationWorkload
from aaco_pipelines.registry.zoo import llama_decoder
from aaco_pipelines.resources import (
    BenchmarkRunnerResource,
    ModelRegistryResource,
    RecordIOManager,
    TraceLakeResource,
)
from aaco_pipelines.sensors import (
    model_registry_sensor,
    nightly_regression_sweep,
    nightly_review_sensor,
    runtime_version_sensor,
)
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import REPO, add_model


@pytest.fixture
def instance(tmp_path):
    """A test instance with the embedded instance's event log (`aaco up` writes it)."""
    with dg.instance_for_test(overrides=event_log_settings(tmp_path / "dagster")) as instance:
        yield instance


def _resources(paths, memory_limit_mb=4096):
    return {
        "registry": ModelRegistryResource(
            home=str(paths.home), registry=str(paths.registry), tracelake=str(paths.tracelake)
        ),
        "tracelake": TraceLakeResource(database=str(paths.tracelake)),
        "runner": BenchmarkRunnerResource(timeout_s=120, memory_limit_mb=memory_limit_mb),
        "io_manager": RecordIOManager(),  # as in the code location
    }


def _materialize(instance, paths, slug, tags=None, target="cpu", **kwargs):
    instance.add_dynamic_partitions(models_partitions.name, [slug])
    instance.add_dynamic_partitions(targets_partitions.name, [target])
    return dg.materialize(
        MODEL_ASSETS,
        partition_key=model_target_key(slug, target),
        instance=instance,
        resources=_resources(paths, **kwargs),
        raise_on_error=False,
        tags=tags,
    )


def _error_text(error) -> str:
    """The failure message with its causes (Dagster wraps the user's exception)."""
    parts = []
    while error is not None:
        parts.append(error.message)
        error = error.cause
    return "\n".join(parts)


def _lake_sessions(paths) -> list[str]:
    if not paths.tracelake.exists():
        return []
    return (
        TraceLake(paths.tracelake)
        .query("SELECT model_slug FROM sessions ORDER BY 1")["model_slug"]
        .to_pylist()
    )


def test_whole_graph_for_two_models_then_bad_partitions_fail_alone(
    instance, aaco_paths, monkeypatch
):
    opens = []  # DuckDB opens (each 20-40 ms on DuckDB 2.0), while `opens` is being counted
    original = engine.connect
    monkeypatch.setattr(engine, "connect", lambda *a, **k: opens.append(a) or original(*a, **k))
    add_model(aaco_paths, "tiny_mlp", models.tiny_mlp())
    dynamic_sidecar = ModelSidecar(
        inputs={"x": InputSpec(shape=(3, 8), dtype="float32")},
        warmup_iterations=1,
        measured_iterations=10,
        profiled_iterations=3,
        min_measured_seconds=0,
        # an objective no worker meets (1 MB of memory) and one every run meets
        objectives=parse_objectives({"peak_memory_mb": 1, "latency_p50_ms": 1e4}, REPO),
    )
    add_model(aaco_paths, "dynamic", models.dynamic_input_model(), dynamic_sidecar)

    for slug in ("tiny_mlp", "dynamic"):
        opens.clear()
        result = _materialize(instance, aaco_paths, slug)
        assert result.success, slug
        asset_opens = list(opens)
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        # whether this host let the session be measured cleanly is its own business: the
        # warning says what the stored verdict says, with its reasons
        trusted = checks.pop("measurement_trusted")
        verdict = trusted.metadata["verdict"].value
        assert trusted.passed == (verdict != "suspect") and trusted.metadata["reasons"].value
        # beside the class, in the Catalog: a class undecided or on a suspect measurement warns
        trustworthy = checks.pop("class_is_trustworthy")
        decided = trustworthy.metadata["decided"].value
        assert trustworthy.passed == (decided and verdict != "suspect"), trustworthy.metadata
        assert trustworthy.severity == dg.AssetCheckSeverity.WARN
        assert "Bottleneck: " in trustworthy.metadata["summary"].value
        # a breached objective fails its check with an error: other processes on the host
        # do not move peak memory, so a suspect measurement does not soften it
        objectives = checks.pop("objectives_met")
        assert objectives.passed == (slug == "tiny_mlp")  # it has none
        if slug == "dynamic":
            assert objectives.severity == dg.AssetCheckSeverity.ERROR
            assert objectives.metadata["breached"].value == "peak_memory_mb"
            assert "latency_p50_ms" in objectives.metadata["objectives"].value
        assert {name: c.passed for name, c in checks.items()} == {
            "iterations_complete": True,
            "kernel_trace_present": True,
            "telemetry_rate": True,
            "generation_complete": True,  # nothing to check for forward passes
            "kernel_events_present": True,
            "kernel_time_within_wall": True,
            "no_performance_regression": True,
        }
    assert _lake_sessions(aaco_paths) == ["dynamic", "tiny_mlp"]
    # The first session's diagnosis measured the envelope on demand: hardware_envelope is
    # materialized by it (its peaks and contention; not "Never materialized" in the catalog);
    # the second reused it.
    made = instance.fetch_materializations(dg.AssetKey("hardware_envelope"), limit=10).records
    assert len(made) == 1
    envelope_meta = made[0].asset_materialization.metadata
    assert envelope_meta["peak_gemm_gflops"].value > 0 and "host_contention" in envelope_meta

    graph_meta = instance.get_latest_materialization_event(
        dg.AssetKey("onnx_graph")
    ).asset_materialization.metadata
    assert graph_meta["node_count"].value == "1"  # the latest one is the Relu-only dynamic model
    run_meta = instance.get_latest_materialization_event(
        dg.AssetKey("benchmark_run")
    ).asset_materialization.metadata
    # a session's numbers are text: Dagster charts no trend across unrelated partitions
    assert (
        float(run_meta["latency_p50_ms"].value) > 0
        and run_meta["measured_iterations"].value == "10"
    )

    # The records the assets handed each other: at fs_io_manager's path, with no log line
    # (each one an event in the run's event log).
    lake_meta = instance.get_latest_materialization_event(
        dg.AssetKey("tracelake_session")
    ).asset_materialization.metadata
    record_path = lake_meta["path"].value
    assert record_path == os.path.join(
        instance.storage_directory(), "tracelake_session", "dynamic", "cpu"
    )
    with open(record_path, "rb") as file:
        assert pickle.load(file)["session_id"] == lake_meta["session_id"].value
    run_id = instance.get_latest_materialization_event(dg.AssetKey("tracelake_session")).run_id
    messages = [entry.user_message for entry in instance.all_logs(run_id)]
    assert not [m for m in messages if "Writing file at" in m or "Loading partition" in m]

    # Three bad partitions, each failing with its own clear message and leaving no trace.
    models.write_corrupt_model(aaco_paths.registry / "corrupt.onnx")
    add_model(aaco_paths, "no_sidecar", models.dynamic_input_model(), sidecar=None)
    add_model(
        aaco_paths,
        "crasher",
        models.memory_hog_model(),
        ModelSidecar(warmup_iterations=0, measured_iterations=1),
    )
    expected = {
        "corrupt": ["corrupt.onnx", "not a valid ONNX model"],
        "no_sidecar": ["no_sidecar.onnx", "sidecar", "batch"],
        "crasher": ["memory limit of 600 MiB", "killed"],
    }
    for slug, fragments in expected.items():
        result = _materialize(instance, aaco_paths, slug, memory_limit_mb=600)
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = _error_text(failure.step_failure_data.error)
        for fragment in fragments:
            assert fragment in message, (slug, message)
    assert _lake_sessions(aaco_paths) == ["dynamic", "tiny_mlp"]
    assert not any((aaco_paths.sessions / ".staging").iterdir())

    # Through Dagster, a run opens the lake a few times more than the bare pipeline does: the
    # pages of tracelake_session, kernel_attribution, critical_path and bottleneck_report read
    # their report sections after their stage wrote (performance_drift's share the report's
    # open). Each asset's reads share one open.
    dynamic_opens = len(asset_opens)
    opens.clear()
    measure_model(registered_model(aaco_paths.registry / "dynamic.onnx"), aaco_paths, analyze=True)
    assert dynamic_opens <= len(opens) + 4, (dynamic_opens, len(opens))


def test_records_read_what_fs_io_manager_wrote_and_the_other_way_round(instance, tmp_path):
    """An instance upgraded to RecordIOManager loads the inputs fs_io_manager stored before it,
    and the other way round: same bytes at the same paths."""
    from aaco_pipelines.assets.partitions import model_target_partitions

    @dg.asset(partitions_def=model_target_partitions)
    def upstream(context) -> dict:
        return {"key": context.partition_key}

    @dg.asset(partitions_def=model_target_partitions)
    def downstream(upstream: dict) -> dict:
        return {"seen": upstream["key"]}

    instance.add_dynamic_partitions(models_partitions.name, ["tiny"])
    instance.add_dynamic_partitions(targets_partitions.name, ["cpu"])
    key = model_target_key("tiny", "cpu")
    for writer, reader in (
        (dg.FilesystemIOManager(), RecordIOManager()),
        (RecordIOManager(), dg.FilesystemIOManager()),
    ):
        for asset, io_manager in ((upstream, writer), (downstream, reader)):  # one step a run
            result = dg.materialize(
                [upstream, downstream],
                selection=[asset.key],
                partition_key=key,
                instance=instance,
                resources={"io_manager": io_manager},
            )
            assert result.success
        assert result.output_for_node("downstream") == {"seen": "tiny|cpu"}


def test_an_llm_decoder_shows_its_generation_figures_and_plots(instance, aaco_paths):
    workload = GenerationWorkload(
        prompt_tokens=16, output_tokens=8, requests=8, min_duration_s=0.2,
        curves=Curves(batch_sizes=(1, 2), prompt_lengths=(8, 32), repeats=1),
    )  # fmt: skip
    sidecar = ModelSidecar(warmup_iterations=1, profiled_iterations=1, generation=workload)
    add_model(aaco_paths, "llm", llama_decoder(), sidecar)
    result = _materialize(instance, aaco_paths, "llm")
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    trusted = checks.pop("measurement_trusted")  # this host's business, said with its reasons
    assert trusted.passed == (trusted.metadata["verdict"].value != "suspect")
    checks.pop("class_is_trustworthy")  # the same, and whether the evidence decided the class
    assert all(c.passed for c in checks.values()), checks
    generation = checks["generation_complete"].metadata
    assert int(generation["batches"].value) > 0
    assert generation["steps_with_wrong_kv_growth"].value == "0"
    meta = instance.get_latest_materialization_event(
        dg.AssetKey("tracelake_session")
    ).asset_materialization.metadata
    table = meta["generation_figures"]  # table metadata: the UI shows it inline
    assert isinstance(table, dg.TableMetadataValue)
    assert "single_stream" in table.records[0].data.values()
    for plot in ("generation_curves_plot", "token_latencies_plot"):
        assert meta[plot].value.count("](data:image/svg+xml;base64,") == 1
    run_meta = instance.get_latest_materialization_event(
        dg.AssetKey("benchmark_run")
    ).asset_materialization.metadata
    assert run_meta["scenarios"].value == "single_stream" and int(run_meta["requests"].value) >= 8
    assert "profiling_overhead_pct" not in run_meta  # a request against a step: meaningless


def test_model_registry_sensor(instance, aaco_paths):
    resources = {"registry": _resources(aaco_paths)["registry"]}
    path = add_model(aaco_paths, "Model-A", models.tiny_mlp())
    (aaco_paths.registry / "README.txt").write_text("not a model")

    first = model_registry_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert [r.partition_key for r in first.run_requests] == ["model_a|cpu"]
    assert first.run_requests[0].run_key.startswith("model_a:")
    assert first.run_requests[0].tags["aaco/device"] == "cpu"
    assert [r.partition_keys for r in first.dynamic_partitions_requests] == [["model_a"], ["cpu"]]
    instance.add_dynamic_partitions(models_partitions.name, ["model_a"])
    instance.add_dynamic_partitions(targets_partitions.name, ["cpu"])

    unchanged = model_registry_sensor(
        dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources)
    )
    assert (
        not unchanged.run_requests and "none new or changed" in unchanged.skip_reason.skip_message
    )

    # A device worker registers gpu1: the model is measured there too, and only there.
    instance.add_dynamic_partitions(targets_partitions.name, ["gpu1"])
    device = model_registry_sensor(
        dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources)
    )
    [request] = device.run_requests
    assert request.partition_key == "model_a|gpu1"
    assert request.tags["aaco/device"] == "gpu1"
    assert "dagster-celery/queue" not in request.tags  # the routing launcher's, when it sends it
    instance.delete_dynamic_partition(targets_partitions.name, "gpu1")

    models.save(models.tiny_mlp(seed=7), path)  # same name, new content
    changed = model_registry_sensor(
        dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=resources)
    )
    assert [r.partition_key for r in changed.run_requests] == ["model_a|cpu"]
    assert changed.run_requests[0].run_key != first.run_requests[0].run_key
    assert not changed.dynamic_partitions_requests  # partition exists already

    path.unlink()  # deleted: nothing requested, history (cursor, partition) kept
    deleted = model_registry_sensor(
        dg.build_sensor_context(instance=instance, cursor=changed.cursor, resources=resources)
    )
    assert not deleted.run_requests
    assert instance.get_dynamic_partitions(models_partitions.name) == ["model_a"]


def test_runtime_version_sensor_sweeps_on_change(instance):
    instance.add_dynamic_partitions(models_partitions.name, ["a", "b"])
    first = runtime_version_sensor(dg.build_sensor_context(instance=instance))
    assert not first.run_requests
    same = runtime_version_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert isinstance(same, dg.SkipReason)

    old = json.loads(first.cursor)
    old["fingerprint"] = "0" * 64
    old["parts"]["onnxruntime_version"] = "1.0.0"
    swept = runtime_version_sensor(
        dg.build_sensor_context(instance=instance, cursor=json.dumps(old))
    )
    envelope, *sweep = swept.run_requests
    assert envelope.job_name == "calibrate_envelope" and envelope.partition_key is None
    assert sorted(r.partition_key for r in sweep) == ["a|cpu", "b|cpu"]
    assert {r.job_name for r in sweep} == {"measure_model"}
    fingerprint = json.loads(swept.cursor)["fingerprint"]
    assert all(r.tags["aaco/runtime_fingerprint"] == fingerprint for r in swept.run_requests)


def test_nightly_sweep_requests_every_model_once_per_night(instance):
    context = dg.build_schedule_context(
        instance=instance, scheduled_execution_time=dt.datetime(2026, 11, 21, 2, 0)
    )
    assert isinstance(nightly_regression_sweep(context), dg.SkipReason)
    assert instance.get_dynamic_partitions("nights") == []  # nothing to sweep: no night
    instance.add_dynamic_partitions(models_partitions.name, ["a", "b", "c"])
    instance.add_dynamic_partitions(targets_partitions.name, ["cpu", "gpu0"])
    requests = nightly_regression_sweep(context)
    assert [r.partition_key for r in requests] == [
        f"{m}|{t}" for m in ("a", "b", "c") for t in ("cpu", "gpu0")
    ]
    assert requests[1].run_key == "nightly:2026-11-21:a@gpu0"
    assert requests[1].tags["aaco/device"] == "gpu0"
    assert instance.get_dynamic_partitions("nights") == ["2026-11-21"]  # its review's partition
    assert nightly_regression_sweep.cron_schedule == "0 2 * * *"


def test_a_night_with_no_runs_fails_its_review_in_one_clear_line(instance, aaco_paths):
    """Materialized by hand for a night no sweep ran: a failure that names the night and the
    fix, not a TypeError (Failure's first argument is its description)."""
    instance.add_dynamic_partitions("nights", ["2026-11-30"])
    result = dg.materialize(
        NIGHT_ASSETS,
        partition_key="2026-11-30",
        instance=instance,
        resources={"tracelake": TraceLakeResource(database=str(aaco_paths.tracelake))},
        raise_on_error=False,
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = _error_text(failure.event_specific_data.error)
    assert "night 2026-11-30: no measurement runs tagged aaco/night=2026-11-30" in message
    assert "review a night the nightly_regression_sweep schedule ran" in message
    assert "TypeError" not in message


def test_definitions_validate_as_a_code_location(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "AACO_HOME": str(tmp_path / "aaco")}
    result = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "dagster"),
            "definitions",
            "validate",
            "-w",
            "workspace.yaml",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_drift_turns_to_regression_for_a_slower_version_and_the_check_blocks(
    instance, aaco_paths, fast_options
):
    sidecar = ModelSidecar(
        warmup_iterations=5,
        measured_iterations=200,
        profiled_iterations=5,
        min_measured_seconds=0.3,
    )
    dims = {"hidden": 512, "batch": 64, "features": 256}  # ~0.2 ms: steadier than a 20 µs model
    path = add_model(aaco_paths, "drifting", models.tiny_mlp(**dims), sidecar)

    def measure() -> tuple[bool, dict, dict]:
        result = _materialize(instance, aaco_paths, "drifting")
        checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
        verdicts = {
            row["metric"]: row
            for row in TraceLake(aaco_paths.tracelake)
            .query(
                "SELECT * FROM drift_verdicts WHERE session_id = "
                "(SELECT session_id FROM sessions ORDER BY started_at DESC LIMIT 1)"
            )
            .to_pylist()
        }
        return result.success, checks, verdicts

    def summary(verdicts):
        return {
            m: (v["verdict"], round(v["effect_pct"] or 0, 1), v["decided_by"])
            for m, v in verdicts.items()
        }

    # History: four sessions by the bare pipeline (the same stages, without Dagster's runs),
    # then the runs under test judge against it.
    for _ in range(4):
        measure_model(registered_model(path), aaco_paths, fast_options, analyze=True)

    success, checks, verdicts = measure()  # re-measuring the unchanged model
    assert verdicts["latency_p50_ns"]["verdict"] in ("no_change", "improvement"), summary(verdicts)
    unchanged = checks["no_performance_regression"]
    if not unchanged.passed:  # this 2-core host has slow moments (a session 1.6x slower, its
        # p99 more): they may be judged, but never blamed on the model, which did not change
        assert "suspected_cause" not in unchanged.metadata or not unchanged.metadata[
            "suspected_cause"
        ].value.startswith("model_version"), summary(verdicts)

    models.save(models.slower_mlp(200, **dims), path)  # a new version of the model: extra ops
    success, checks, verdicts = measure()
    p50 = verdicts["latency_p50_ns"]
    series = json.loads(p50["series_json"])["values"]
    assert p50["verdict"] == "regression" and p50["effect_pct"] > 50, (summary(verdicts), series)
    assert p50["ci_low"] > 0 and p50["decided_by"] in ("cusum", "ewma", "z_threshold")
    assert json.loads(p50["series_json"])["markers"][-1] == ["model_version"]
    check = checks["no_performance_regression"]
    assert not check.passed
    assert check.metadata["suspected_cause"].value.startswith("model_version")  # the root cause
    # settled side by side as aaco diff settles it (one policy: governance.gate.paired.settle):
    # the two versions measured again together, the slower one still a regression
    gate = check.metadata["gate"].value
    assert gate["paired"]["decision"] == "regression", gate["side_by_side_notes"]
    assert gate["paired"]["current_sha256"] != gate["paired"]["baseline_sha256"]
    assert check.metadata["decided_on"].value.startswith("side by side: ")
    assert not success  # the blocking check fails the run


def test_a_night_is_reviewed_once_its_runs_finish_with_fdr_across_its_models(instance, aaco_paths):
    night = "2026-11-21"
    tags = {"aaco/trigger": "nightly", NIGHT_TAG: night}
    sensor = lambda cursor=None: nightly_review_sensor(  # noqa: E731
        dg.build_sensor_context(instance=instance, cursor=cursor)
    )
    assert isinstance(sensor(), dg.SkipReason)
    add_model(aaco_paths, "tiny_a", models.tiny_mlp())
    add_model(aaco_paths, "tiny_b", models.tiny_mlp(seed=3))
    models.write_corrupt_model(aaco_paths.registry / "corrupt.onnx")
    for slug in ("tiny_a", "tiny_b", "corrupt"):
        _materialize(instance, aaco_paths, slug, tags=tags)

    # A run of the night still going holds the review back.
    job = dg.Definitions(
        assets=MODEL_ASSETS, resources=_resources(aaco_paths)
    ).resolve_implicit_global_asset_job_def()
    late = instance.create_run_for_job(
        job, tags={**tags, "dagster/partition": "tiny_b|cpu"}, status=dg.DagsterRunStatus.STARTED
    )
    assert "still running" in sensor().skip_message
    instance.report_run_canceled(late)
    request = sensor()
    assert [(r.partition_key, r.run_key) for r in request.run_requests] == [
        (night, f"review:{night}")
    ]
    # the night it reviews is a partition (a fresh install lists no nights, none "missing")
    [added] = request.dynamic_partitions_requests
    assert (added.partitions_def_name, list(added.partition_keys)) == ("nights", [night])
    instance.add_dynamic_partitions("nights", list(added.partition_keys))
    assert isinstance(sensor(request.cursor), dg.SkipReason)  # reviewed once

    # One strong and one weak regression among the night's series: BH keeps only the strong.
    with TraceLake(aaco_paths.tracelake).connect(write=True) as con:
        con.execute(
            "UPDATE drift_verdicts SET verdict = 'no_change', parameters_json = '{\"p_value\": 0.5}'"
        )
        for slug, p in (("tiny_a", 1e-6), ("tiny_b", 0.01)):
            con.execute(
                "UPDATE drift_verdicts SET verdict = 'regression', decided_by = 'cusum', "
                "parameters_json = json_object('p_value', ?) "
                "WHERE model_slug = ? AND metric = 'latency_p50_ns'",
                [p, slug],
            )
    review = dg.materialize(
        NIGHT_ASSETS,
        partition_key=night,
        instance=instance,
        resources={"tracelake": TraceLakeResource(database=str(aaco_paths.tracelake))},
    )
    output = review.output_for_node("nightly_review")
    assert output["regressions"] == [{"model": "tiny_a", "metric": "latency_p50_ns"}]
    assert sorted(output["sessions"]) == ["tiny_a|cpu", "tiny_b|cpu"]
    assert output["failed"] == ["corrupt|cpu"]
    meta = review.asset_materializations_for_node("nightly_review")[0].metadata
    # p = 0.01 ranks second of m series: BH-adjusted 0.01 * m / 2 exceeds q = 0.05 once m > 10.
    assert meta["series_judged"].value > 10 and meta["changes_before_fdr"].value == 2
    assert meta["changes_after_fdr"].value == 1
    (check,) = review.get_asset_check_evaluations()
    assert not check.passed and "tiny_a" in check.metadata["regressions"].value
    assert "tiny_b" not in check.metadata["regressions"].value


def test_a_run_for_another_target_is_refused_not_measured_here(instance, aaco_paths):
    """This process measures on cpu: a run for gpu3 (queued while no worker routes it) must not
    record this CPU's numbers as gpu3's."""
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    result = _materialize(instance, aaco_paths, "tiny", target="gpu3")
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "benchmark_run"
    message = _error_text(failure.event_specific_data.error)
    assert "for target gpu3" in message and "aaco worker --target gpu3" in message
    assert not _lake_sessions(aaco_paths)


def test_a_cursor_from_before_targets_requests_nothing_again(instance, aaco_paths):
    resources = {"registry": _resources(aaco_paths)["registry"]}
    add_model(aaco_paths, "model_a", models.tiny_mlp())
    first = model_registry_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    legacy = json.dumps({"model_a": json.loads(first.cursor)["model_a|cpu"]})
    again = model_registry_sensor(
        dg.build_sensor_context(instance=instance, cursor=legacy, resources=resources)
    )
    assert not again.run_requests

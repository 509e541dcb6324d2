"""The zoo's signature workloads, measured for real, come out as the bottleneck they were built
to show; and a model measured while other processes compete for the cores comes out CPU-bound."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.pipeline import measure_model
from aaco_pipelines.registry.scan import scan_registry
from aaco_pipelines.registry.zoo import build_zoo
from aaco_pipelines.tracelake.store import TraceLake


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    home = tmp_path_factory.mktemp("zoo")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    build_zoo(paths.registry)
    return paths, {m.slug: m for m in scan_registry(paths.registry)}


def _report(paths: AacoPaths, session_id: str) -> dict:
    row = (
        TraceLake(paths.tracelake)
        .query("SELECT * FROM bottleneck_reports WHERE session_id = ?", [session_id])
        .to_pylist()[0]
    )
    row["evidence"] = {e["signal"]: e for e in json.loads(row["evidence_json"])}
    return row


@pytest.mark.parametrize(
    ("slug", "expected"),
    [
        ("launch_bound", "launch-bound"),
        ("memory_bound", "memory-bound"),
        ("compute_bound", "compute-bound"),
    ],
)
def test_signature_workloads_classify_as_built(zoo, slug, expected):
    paths, models = zoo
    bundle = measure_model(models[slug], paths, analyze=True)
    report = _report(paths, bundle.session_id)
    assert report["bottleneck"] == expected, report["evidence"]
    assert report["confidence"] > 0.6
    posterior = json.loads(report["posterior_json"])
    assert sum(posterior.values()) == pytest.approx(1.0)
    # The evidence is stored with the bins and thresholds it was judged against.
    launch_tax = report["evidence"]["launch_tax"]
    assert launch_tax["threshold_edges"] and launch_tax["bin"] and launch_tax["likelihoods"]
    assert json.loads(report["recommendations_json"])[0]["rank"] == 1


def test_competing_host_work_makes_a_model_cpu_bound(zoo):
    paths, models = zoo
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        bundle = measure_model(models["mlp"], paths, analyze=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    report = _report(paths, bundle.session_id)
    assert report["bottleneck"] == "cpu-bound", report["evidence"]
    assert report["evidence"]["runqueue_wait_ratio"]["value"] > 0.3
    assert report["hardware_envelope_utilization"] is not None

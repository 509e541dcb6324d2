"""Reading ONNX Runtime's real profile output into kernel_events."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest

from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.schema import KERNEL_EVENTS
from tests import models
from tests.helpers import ort_profile


@pytest.fixture(scope="module")
def ort_profile_file(tmp_path_factory):
    """A real profile: 2 warm-up runs and 4 profiled runs of a tiny MLP."""
    tmp = tmp_path_factory.mktemp("profile")
    path = models.save(models.tiny_mlp(), tmp / "mlp.onnx")
    return ort_profile(tmp, path, {"x": np.ones((4, 16), dtype=np.float32)}, runs=6)


def test_events_are_assigned_to_iterations_and_epoch_times(ort_profile_file):
    path, start_ns = ort_profile_file
    events = read_ort_profile(path, "s1", start_ns, warmup_runs=2)
    assert events.schema == KERNEL_EVENTS
    nodes = events.filter(pc.equal(events["category"], "Node"))
    # Two kernels per run (FusedGemm, MatMul) × 6 runs; iterations -2..3.
    assert nodes.num_rows == 12
    assert sorted(set(nodes["iteration"].to_pylist())) == [-2, -1, 0, 1, 2, 3]
    assert set(nodes["provider"].to_pylist()) == {"CPUExecutionProvider"}
    assert "FusedGemm" in set(nodes["op_type"].to_pylist())
    assert all(not n.endswith("_kernel_time") for n in nodes["node_name"].to_pylist())
    # Times are epoch ns after the profiler start, durations non-negative.
    assert pc.min(events["start_ns"]).as_py() >= start_ns
    assert pc.min(events["duration_ns"]).as_py() >= 0
    runs = events.filter(pc.equal(events["event_name"], "model_run"))
    assert runs["iteration"].to_pylist() == [-2, -1, 0, 1, 2, 3]
    # Every node event lies inside the model_run of its iteration.
    for row in nodes.to_pylist():
        run = runs.filter(pc.equal(runs["iteration"], row["iteration"])).to_pylist()[0]
        assert run["start_ns"] <= row["start_ns"] <= run["start_ns"] + run["duration_ns"]


def test_truncated_profile_is_a_clear_error(ort_profile_file, tmp_path):
    path, _ = ort_profile_file
    broken = tmp_path / "broken.json"
    broken.write_text(path.read_text()[: len(path.read_text()) // 2])
    with pytest.raises(AacoInputError) as err:
        read_ort_profile(broken, "s1", 0)
    assert str(broken) in str(err.value)
    with pytest.raises(AacoInputError):
        read_ort_profile(tmp_path / "missing.json", "s1", 0)

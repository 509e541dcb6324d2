"""capture_environment on this host: complete, serializable, honest about what is missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnxruntime
import pytest

from aaco_pipelines.execution.environment import (
    capture_environment,
    fingerprint_parts,
    runtime_fingerprint,
)


@pytest.fixture(scope="module")
def env() -> dict:
    return capture_environment()


def test_environment_is_json_and_names_the_runtime(env):
    assert json.loads(json.dumps(env)) == env
    assert env["onnxruntime_version"] == onnxruntime.__version__
    assert env["onnxruntime_providers"] == onnxruntime.get_available_providers()
    assert "CPUExecutionProvider" in env["onnxruntime_providers"]
    assert env["packages"]["numpy"] and env["packages"]["pyarrow"]
    assert env["cpu"]["logical_cores"] == os.cpu_count()
    assert env["memory_total_bytes"] > 0
    assert isinstance(env["captured_at"], int) and env["captured_at"] > 1_600_000_000 * 10**9
    assert set(env["cpu"]["governors"]) == set(env["cpu"]["frequency_mhz"])


def test_missing_pieces_are_explained(env):
    unavailable = env["unavailable"]
    assert all(isinstance(reason, str) and reason for reason in unavailable.values())
    rocm_root = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    if not (rocm_root / ".info" / "version").is_file() and env["packages"]["amdsmi"] is None:
        assert env["rocm_version"] is None
        assert "rocm_version" in unavailable and "amdsmi" in unavailable
    if not Path("/sys/module/amdgpu/version").is_file():
        assert env["gpu_driver_version"] is None and "gpu_driver_version" in unavailable
    if not Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").is_file():
        assert set(env["cpu"]["governors"].values()) == {None} and "cpu_governor" in unavailable
    if env["rocprofv3"] is None:
        assert "rocprofv3" in unavailable


def test_fingerprint_is_stable_and_tracks_the_runtime(env):
    again = capture_environment()
    assert runtime_fingerprint(env) == runtime_fingerprint(again)
    assert len(runtime_fingerprint(env)) == 64
    assert set(fingerprint_parts(env)) == {
        "rocm_version",
        "gpu_driver_version",
        "onnxruntime_version",
        "onnxruntime_providers",
    }
    upgraded = {**env, "onnxruntime_version": env["onnxruntime_version"] + ".post1"}
    assert runtime_fingerprint(upgraded) != runtime_fingerprint(env)
    moved = {**env, "hostname": "elsewhere", "captured_at": 0}
    assert runtime_fingerprint(moved) == runtime_fingerprint(env)

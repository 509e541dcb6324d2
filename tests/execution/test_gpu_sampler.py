"""GPU telemetry sampling: amdsmi absent on this host, and the sampling logic against a fake."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import pytest

from aaco_pipelines.execution.gpu_sampler import (
    SAMPLES_SCHEMA,
    UNITS,
    GpuSampler,
    amdsmi_status,
    request_performance_determinism,
    rocm_version_from_amdsmi,
)

MIB = 1024 * 1024


class FakeNotSupported(Exception):
    """What amdsmi raises (AmdSmiLibraryException) for a metric the part does not support."""


class FakeAmdSmi:
    """TEST DOUBLE for the vendor `amdsmi` module, which cannot exist on this GPU-less host.

    Same function and enum names as amdsmi's Python API, fixed answers in its units (W, °C, MHz,
    percent, MiB). The VRAM temperature raises, as on a part without that sensor, and GPU 1
    refuses determinism mode, as without root.
    """

    AmdSmiTemperatureType = SimpleNamespace(HOTSPOT="hotspot", VRAM="vram")
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT="current")
    AmdSmiClkType = SimpleNamespace(GFX="gfx", MEM="mem")

    def __init__(self, gpus: int = 2):
        self.handles = [f"handle{i}" for i in range(gpus)]
        self.shut_downs = 0

    def amdsmi_get_processor_handles(self):
        return list(self.handles)

    def amdsmi_get_power_info(self, handle):
        return {"current_socket_power": 512, "average_socket_power": 498, "power_limit": 750}

    def amdsmi_get_temp_metric(self, handle, sensor, metric):
        if sensor == "vram":
            raise FakeNotSupported("AMDSMI_STATUS_NOT_SUPPORTED")
        return 71

    def amdsmi_get_clock_info(self, handle, domain):
        return {"clk": 2100 if domain == "gfx" else 1300, "min_clk": 500, "max_clk": 2100}

    def amdsmi_get_gpu_activity(self, handle):
        return {"gfx_activity": 97, "umc_activity": 41, "mm_activity": "N/A"}

    def amdsmi_get_gpu_vram_usage(self, handle):
        return {"vram_total": 196_592, "vram_used": 2048}

    def amdsmi_get_violation_status(self, handle):
        return {
            "per_ppt_pwr": 12,
            "per_socket_thrm": "N/A",  # no percentage: the active flag is used
            "active_ppt_pwr": True,
            "active_socket_thrm": False,
        }

    def amdsmi_set_gpu_perf_determinism_mode(self, handle, clkvalue):
        if handle == "handle1":
            raise PermissionError("AMDSMI_STATUS_NO_PERM")

    def amdsmi_get_rocm_version(self):
        return True, "6.4.1"

    def amdsmi_shut_down(self):
        self.shut_downs += 1


# --- amdsmi absent ---------------------------------------------------------------------------


def test_amdsmi_absent_on_this_host():
    module, reason = amdsmi_status()
    assert module is None and reason

    sampler = GpuSampler(interval_s=0.05)
    assert sampler.available is False and sampler.reason == reason
    sampler.start()
    table = sampler.stop()
    assert table.num_rows == 0
    assert table.schema.names == ["timestamp_ns", "device", "metric", "value", "unit"]
    assert sampler.stop() is table


@pytest.fixture
def amdsmi_source(tmp_path, monkeypatch):
    """Put an `amdsmi.py` of the given source first on sys.path, and forget it afterwards."""

    def install(source: str) -> None:
        (tmp_path / "amdsmi.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        sys.modules.pop("amdsmi", None)

    yield install
    sys.modules.pop("amdsmi", None)


def test_missing_library_is_a_reason_not_an_error(amdsmi_source):
    amdsmi_source("raise KeyError('ROCM_PATH')  # what amdsmi does without libamd_smi.so\n")
    module, reason = amdsmi_status()
    assert module is None and reason.startswith("libamd_smi.so missing (KeyError")


def test_failed_init_is_a_reason_not_an_error(amdsmi_source):
    amdsmi_source("def amdsmi_init():\n    raise RuntimeError('AMDSMI_STATUS_DRIVER_NOT_LOADED')\n")
    module, reason = amdsmi_status()
    assert module is None and reason.startswith("amdsmi_init failed: RuntimeError")


# --- sampling against the fake -------------------------------------------------------------------


def test_sampler_records_every_supported_metric_at_ten_hertz_or_more():
    fake = FakeAmdSmi(gpus=2)
    sampler = GpuSampler(interval_s=0.05, amdsmi_module=fake)
    assert sampler.available and sampler.reason is None
    started = time.monotonic()
    sampler.start()
    time.sleep(0.5)
    table = sampler.stop()
    elapsed = time.monotonic() - started
    assert table.schema == SAMPLES_SCHEMA

    rows = table.to_pylist()
    assert {row["device"] for row in rows} == {"gpu0", "gpu1"}
    ticks = {row["timestamp_ns"] for row in rows if row["device"] == "gpu0"}
    assert len(ticks) / elapsed >= 10

    latest = {(row["device"], row["metric"]): (row["value"], row["unit"]) for row in rows}
    assert {metric for _, metric in latest} == set(UNITS) - {"memory_temperature"}
    assert latest["gpu0", "socket_power"] == (512.0, "W")  # current preferred over average
    assert latest["gpu0", "hotspot_temperature"] == (71.0, "C")
    assert latest["gpu0", "gfx_clock"] == (2100.0, "MHz")
    assert latest["gpu0", "memory_clock"] == (1300.0, "MHz")
    assert latest["gpu0", "gfx_activity"] == (97.0, "percent")
    assert latest["gpu0", "memory_activity"] == (41.0, "percent")
    assert latest["gpu0", "vram_used"] == (2048.0 * MIB, "bytes")  # amdsmi reports MiB
    assert latest["gpu0", "power_violation"] == (12.0, "percent")
    assert latest["gpu0", "thermal_violation"] == (0.0, "percent")  # from active flag False


def test_unsupported_metric_is_skipped_and_noted_once_per_gpu():
    fake = FakeAmdSmi(gpus=2)
    sampler = GpuSampler(amdsmi_module=fake)
    for _ in range(3):
        sampler.sample_once()
    table = sampler.stop()
    assert "memory_temperature" not in table.column("metric").to_pylist()
    assert sampler.errors == [
        "gpu0 amdsmi_get_temp_metric(VRAM): FakeNotSupported: AMDSMI_STATUS_NOT_SUPPORTED",
        "gpu1 amdsmi_get_temp_metric(VRAM): FakeNotSupported: AMDSMI_STATUS_NOT_SUPPORTED",
    ]
    assert fake.shut_downs == 0  # a module handed in stays the caller's to shut down


def test_gpu_indices_select_devices():
    sampler = GpuSampler(gpu_indices=[1], amdsmi_module=FakeAmdSmi(gpus=2))
    sampler.sample_once()
    assert set(sampler.stop().column("device").to_pylist()) == {"gpu1"}

    missing = GpuSampler(gpu_indices=[5], amdsmi_module=FakeAmdSmi(gpus=2))
    assert missing.available is False and "asked for [5]" in missing.reason


def test_determinism_mode_reports_refusals():
    assert request_performance_determinism(FakeAmdSmi(gpus=2), 1900) == {
        "gpu0": "applied",
        "gpu1": "refused: PermissionError: AMDSMI_STATUS_NO_PERM",
    }
    assert request_performance_determinism(None, 1900) == {"all": "refused: amdsmi not available"}


def test_rocm_version_from_amdsmi():
    assert rocm_version_from_amdsmi(FakeAmdSmi()) == "6.4.1"
    assert rocm_version_from_amdsmi(None) is None
    not_found = SimpleNamespace(amdsmi_get_rocm_version=lambda: (False, ""))
    assert rocm_version_from_amdsmi(not_found) is None

"""GPU telemetry from amdsmi, sampled from a thread of the parent while the benchmark runs.

Power, temperatures, clocks and violation status explain a latency that drifts within a run (a GPU
that hits its power cap slows down), so they are sampled alongside the host counters. Each read is
guarded on its own: a part that does not support a metric records nothing for it, and the first
failure is kept in `errors` so a missing series is explained. Samples are raw and long-format
(timestamp_ns, device, metric, value, unit); `collectors.bundle_tables` turns them into TELEMETRY rows.

The amdsmi Python API used (ROCm/amdsmi `py-interface/amdsmi_interface.py` and
`docs/reference/amdsmi-py-api.md`; units from `include/amd_smi/amdsmi.h`):

- `amdsmi_init()`, `amdsmi_shut_down()`, `amdsmi_get_processor_handles()`
- `amdsmi_get_power_info(h)` → `current_socket_power` / `average_socket_power`, W ("N/A" if absent)
- `amdsmi_get_temp_metric(h, AmdSmiTemperatureType.HOTSPOT | .VRAM, AmdSmiTemperatureMetric.CURRENT)`
  → int, °C (the header says Celsius; older Python docs said millidegrees)
- `amdsmi_get_clock_info(h, AmdSmiClkType.GFX | .MEM)` → `clk` (`cur_clk` before ROCm 6.1), MHz
- `amdsmi_get_gpu_activity(h)` → `gfx_activity`, `umc_activity`, percent
- `amdsmi_get_gpu_vram_usage(h)` → `vram_used`, MB (`amdsmi_vram_usage_t`: "In MB", i.e. MiB)
- `amdsmi_get_violation_status(h)` (MI300 and later; replaces throttle status) → `per_ppt_pwr` /
  `per_socket_thrm` (percent of time in power / thermal violation, PVIOL / TVIOL) and
  `active_ppt_pwr` / `active_socket_thrm` (bool)
- `amdsmi_set_gpu_perf_determinism_mode(h, clkvalue)`, `amdsmi_get_rocm_version()` → (found, str)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from aaco_pipelines.execution.ticker import BackgroundSampler

SAMPLES_SCHEMA = pa.schema(
    [
        ("timestamp_ns", pa.int64()),
        ("device", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("unit", pa.string()),
    ]
)

UNITS = {
    "socket_power": "W",
    "hotspot_temperature": "C",
    "memory_temperature": "C",
    "gfx_clock": "MHz",
    "memory_clock": "MHz",
    "gfx_activity": "percent",
    "memory_activity": "percent",
    "vram_used": "bytes",
    "power_violation": "percent",
    "thermal_violation": "percent",
}
_MIB = 1024 * 1024

Reader = Callable[[Any, Any], dict[str, float | None]]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def amdsmi_status() -> tuple[object | None, str | None]:
    """(the initialized amdsmi module, None), or (None, why it cannot be used); never raises.

    `import amdsmi` raises KeyError, not ImportError, when the package is installed but
    libamd_smi.so is missing, so every exception is caught.
    """
    try:
        import amdsmi
    except ModuleNotFoundError as exc:
        if exc.name == "amdsmi":
            return None, "amdsmi not installed"
        return None, f"import amdsmi failed ({_describe(exc)})"
    except KeyError as exc:
        return None, f"libamd_smi.so missing (KeyError {exc})"
    except Exception as exc:
        return None, f"import amdsmi failed ({_describe(exc)})"
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:
        return None, f"amdsmi_init failed: {_describe(exc)}"
    return amdsmi, None


# --- Readers: one amdsmi call each, returning {metric: value, or None when not reported} --------


def _number(value: Any) -> float | None:
    """amdsmi reports an unavailable field as the string "N/A"."""
    if isinstance(value, bool | int | float):
        return float(value)
    return None


def _first(info: dict, *keys: str) -> float | None:
    for key in keys:
        value = _number(info.get(key))
        if value is not None:
            return value
    return None


def _read_power(smi: Any, handle: Any) -> dict[str, float | None]:
    info = smi.amdsmi_get_power_info(handle)
    return {"socket_power": _first(info, "current_socket_power", "average_socket_power")}


def _temperature(metric: str, sensor: str) -> Reader:
    def read(smi: Any, handle: Any) -> dict[str, float | None]:
        kind = getattr(smi.AmdSmiTemperatureType, sensor)
        value = smi.amdsmi_get_temp_metric(handle, kind, smi.AmdSmiTemperatureMetric.CURRENT)
        return {metric: _number(value)}

    return read


def _clock(metric: str, domain: str) -> Reader:
    def read(smi: Any, handle: Any) -> dict[str, float | None]:
        info = smi.amdsmi_get_clock_info(handle, getattr(smi.AmdSmiClkType, domain))
        return {metric: _first(info, "clk", "cur_clk")}

    return read


def _read_activity(smi: Any, handle: Any) -> dict[str, float | None]:
    info = smi.amdsmi_get_gpu_activity(handle)
    return {
        "gfx_activity": _first(info, "gfx_activity"),
        "memory_activity": _first(info, "umc_activity"),
    }


def _read_vram(smi: Any, handle: Any) -> dict[str, float | None]:
    used_mib = _first(smi.amdsmi_get_gpu_vram_usage(handle), "vram_used")
    return {"vram_used": None if used_mib is None else used_mib * _MIB}


def _violation(status: dict, kind: str) -> float | None:
    """Percent of time in violation; from the active flag (0 or 100) when no percentage."""
    percent = _first(status, f"per_{kind}")
    if percent is not None:
        return percent
    active = _number(status.get(f"active_{kind}"))
    return None if active is None else 100.0 * bool(active)


def _read_violation(smi: Any, handle: Any) -> dict[str, float | None]:
    status = smi.amdsmi_get_violation_status(handle)
    return {
        "power_violation": _violation(status, "ppt_pwr"),
        "thermal_violation": _violation(status, "socket_thrm"),
    }


READERS: tuple[tuple[str, Reader], ...] = (
    ("amdsmi_get_power_info", _read_power),
    ("amdsmi_get_temp_metric(HOTSPOT)", _temperature("hotspot_temperature", "HOTSPOT")),
    ("amdsmi_get_temp_metric(VRAM)", _temperature("memory_temperature", "VRAM")),
    ("amdsmi_get_clock_info(GFX)", _clock("gfx_clock", "GFX")),
    ("amdsmi_get_clock_info(MEM)", _clock("memory_clock", "MEM")),
    ("amdsmi_get_gpu_activity", _read_activity),
    ("amdsmi_get_gpu_vram_usage", _read_vram),
    ("amdsmi_get_violation_status", _read_violation),
)


# --- The sampler ---------------------------------------------------------------------------------


class GpuSampler(BackgroundSampler):
    """Samples every selected GPU at a fixed rate until stopped; long-format rows.

    Without an `amdsmi_module` it initializes amdsmi itself (and shuts it down on stop); when
    amdsmi cannot be used, `available` is False, `reason` says why and stop() returns no rows.
    """

    def __init__(
        self,
        interval_s: float = 0.1,
        gpu_indices: Sequence[int] | None = None,
        amdsmi_module: Any = None,
    ):
        super().__init__(interval_s, "aaco-gpu-sampler")  # errors: first failure per reader
        self._noted: set[tuple[str, str]] = set()
        self._samples: list[tuple] = []  # (timestamp_ns, device, metric, value, unit)
        self._lock = threading.Lock()
        self._table: pa.Table | None = None
        self._owns_amdsmi = amdsmi_module is None
        if amdsmi_module is None:
            amdsmi_module, self.reason = amdsmi_status()
        else:
            self.reason = None
        self._smi = amdsmi_module
        self._devices = self._select_devices(gpu_indices) if self._smi is not None else []
        self.available = bool(self._devices)
        if not self.available:
            self._shut_down()

    @property
    def amdsmi(self) -> Any:
        """The initialized amdsmi module this sampler reads (None when unavailable)."""
        return self._smi

    def _select_devices(self, gpu_indices: Sequence[int] | None) -> list[tuple[str, Any]]:
        try:
            handles = list(self._smi.amdsmi_get_processor_handles())
        except Exception as exc:
            self.reason = f"amdsmi_get_processor_handles failed: {_describe(exc)}"
            return []
        wanted = range(len(handles)) if gpu_indices is None else gpu_indices
        devices = [(f"gpu{i}", handles[i]) for i in wanted if 0 <= i < len(handles)]
        if not devices:
            self.reason = f"no GPU to sample: amdsmi lists {len(handles)}, asked for {list(wanted)}"
        return devices

    def start(self) -> None:
        if self.available:
            super().start()

    def sample_once(self) -> None:
        """Read every metric of every selected GPU now; a failing read only loses itself."""
        for device, handle in self._devices:
            timestamp = time.time_ns()
            readings = [r for name, read in READERS for r in self._read(device, name, read, handle)]
            with self._lock:
                self._samples.extend(
                    (timestamp, device, metric, value, UNITS[metric]) for metric, value in readings
                )

    def _read(self, device: str, name: str, read: Reader, handle: Any) -> list[tuple[str, float]]:
        try:
            values = read(self._smi, handle)
        except Exception as exc:  # unsupported on this part, or a transient driver error
            self._note(device, name, _describe(exc))
            return []
        for metric, value in values.items():
            if value is None:
                self._note(device, metric, "not reported (N/A)")
        return [(metric, value) for metric, value in values.items() if value is not None]

    def _note(self, device: str, what: str, why: str) -> None:
        if (device, what) not in self._noted:
            self._noted.add((device, what))
            self.errors.append(f"{device} {what}: {why}")

    def stop(self) -> pa.Table:
        """Stop sampling (after one last tick) and return the raw samples; safe to call twice."""
        if self._table is not None:
            return self._table
        if self._join():
            self.sample_once()
        self._shut_down()
        with self._lock:
            samples = list(self._samples)
        columns = [[sample[i] for sample in samples] for i in range(len(SAMPLES_SCHEMA))]
        self._table = pa.Table.from_arrays(
            [
                pa.array(values, field.type)
                for values, field in zip(columns, SAMPLES_SCHEMA, strict=True)
            ],
            schema=SAMPLES_SCHEMA,
        )
        return self._table

    def _shut_down(self) -> None:
        """Release amdsmi if this sampler initialized it."""
        if self._owns_amdsmi and self._smi is not None:
            try:
                self._smi.amdsmi_shut_down()
            except Exception as exc:
                self.errors.append(f"amdsmi_shut_down: {_describe(exc)}")
            self._smi = None


# --- Laboratory mode and version ----------------------------------------------------------------


def request_performance_determinism(amdsmi_module: Any, clock_mhz: int) -> dict[str, str]:
    """Cap every GPU's GFX clock at `clock_mhz` in determinism mode; per GPU what happened.

    Determinism mode trades peak clock for run-to-run stability, which is what a comparison of
    two measurements needs. It needs root and a part that supports it, so a refusal is recorded
    ("refused: <reason>"), never raised: an unlocked run is still a run, only noisier.
    """
    if amdsmi_module is None:
        return {"all": "refused: amdsmi not available"}
    try:
        handles = list(amdsmi_module.amdsmi_get_processor_handles())
    except Exception as exc:
        return {"all": f"refused: {_describe(exc)}"}
    results = {}
    for index, handle in enumerate(handles):
        try:
            amdsmi_module.amdsmi_set_gpu_perf_determinism_mode(handle, int(clock_mhz))
            results[f"gpu{index}"] = "applied"
        except Exception as exc:
            results[f"gpu{index}"] = f"refused: {_describe(exc)}"
    return results


def rocm_version_from_amdsmi(amdsmi_module: Any) -> str | None:
    """The ROCm version amdsmi reads from rocm-core, or None; never raises.

    amdsmi_get_lib_version() is amdsmi's own version, not ROCm's, so it is not a fallback.
    """
    try:
        found, version = amdsmi_module.amdsmi_get_rocm_version()
    except Exception:
        return None
    return str(version) if found and version else None

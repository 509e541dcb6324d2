"""What a measurement ran on: host, CPU, runtime, ROCm stack, as one JSON-serializable record.

A latency number is only comparable with another taken on the same stack, so every session keeps
this record and a fingerprint of the parts that change performance. Every probe is best effort: a
missing file or a failing library records None and a short reason in `unavailable`, never raises,
because a half-known environment is still worth recording.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_CPU_SYSFS = Path("/sys/devices/system/cpu")
_CPUINFO = Path("/proc/cpuinfo")
_AMDGPU_VERSION = Path("/sys/module/amdgpu/version")

PACKAGES = (
    "onnxruntime",
    "onnxruntime-rocm",
    "onnxruntime-gpu",
    "onnxruntime-migraphx",
    "onnx",
    "numpy",
    "pyarrow",
    "duckdb",
    "dagster",
    "scipy",
    "amdsmi",
)


class Unavailable(Exception):
    """A probe found nothing; the message is the reason recorded in `unavailable`."""


# --- CPU readers (shared with the host sampler and laboratory mode) -------------------------------


def online_cpus() -> list[int]:
    """Logical CPU ids the kernel has online, e.g. "0-3,6" -> [0, 1, 2, 3, 6]."""
    try:
        text = (_CPU_SYSFS / "online").read_text().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def cpuinfo_field(field: str) -> dict[int, str]:
    """One /proc/cpuinfo field per processor id ({} when the file or field is absent)."""
    try:
        text = _CPUINFO.read_text()
    except OSError:
        return {}
    values: dict[int, str] = {}
    processor = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            processor = int(value)
        elif key == field and processor is not None:
            values[processor] = value.strip()
    return values


def _read_sysfs(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_governors(cpus: Sequence[int]) -> dict[int, str | None]:
    """The cpufreq scaling governor per CPU; None where cpufreq is absent (VMs, containers)."""
    return {cpu: _read_sysfs(_CPU_SYSFS / f"cpu{cpu}/cpufreq/scaling_governor") for cpu in cpus}


def cpu_frequencies_mhz(cpus: Sequence[int]) -> dict[int, float | None]:
    """Current MHz per CPU: cpufreq's scaling_cur_freq (kHz), else /proc/cpuinfo "cpu MHz"."""
    frequencies: dict[int, float | None] = {}
    for cpu in cpus:
        khz = _read_sysfs(_CPU_SYSFS / f"cpu{cpu}/cpufreq/scaling_cur_freq")
        frequencies[cpu] = int(khz) / 1000.0 if khz and khz.isdigit() else None
    if any(value is None for value in frequencies.values()):
        cpuinfo = cpuinfo_field("cpu MHz")
        for cpu, value in frequencies.items():
            if value is None and cpu in cpuinfo:
                frequencies[cpu] = float(cpuinfo[cpu])
    return frequencies


# --- Probes --------------------------------------------------------------------------------------


def _probe(unavailable: dict[str, str], name: str, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Unavailable as exc:
        unavailable[name] = str(exc)
    except Exception as exc:  # a probe must never break the measurement it describes
        unavailable[name] = f"{type(exc).__name__}: {exc}"
    return None


def _cpu_model() -> str:
    models = cpuinfo_field("model name")
    if not models:
        raise Unavailable("no 'model name' in /proc/cpuinfo")
    return next(iter(models.values()))


def _physical_cores() -> int:
    import psutil

    count = psutil.cpu_count(logical=False)
    if count is None:
        raise Unavailable("psutil cannot tell physical cores on this host")
    return count


def _memory_total_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def _governors(cpus: Sequence[int]) -> dict[str, str | None]:
    governors = cpu_governors(cpus)
    if all(value is None for value in governors.values()):
        raise Unavailable(f"no cpufreq scaling_governor under {_CPU_SYSFS}/cpu*/cpufreq")
    return {f"cpu{cpu}": value for cpu, value in governors.items()}


def _frequencies(cpus: Sequence[int]) -> dict[str, float | None]:
    frequencies = cpu_frequencies_mhz(cpus)
    if all(value is None for value in frequencies.values()):
        raise Unavailable("neither cpufreq scaling_cur_freq nor /proc/cpuinfo 'cpu MHz'")
    return {f"cpu{cpu}": value for cpu, value in frequencies.items()}


def _package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _onnxruntime() -> dict[str, Any]:
    import onnxruntime

    return {
        "version": onnxruntime.__version__,
        "providers": list(onnxruntime.get_available_providers()),
        "device": onnxruntime.get_device(),
    }


def _amdsmi() -> dict[str, Any]:
    """ROCm version and GPU names from amdsmi.

    `import amdsmi` raises KeyError, not ImportError, when libamd_smi.so is missing, so the caller
    catches every exception here.
    """
    import amdsmi

    amdsmi.amdsmi_init()
    try:
        gpus = []
        for handle in amdsmi.amdsmi_get_processor_handles():
            asic = amdsmi.amdsmi_get_gpu_asic_info(handle)
            gpus.append(asic.get("market_name") or asic.get("asic_serial") or "AMD GPU")
        rocm_version = None
        if hasattr(amdsmi, "amdsmi_get_rocm_version"):
            found, version = amdsmi.amdsmi_get_rocm_version()
            rocm_version = version if found else None
        return {"gpus": gpus, "rocm_version": rocm_version}
    finally:
        amdsmi.amdsmi_shut_down()


def _rocm_version_file() -> str:
    candidates = [Path(os.environ["ROCM_PATH"])] if os.environ.get("ROCM_PATH") else []
    candidates.append(Path("/opt/rocm"))
    for root in candidates:
        version = _read_sysfs(root / ".info" / "version")
        if version:
            return version
    where = " or ".join(str(root / ".info" / "version") for root in candidates)
    raise Unavailable(f"no ROCm install found ({where} absent)")


def _gpu_driver_version() -> str:
    version = _read_sysfs(_AMDGPU_VERSION)
    if version is None:
        raise Unavailable(f"{_AMDGPU_VERSION} absent (amdgpu module not loaded or in-tree build)")
    return version


def _rocprofv3() -> str:
    path = shutil.which("rocprofv3")
    if path is None:
        raise Unavailable("rocprofv3 not on PATH")
    return path


def _rocm_version(smi: dict, unavailable: dict[str, str]) -> str | None:
    """amdsmi's ROCm version, else the install's .info/version."""
    version = smi.get("rocm_version")
    if version is None:
        version = _probe(unavailable, "rocm_version", _rocm_version_file)
    return version


def rocm_version() -> tuple[str | None, str]:
    """The ROCm version as capture_environment records it, and where it was read (or why it
    is unknown): for the runner, which chooses rocprofv3's output format by it."""
    unavailable: dict[str, str] = {}
    smi = _probe(unavailable, "amdsmi", _amdsmi) or {}
    version = _rocm_version(smi, unavailable)
    if version is not None:
        return version, "amdsmi" if smi.get("rocm_version") else "the ROCm install's .info/version"
    return None, "; ".join(unavailable.values())


def capture_environment() -> dict:
    """Everything about this host and runtime that could explain a latency difference."""
    unavailable: dict[str, str] = {}
    cpus = online_cpus()
    ort = _probe(unavailable, "onnxruntime", _onnxruntime) or {}
    smi = _probe(unavailable, "amdsmi", _amdsmi) or {}
    rocm_version = _rocm_version(smi, unavailable)
    return {
        "captured_at": time.time_ns(),
        "hostname": socket.gethostname(),
        "os": {
            "system": platform.system(),
            "kernel_release": platform.release(),
            "kernel_version": platform.version(),
        },
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "cpu": {
            "model": _probe(unavailable, "cpu_model", _cpu_model),
            "logical_cores": os.cpu_count(),
            "physical_cores": _probe(unavailable, "physical_cores", _physical_cores),
            "governors": _probe(unavailable, "cpu_governor", lambda: _governors(cpus))
            or dict.fromkeys((f"cpu{cpu}" for cpu in cpus), None),
            "frequency_mhz": _probe(unavailable, "cpu_frequency", lambda: _frequencies(cpus)),
        },
        "memory_total_bytes": _probe(unavailable, "memory_total", _memory_total_bytes),
        "onnxruntime_version": ort.get("version"),
        "onnxruntime_providers": ort.get("providers"),
        "onnxruntime_device": ort.get("device"),
        "packages": _probe(unavailable, "packages", _package_versions),
        "rocm_version": rocm_version,
        "gpu_driver_version": _probe(unavailable, "gpu_driver_version", _gpu_driver_version),
        "gpus": smi.get("gpus", []),
        "rocprofv3": _probe(unavailable, "rocprofv3", _rocprofv3),
        "unavailable": unavailable,
    }


FINGERPRINT_KEYS = (
    "rocm_version",
    "gpu_driver_version",
    "onnxruntime_version",
    "onnxruntime_providers",
)


def fingerprint_parts(env: dict) -> dict:
    """The parts of the environment that change kernel choice and so performance."""
    return {key: env.get(key) for key in FINGERPRINT_KEYS}


def runtime_fingerprint(env: dict) -> str:
    """sha256 of the fingerprint parts: equal fingerprints mean comparable runtimes."""
    canonical = json.dumps(fingerprint_parts(env), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()

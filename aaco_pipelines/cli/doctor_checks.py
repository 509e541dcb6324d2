"""`aaco doctor`: what this host can measure, and what each gap costs the measurements.

Every check reuses the probe the measurement itself uses (environment, providers, gpu_sampler,
laboratory), so the doctor cannot disagree with a run. Checks never raise: a doctor reports. A
row is redacted: a probe's error may quote a connection string, password and all.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.redaction import redact

OK, MISSING, WARNING = "OK", "missing", "warning"
PROBLEM = "problem"  # present but broken: nothing that needs it works until it is fixed


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK | missing | warning | problem
    detail: str
    meaning: str  # what the status means for measurements

    def __post_init__(self):
        for field in ("detail", "meaning"):
            object.__setattr__(self, field, redact(getattr(self, field)))


def check_python() -> Check:
    detail = f"{platform.python_version()} ({sys.executable})"
    return Check("Python", OK, detail, "measuring processes run under this interpreter")


def check_onnxruntime() -> Check:
    from aaco_pipelines.execution.environment import _onnxruntime
    from aaco_pipelines.execution.providers import amd_gpu_visible

    ort = _onnxruntime()
    providers = ort["providers"]
    gpu = [p for p in providers if p.startswith(("MIGraphX", "ROCM"))]
    detail = f"{ort['version']}; providers: {', '.join(providers)}"
    if gpu and amd_gpu_visible():
        return Check("ONNX Runtime", OK, detail, f"GPU providers available: {', '.join(gpu)}")
    if gpu:  # onnxruntime-rocm lists its provider even without a GPU, then runs on the CPU
        return Check("ONNX Runtime", WARNING, detail, "GPU providers listed, but no GPU: CPU runs")
    return Check(
        "ONNX Runtime",
        WARNING,
        detail,
        "CPU provider only: install onnxruntime-migraphx or onnxruntime-rocm for GPU sessions",
    )


def check_rocm() -> Check:
    from aaco_pipelines.execution.environment import _rocm_version_file

    return Check("ROCm", OK, _rocm_version_file(), "recorded in every session's fingerprint")


def check_amdsmi() -> Check:
    from aaco_pipelines.execution.gpu_sampler import amdsmi_status, rocm_version_from_amdsmi

    smi, reason = amdsmi_status()
    if smi is None:
        return Check("amdsmi", MISSING, reason, "no GPU telemetry (power, clocks, throttling)")
    version = rocm_version_from_amdsmi(smi)
    smi.amdsmi_shut_down()
    return Check("amdsmi", OK, f"ROCm {version or '?'}", "GPU telemetry sampled during runs")


def check_rocprofv3() -> Check:
    from aaco_pipelines.execution.environment import _rocprofv3

    return Check("rocprofv3", OK, _rocprofv3(), "GPU kernel traces come from rocprofv3")


def check_gpus() -> Check:
    from aaco_pipelines.execution.gpu_sampler import amdsmi_status
    from aaco_pipelines.execution.providers import amd_gpu_visible

    if not amd_gpu_visible():
        return Check(
            "AMD GPUs", MISSING, "/dev/kfd absent", "sessions run on the CPU provider only"
        )
    smi, reason = amdsmi_status()
    if smi is None:
        return Check("AMD GPUs", WARNING, f"/dev/kfd present; {reason}", "GPU count unknown")
    try:
        count = len(smi.amdsmi_get_processor_handles())
    finally:
        smi.amdsmi_shut_down()
    status = OK if count else WARNING
    return Check(
        "AMD GPUs", status, f"{count} via amdsmi", "GPU providers are chosen automatically"
    )


def check_cgroup() -> Check:
    from aaco_pipelines.execution.laboratory import cgroup2_mount

    mount = cgroup2_mount()
    if mount is None:
        return Check("cgroup v2", MISSING, "no cgroup2 mount", "laboratory mode cannot fence runs")
    handed = set(_read(mount / "cgroup.subtree_control").split())
    writable = os.access(mount, os.W_OK)
    detail = f"{mount}; delegated: {' '.join(sorted(handed)) or 'none'}; writable: {writable}"
    if {"cpuset", "memory"} <= handed and writable:
        return Check("cgroup v2", OK, detail, "laboratory runs get a cpuset and a memory limit")
    return Check(
        "cgroup v2",
        WARNING,
        detail,
        "laboratory mode pins cores but cannot enforce cpuset/memory limits",
    )


def check_pinning() -> Check:
    from aaco_pipelines.execution.laboratory import laboratory_settings

    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, allowed)  # re-applying the current set proves we may pin
    cores = laboratory_settings().cores
    detail = f"allowed cores {sorted(allowed)}; laboratory worker gets {list(cores)}"
    if len(allowed) < 2:
        return Check("CPU pinning", WARNING, detail, "worker shares its core with the sampler")
    return Check("CPU pinning", OK, detail, "laboratory runs are pinned")


def check_dagster_home(paths: AacoPaths) -> Check:
    from aaco_pipelines.instance import POSTGRES_ENV, check_postgres, postgres_url

    home = Path(os.environ.get("DAGSTER_HOME") or paths.dagster_home)
    if os.environ.get(POSTGRES_ENV):
        try:
            check_postgres(postgres_url(os.environ[POSTGRES_ENV]))
        except AacoInputError as exc:
            return Check("Dagster instance", PROBLEM, exc.problem, f"no run is recorded: {exc.fix}")
    if (home / "dagster.yaml").is_file():
        return Check("Dagster instance", OK, str(home), "run history and drift series persist")
    return Check(
        "Dagster instance",
        MISSING,
        f"{home} (no dagster.yaml)",
        "created by `aaco ui`; until then there is no run history",
    )


def check_tracelake(paths: AacoPaths) -> Check:
    from aaco_pipelines.tracelake.ducklake import shared_lake
    from aaco_pipelines.tracelake.locking import TraceLakeBusy, TraceLakeDamaged
    from aaco_pipelines.tracelake.schema import SCHEMA_VERSION
    from aaco_pipelines.tracelake.store import TraceLake

    where = shared_lake() or paths.tracelake
    lake = TraceLake(paths.tracelake, lock_timeout_s=5)
    if not lake.exists():
        return Check(
            "TraceLake",
            MISSING,
            f"{where} (not created yet)",
            "created by the first measured or ingested session",
        )
    try:
        version = lake.schema_version(check_blocks=True)
    except TraceLakeDamaged as exc:
        detail = f"{where}: {exc.problem}"
        return Check("TraceLake", PROBLEM, detail, f"no session can be stored or read: {exc.fix}")
    except TraceLakeBusy as exc:
        detail = f"{where}: {exc.problem}"
        return Check("TraceLake", WARNING, detail, f"aaco commands wait, then fail: {exc.fix}")
    except AacoInputError as exc:  # a shared lake's catalog that refuses us or is down
        return Check("TraceLake", PROBLEM, exc.problem, f"no session is stored or read: {exc.fix}")
    detail = f"{where}; schema v{version} (this aaco: v{SCHEMA_VERSION})"
    if version is None or version < SCHEMA_VERSION:
        return Check("TraceLake", WARNING, detail, "migrated on the next write")
    if version > SCHEMA_VERSION:
        return Check("TraceLake", WARNING, detail, "written by a newer aaco: upgrade")
    return Check("TraceLake", OK, detail, "sessions are stored and queryable")


def check_registry(paths: AacoPaths) -> Check:
    """The registry as the sensor and sweeps see it: each model file that cannot be measured
    is named with why and the fix (the first in full; `aaco registry list` shows them all)."""
    from aaco_pipelines.registry.scan import read_registry

    registry = paths.registry
    if not registry.is_dir():
        return Check(
            "Model registry", MISSING, f"{registry} (no such folder)", "no model is measured"
        )
    scan = read_registry(registry)
    detail = f"{len(scan.models)} models in {registry}"
    if not scan.problems:
        if scan.models:
            return Check("Model registry", OK, detail, "every model file is measured")
        return Check(
            "Model registry", MISSING, detail, "no model is measured: aaco zoo build adds some"
        )
    first = next(iter(scan.problems.values()))
    more = len(scan.problems) - 1
    others = f" (and {more} more: aaco registry list)" if more else ""
    return Check(
        "Model registry",
        WARNING,
        f"{detail}; {len(scan.problems)} not measured: {first}{others}",
        "those are skipped by the sensor, sweeps and runs until fixed; every other model is "
        "measured",
    )


def check_interrupted(paths: AacoPaths) -> Check:
    """What killed or failed runs left behind (aaco_pipelines.execution.session_folders)."""
    from aaco_pipelines.execution.session_folders import find_leftovers, grace_s, lake_states
    from aaco_pipelines.tracelake.store import TraceLake

    states = lake_states(TraceLake(paths.tracelake, lock_timeout_s=5))
    found = find_leftovers(paths, states, grace=0)
    if not found:
        unread = "; TraceLake unreadable: only staging checked" if states is None else ""
        return Check("Interrupted runs", OK, f"none{unread}", "nothing half-written is left")
    kinds = sorted({o.kind for o in found})
    counts = ", ".join(f"{sum(o.kind == k for o in found)} {k}" for k in kinds)
    oldest = max(found, key=lambda o: o.age_s)
    return Check(
        "Interrupted runs",
        WARNING,
        f"{counts}; oldest: {oldest.line()}",
        "invisible to reports; moved to failed/ at the next run's start (sessions once "
        f"{grace_s():.0f} s old, AACO_ORPHAN_GRACE_S)",
    )


def check_evidence(paths: AacoPaths) -> Check:
    """Every complete session's bundle against its manifest, as reports check it (size and
    mtime; aaco_pipelines.bundle.manifest): a changed bundle is named, its numbers refused."""
    from aaco_pipelines.bundle.manifest import check_bundles
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(paths.tracelake, lock_timeout_s=5)
    checks = check_bundles(lake, sessions=paths.sessions) if lake.exists() else []
    changed = [c for c in checks if c.state == "changed"]
    if changed:
        first = changed[0]
        return Check(
            "Evidence",
            PROBLEM,
            f"{len(changed)} of {len(checks)} sessions changed; session {first.session_id}: "
            f"{first.line()}",
            "reports and diffs refuse them: restore the files from a backup or measure again "
            "(`aaco verify` hashes every file)",
        )
    if not checks:
        return Check("Evidence", OK, "no sessions yet", "each session's bundle is checked")
    counts = {state: sum(c.state == state for c in checks) for state in ("ok", "not_covered")}
    elsewhere = len(checks) - sum(counts.values())
    detail = (
        f"{counts['ok']} sessions match their manifests; {counts['not_covered']} written "
        f"before manifests; {elsewhere} without a bundle here"
    )
    return Check("Evidence", OK, detail, "`aaco verify` hashes every file in full")


CHECKS: tuple[tuple[str, Callable], ...] = (
    ("Python", check_python),
    ("ONNX Runtime", check_onnxruntime),
    ("ROCm", check_rocm),
    ("amdsmi", check_amdsmi),
    ("rocprofv3", check_rocprofv3),
    ("AMD GPUs", check_gpus),
    ("cgroup v2", check_cgroup),
    ("CPU pinning", check_pinning),
)
MISSING_MEANS = {
    "ROCm": "no ROCm install: GPU providers and the ROCm version record are unavailable",
    "rocprofv3": "no device trace: kernels come from ONNX Runtime's profiler (host view)",
}


def run_checks(paths: AacoPaths) -> list[Check]:
    """Every check, in order; a probe that fails becomes a `missing` check with its reason."""
    checks = [*CHECKS, ("Dagster instance", lambda: check_dagster_home(paths))]
    checks.append(("TraceLake", lambda: check_tracelake(paths)))
    checks.append(("Interrupted runs", lambda: check_interrupted(paths)))
    checks.append(("Evidence", lambda: check_evidence(paths)))
    checks.append(("Model registry", lambda: check_registry(paths)))
    return [_guarded(name, probe) for name, probe in checks]


def _guarded(name: str, probe: Callable[[], Check]) -> Check:
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - a failing probe is a finding, not a crash
        meaning = MISSING_MEANS.get(name, "this part cannot be used for measurements")
        return Check(name, MISSING, str(exc) or type(exc).__name__, meaning)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def format_checks(checks: list[Check]) -> str:
    """An aligned table: check, status, detail, and what it means."""
    rows = [("check", "status", "detail", "meaning")]
    rows += [(c.name, c.status, c.detail, c.meaning) for c in checks]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        + "  "
        + row[3]
        for row in rows
    )

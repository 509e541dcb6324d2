"""`aaco doctor`: every check is reported, with what a gap means for measurements."""

from __future__ import annotations

import sys

from aaco_pipelines.cli import main
from aaco_pipelines.cli.doctor_checks import MISSING, OK, run_checks
from aaco_pipelines.execution.providers import amd_gpu_visible

NAMES = [
    "Python",
    "ONNX Runtime",
    "ROCm",
    "amdsmi",
    "rocprofv3",
    "AMD GPUs",
    "cgroup v2",
    "CPU pinning",
    "Dagster instance",
    "TraceLake",
    "Interrupted runs",
    "Evidence",
    "Model registry",
]


def test_every_check_is_reported_with_a_meaning(aaco_paths):
    checks = {check.name: check for check in run_checks(aaco_paths)}
    assert list(checks) == NAMES
    assert all(check.status in ("OK", "missing", "warning") for check in checks.values())
    assert all(check.detail and check.meaning for check in checks.values())
    assert checks["Python"].status == OK
    assert checks["ONNX Runtime"].status != MISSING and "CPUExecutionProvider" in (
        checks["ONNX Runtime"].detail
    )
    if not amd_gpu_visible():  # this CI host: no ROCm GPU, reported as such
        assert checks["AMD GPUs"].status == MISSING and "CPU" in checks["AMD GPUs"].meaning
    assert checks["TraceLake"].status == MISSING
    assert checks["Interrupted runs"].status == OK
    assert not aaco_paths.tracelake.exists()  # the doctor looked without creating it


def test_cli_prints_an_aligned_table_and_exits_0(aaco_paths, capsys):
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(NAMES) + 1
    for name, line in zip(NAMES, lines[1:], strict=True):
        assert line.startswith(name)
    status_column = lines[0].index("status")
    assert all(
        line[status_column:].split()[0] in ("OK", "missing", "warning") for line in lines[1:]
    )


def test_amdsmi_without_its_library_is_missing_not_a_crash(aaco_paths, tmp_path, monkeypatch):
    # The real package raises KeyError, not ImportError, when libamd_smi.so is absent.
    (tmp_path / "amdsmi.py").write_text("raise KeyError('libamd_smi.so')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    check = next(c for c in run_checks(aaco_paths) if c.name == "amdsmi")
    assert check.status == MISSING and "libamd_smi.so" in check.detail
    assert "telemetry" in check.meaning

"""`aaco doctor`: what this host can measure (runtime, ROCm, GPUs, TraceLake)."""

from __future__ import annotations

from aaco_pipelines.cli.common import add_json_option, emit, print_json, with_examples
from aaco_pipelines.config import AacoPaths


def cmd_doctor(args, paths: AacoPaths) -> int:
    """What this host can measure; always exits 0, since a doctor reports."""
    from aaco_pipelines.cli.doctor_checks import format_checks, run_checks

    checks = run_checks(paths)
    if args.json:
        print_json(checks)  # [{name, status, detail, meaning}]
    else:
        emit(format_checks(checks))
    return 0


def add_parser(sub) -> None:
    doctor = sub.add_parser("doctor", help="check this host: runtime, ROCm, GPUs, TraceLake")
    add_json_option(doctor, "the checks")
    with_examples(doctor, "aaco doctor", "aaco doctor --json")
    doctor.set_defaults(func=cmd_doctor)

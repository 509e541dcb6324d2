"""Runtime environments: another ONNX Runtime, installed in an environment of its own.

A performance engineer who suspects a runtime upgrade installs the older runtime beside the
current one (`python -m venv old && old/bin/pip install onnxruntime==1.20.1 numpy`) and names
the environment (its folder or its interpreter). Each is probed in a process of its own, under
its own interpreter, isolated (`-I`): which ONNX Runtime it imports, with which providers, and
so the runtime fingerprint a session measured there would carry on this host.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.environment import runtime_fingerprint

RUNTIME_PROCESS = Path(__file__).with_name("runtime_process.py")
PROBE_TIMEOUT_S = 120.0
INSTALL_HINT = "python -m venv ENV && ENV/bin/pip install onnxruntime==VERSION numpy"


@dataclass(frozen=True)
class Runtime:
    """An environment's interpreter and the ONNX Runtime it imports."""

    python: str  # as given (a venv's bin/python is a link: resolving it would leave the venv)
    onnxruntime_version: str
    onnxruntime_providers: tuple[str, ...]
    onnxruntime_device: str
    python_version: str

    @property
    def label(self) -> str:
        return f"onnxruntime {self.onnxruntime_version} ({self.python})"

    def fingerprint(self, host_env: dict) -> str:
        """The runtime fingerprint a session measured with this runtime on this host carries
        (the host's ROCm and driver, this environment's ONNX Runtime)."""
        return runtime_fingerprint(
            {
                **host_env,
                "onnxruntime_version": self.onnxruntime_version,
                "onnxruntime_providers": list(self.onnxruntime_providers),
            }
        )


def interpreter(environment: str | Path) -> Path:
    """An environment's interpreter: the folder's bin/python (a virtual environment, a conda
    prefix), or the file itself."""
    given = Path(environment).expanduser().absolute()
    for candidate in (given / "bin" / "python", given / "bin" / "python3", given):
        if candidate.is_file():
            return candidate
    raise AacoInputError(
        f"no Python interpreter in or at {given}",
        path=given,
        fix=f"give an environment's folder or its bin/python; to make one: {INSTALL_HINT}",
    )


def find_runtime(environment: str | Path) -> Runtime:
    """Probe an environment: which ONNX Runtime its interpreter imports."""
    python = interpreter(environment)
    try:
        done = subprocess.run(
            [str(python), "-I", str(RUNTIME_PROCESS), "--probe"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AacoInputError(
            f"the interpreter {python} did not run: {exc}", path=python, fix=INSTALL_HINT
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise AacoInputError(
            f"the environment of {python} cannot import ONNX Runtime: {last}",
            path=python,
            fix=f"install it there: {python.parent}/pip install onnxruntime==VERSION numpy",
        )
    found = json.loads(done.stdout)
    return Runtime(
        python=str(python),
        onnxruntime_version=found["onnxruntime_version"],
        onnxruntime_providers=tuple(found["onnxruntime_providers"]),
        onnxruntime_device=found["onnxruntime_device"],
        python_version=found["python_version"],
    )

"""One model measured side by side under two ONNX Runtimes: two runtime processes, in blocks.

Two runtimes cannot share a process, so each runs in a runtime process of its own under its own
environment's interpreter (execution.runtime_process), both alive for the whole measurement:
driven by side by side's own protocol (execution.side_by_side.alternate: A's block, then B's,
then B's, then A's, each block long enough to hold several iterations, its first iteration not
kept: the other runtime process's pool may still be spinning down). Whatever the host does hits
both runtimes alike, and the result is a SideBySide that governance.gate.paired judges like two
model versions'.

Both runtime processes open the one request (the model, providers, optimization level,
laboratory threads) and are fed the same inputs, made here once and handed over in an .npz
file. On a laboratory request both are pinned to its cores before they open a session (its
threads inherit them).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

import aaco_pipelines
from aaco_pipelines.errors import AacoInputError, MeasuringFailure
from aaco_pipelines.execution.runtime_envs import RUNTIME_PROCESS, Runtime
from aaco_pipelines.execution.side_by_side import DEFAULT_ROUNDS, SideBySide, alternate
from aaco_pipelines.graph.inputs import make_inputs
from aaco_pipelines.registry.sidecar import input_specs_from_json


def measure_across_runtimes(
    request: dict,
    runtime_a: Runtime,
    runtime_b: Runtime,
    rounds: int = DEFAULT_ROUNDS,
    timeout_s: float = 900.0,
) -> SideBySide:
    """The request (a bundle's request.json) measured under runtime A and runtime B."""
    if rounds < 2:
        raise AacoInputError(f"side by side needs 2 rounds or more, got {rounds}", fix="e.g. 20")
    with tempfile.TemporaryDirectory(prefix="aaco-across-runtimes-") as tmp:
        job = _job(request, Path(tmp))
        sides = {
            "a": _RuntimeProcess(runtime_a, Path(tmp), "a"),
            "b": _RuntimeProcess(runtime_b, Path(tmp), "b"),
        }
        stop = threading.Timer(timeout_s, lambda: [p.kill(timeout_s) for p in sides.values()])
        stop.start()
        try:
            for process in sides.values():
                process.open(job, request.get("laboratory"))
            measured = alternate(lambda side, count: sides[side].block(count), rounds)
        finally:
            stop.cancel()
            for process in sides.values():
                process.close()
    return SideBySide.of(measured)


def _job(request: dict, folder: Path) -> dict:
    """What each runtime process opens: the request, and the inputs (positional in the .npz
    file: an input's name is never a keyword or a path there)."""
    feeds = make_inputs(input_specs_from_json(request["inputs"]), seed=request["seed"])
    np.savez(folder / "feeds.npz", *feeds.values())
    package = folder / "package"  # nothing but this package: the caller's environment stays out
    package.mkdir()
    (package / "aaco_pipelines").symlink_to(Path(aaco_pipelines.__file__).parent)
    return {"request": request, "inputs": str(folder / "feeds.npz"), "names": list(feeds)}


class _RuntimeProcess:
    """One runtime's process (execution.runtime_process), asked one line at a time."""

    def __init__(self, runtime: Runtime, folder: Path, side: str):
        self.runtime = runtime
        self.killed_after_s: float | None = None  # the measurement's time limit, once it ran out
        self.stderr = (folder / f"runtime-{side}.stderr").open("w+")
        self.process = subprocess.Popen(
            [runtime.python, "-I", str(RUNTIME_PROCESS), str(folder / "package")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def open(self, job: dict, laboratory: dict | None) -> None:
        if laboratory:  # before the session exists: the runtime's threads inherit the cores
            os.sched_setaffinity(self.process.pid, set(laboratory["cores"]))
        ready = self._ask(job)
        if ready["onnxruntime_version"] != self.runtime.onnxruntime_version:
            raise MeasuringFailure(
                f"{self.runtime.python} imported onnxruntime {ready['onnxruntime_version']} in "
                f"its runtime process, {self.runtime.onnxruntime_version} when probed"
            )

    def block(self, count: int) -> list[int]:
        return self._ask({"block": count})["ns"]

    def _ask(self, message: dict) -> dict:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, ValueError):
            line = ""
        if not line:
            raise MeasuringFailure(
                f"the runtime process of {self.runtime.label} ended "
                f"(exit {self.process.poll()}): " + self._stderr_tail()
            )
        answer = json.loads(line)
        error = answer.get("error")
        if error and error["type"] == "AacoInputError":
            raise AacoInputError(error["problem"], path=error.get("path"), fix=error.get("fix"))
        if error:
            raise MeasuringFailure(f"{self.runtime.label}: {error['type']}: {error['problem']}")
        return answer

    def _stderr_tail(self) -> str:
        if self.killed_after_s is not None:
            return f"the measurement ran past its {self.killed_after_s:.0f} s"
        self.stderr.seek(0)
        return self.stderr.read()[-2000:] or "(nothing on stderr: killed?)"

    def kill(self, after_s: float) -> None:
        self.killed_after_s = after_s
        self.process.kill()

    def close(self) -> None:
        """End of input ends the runtime process; one that does not end is killed."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.stderr.close()

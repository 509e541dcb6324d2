"""Two model versions measured side by side: one process, the same inputs, interleaved blocks.

A comparison of two sessions measured an hour apart also compares the host at those two times:
a neighbour that took the cores during one of them is a "regression". Measured side by side, A
and B run in alternating blocks (A B B A, A B B A, ...: the mirrored order cancels a slow drift
of the host within a pair of rounds), each block long enough to hold several iterations, so
whatever the host does hits both versions alike and a paired statistic per round cancels it.
This is how trace-based bisection tools compare two builds.

Each version is opened exactly as its session's request opened it (providers, graph
optimization level, disabled optimizers, laboratory threads) and fed the inputs its request
names, from the same seed. The first iteration of every block is not kept: the other session's
thread pool may still be spinning down from its block.

Started as `python -m aaco_pipelines.execution.side_by_side JOB.json` by `measure_side_by_side`,
in a process of its own like every measurement, so a crash cannot take the caller down. It
writes RESULT.json beside the job: each version's latencies (ns) per round.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aaco_pipelines.bundle.session_bundle import write_json
from aaco_pipelines.errors import AacoInputError, MeasuringFailure
from aaco_pipelines.execution.laboratory import LaboratorySettings, pin_current_process
from aaco_pipelines.execution.lifeline import Lifeline, watch_parent
from aaco_pipelines.execution.measuring_process import progress
from aaco_pipelines.execution.ort_session import create_session, resolve_providers, session_options
from aaco_pipelines.execution.runtime_process import timed_block
from aaco_pipelines.graph.inputs import make_inputs
from aaco_pipelines.registry.sidecar import input_specs_from_json

WARMUP_ITERATIONS = 5
BLOCK_SECONDS = 0.05  # a block at least this long, so a round's median rests on many iterations
MIN_BLOCK_ITERATIONS = 5
DEFAULT_ROUNDS = 20


@dataclass(frozen=True)
class SideBySide:
    """Each version's kept latencies (ns), one array per round, and how they were taken."""

    a: list[np.ndarray]
    b: list[np.ndarray]
    block_iterations: int
    order: str  # e.g. "AB BA AB BA ..."
    batches: tuple[int, ...] = ()  # rounds per measuring process, in order (empty: one)

    @classmethod
    def of(cls, measured: dict) -> SideBySide:
        """From what `alternate` returns (lists of latencies, as a worker's JSON holds them)."""
        return cls(
            a=[np.asarray(r, dtype=np.float64) for r in measured["a"]],
            b=[np.asarray(r, dtype=np.float64) for r in measured["b"]],
            block_iterations=measured["block_iterations"],
            order=measured["order"],
        )

    def extended(self, more: SideBySide) -> SideBySide:
        """These rounds and `more`'s (measured after them, by another process), as one
        measurement that remembers which process measured which rounds."""
        return SideBySide(
            self.a + more.a,
            self.b + more.b,
            min(self.block_iterations, more.block_iterations),
            f"{self.order} {more.order}".strip(),
            self.process_rounds() + more.process_rounds(),
        )

    def process_rounds(self) -> tuple[int, ...]:
        return self.batches or (len(self.a),)


def measure_side_by_side(
    request_a: dict, request_b: dict, rounds: int = DEFAULT_ROUNDS, timeout_s: float = 900.0
) -> SideBySide:
    """Run the two session requests (as their bundles' request.json hold them) side by side in
    a measuring process of their own."""
    if rounds < 2:
        raise AacoInputError(f"side by side needs 2 rounds or more, got {rounds}", fix="e.g. 20")
    with tempfile.TemporaryDirectory(prefix="aaco-side-by-side-") as tmp:
        job = Path(tmp) / "job.json"
        write_json(job, {"a": request_a, "b": request_b, "rounds": rounds})
        returncode, stderr = _run_tied(
            [sys.executable, "-m", "aaco_pipelines.execution.side_by_side", str(job)], timeout_s
        )
        result = Path(tmp) / "result.json"
        if returncode != 0 or not result.is_file():
            error = _error(Path(tmp) / "error.json")
            if error and error["type"] == "AacoInputError":
                raise AacoInputError(error["problem"], path=error.get("path"), fix=error.get("fix"))
            raise MeasuringFailure(
                "the side-by-side measurement failed: "
                + (f"{error['type']}: {error['problem']}" if error else stderr[-2000:])
            )
        return SideBySide.of(json.loads(result.read_text()))


def _run_tied(command: list[str], timeout_s: float) -> tuple[int, str]:
    """The command in a process group of its own, tied to this process by a lifeline (it dies
    with us, even of a kill -9, and removes its job folder); killed whole past `timeout_s`.
    Its exit status and stderr."""
    lifeline = Lifeline()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **lifeline.env}, pass_fds=lifeline.pass_fds, start_new_session=True,
    )  # fmt: skip
    lifeline.started()
    try:
        _, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stderr
    except BaseException:  # a timeout, or this process stopped: the measurement goes with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        lifeline.close()


def _error(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


# --- the measuring process ------------------------------------------------------------------


def run_side_by_side(job: dict) -> dict:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    sessions, feeds = {}, {}
    for side in ("a", "b"):
        request = {**job[side], "resolved_providers": resolve_providers(ort, job[side])}
        sessions[side] = create_session(ort, request, session_options(ort, request))
        feeds[side] = make_inputs(input_specs_from_json(request["inputs"]), seed=request["seed"])

    def block(side: str, count: int) -> list[int]:
        return timed_block(sessions[side], feeds[side], count)

    def announce(iterations: int) -> None:
        progress(f"side by side: {job['rounds']} rounds of {iterations} iterations each")

    return alternate(block, job["rounds"], announce)


def alternate(
    block: Callable[[str, int], list[int]],
    rounds: int,
    announce: Callable[[int], None] | None = None,
) -> dict:
    """The side-by-side protocol over `block(side, count)` (count inferences of side "a" or
    "b", each one's latency, ns): both warmed up; a block of BLOCK_SECONDS of the slower side,
    at least MIN_BLOCK_ITERATIONS (the same count for both, so a round compares like with like);
    then rounds A B, B A, A B, ... (a mirrored pair cancels what running second does to a
    block), each block's first iteration not kept. Each side's kept latencies per round, the
    block's iterations and the order."""
    for side in ("a", "b"):
        block(side, WARMUP_ITERATIONS)
    slowest = max(float(np.median(block(side, 3))) for side in ("a", "b"))
    iterations = max(MIN_BLOCK_ITERATIONS, int(BLOCK_SECONDS * 1e9 / max(slowest, 1.0)))
    if announce:
        announce(iterations)
    kept: dict[str, list[list[int]]] = {"a": [], "b": []}
    order = []
    for round_ in range(rounds):
        sides = ("a", "b") if round_ % 2 == 0 else ("b", "a")
        for side in sides:
            kept[side].append(block(side, iterations + 1)[1:])
        order.append("".join(sides).upper())
    return {**kept, "block_iterations": iterations, "order": " ".join(order)}


def main(argv: list[str]) -> int:
    job_path = Path(argv[1])
    out = job_path.parent
    watch_parent(on_death=lambda: shutil.rmtree(out, ignore_errors=True))
    job = json.loads(job_path.read_text())
    try:
        lab = job["b"].get("laboratory")
        if lab:  # the current session's cores, for both versions
            pin_current_process(LaboratorySettings(tuple(lab["cores"]), lab["intra_op_threads"]))
        write_json(out / "result.json", run_side_by_side(job))
        return 0
    except AacoInputError as exc:
        write_json(
            out / "error.json",
            {"type": "AacoInputError", "problem": exc.problem, "path": exc.path, "fix": exc.fix},
        )
        return 2
    except Exception as exc:  # noqa: BLE001 - reported to the caller with its type
        write_json(out / "error.json", {"type": type(exc).__name__, "problem": str(exc)})
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The runtime process: measures under another environment's interpreter, another ONNX Runtime.

Two ONNX Runtimes cannot share a process, so comparing runtimes side by side takes two runtime
processes, one per environment, that the caller (execution.across_runtimes) drives in
alternating blocks.
Started as `ENV/bin/python -I runtime_process.py PACKAGE_DIR`: isolated (no PYTHONPATH, no user
site, not the script's folder), so `onnxruntime` and `numpy` are that environment's own. Of this
project it imports only the session opener (execution.ort_session, standard library only) from
PACKAGE_DIR, a folder holding nothing but a link to this package, so the caller's environment
never leaks in. Every session opens exactly as a measurement opens it.

Standard input and output carry one JSON object per line:
  -> {"request": {...}, "inputs": "feeds.npz"}  <- {"ready": true, "providers": [...], ...}
  -> {"block": N}                                <- {"ns": [N latencies]}
End of input ends the process. A failure answers {"error": {"type", "problem", "path", "fix"}}.
`runtime_process.py --probe` prints what the environment holds and exits.
"""

from __future__ import annotations

import json
import platform
import sys
import time


def describe() -> dict:
    """The environment: its ONNX Runtime (what a session's runtime fingerprint is made of)."""
    import onnxruntime as ort

    return {
        "onnxruntime_version": ort.__version__,
        "onnxruntime_providers": list(ort.get_available_providers()),
        "onnxruntime_device": ort.get_device(),
        "onnxruntime_path": ort.__file__,
        "python_version": platform.python_version(),
    }


def _answer(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _open(job: dict):
    import numpy as np
    import onnxruntime as ort

    from aaco_pipelines.execution.ort_session import (
        create_session,
        resolve_providers,
        session_options,
    )

    ort.set_default_logger_severity(3)
    request = {**job["request"], "resolved_providers": resolve_providers(ort, job["request"])}
    session = create_session(ort, request, session_options(ort, request))
    with np.load(job["inputs"], allow_pickle=False) as stored:
        feeds = {name: stored[f"arr_{i}"] for i, name in enumerate(job["names"])}
    return session, feeds


def timed_block(session, feeds: dict, count: int) -> list[int]:
    """`count` inferences back to back, each one's latency (ns). (Also side by side's: this
    module imports nothing a runtime process in another environment lacks.)"""
    run, clock, latencies = session.run, time.perf_counter_ns, []
    for _ in range(count):
        t0 = clock()
        run(None, feeds)
        latencies.append(clock() - t0)
    return latencies


def serve(lines, package_dir: str) -> int:
    sys.path.insert(0, package_dir)
    session = feeds = None
    try:
        for line in lines:
            message = json.loads(line)
            if "request" in message:
                session, feeds = _open(message)
                _answer({"ready": True, "providers": session.get_providers(), **describe()})
            else:
                _answer({"ns": timed_block(session, feeds, int(message["block"]))})
        return 0
    except Exception as exc:  # noqa: BLE001 - reported to the caller with its type
        _answer(
            {
                "error": {
                    "type": type(exc).__name__,
                    "problem": getattr(exc, "problem", None) or str(exc),
                    "path": str(getattr(exc, "path", None) or "") or None,
                    "fix": getattr(exc, "fix", None),
                }
            }
        )
        return 2


def main(argv: list[str]) -> int:
    if argv[1:] == ["--probe"]:
        _answer(describe())
        return 0
    return serve(sys.stdin, argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))

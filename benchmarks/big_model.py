"""One model over 2 GB of external weights, measured end to end by `aaco run`.

Builds an MLP whose weights (float32, random, fixed seed) live in one external file beside the
model, as every model over protobuf's 2 GB limit is saved, registers it in a fresh AACO_HOME and
runs `aaco run` on it as a user would. Prints the wall time of each stage (from aaco's own
progress lines), the peak memory of the aaco process (sampled) and of the measuring process
(observed.json), and the bytes each session keeps. The point: nothing loads the weights into the
aaco process (its peak stays far below the weights), the measuring process's memory limit is
derived from the model, and the session bundle does not grow with the weights.

    .venv/bin/python benchmarks/big_model.py [--gib 2.25] [--keep DIR]

Needs about 2.5x the weights in free disk (the registry copy and its snapshot) and 3x in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import psutil
from onnx import TensorProto, helper, numpy_helper

WIDTH = 4096  # activations [1, WIDTH]; each layer a [WIDTH, WIDTH * 4] or [WIDTH * 4, WIDTH] GEMM
PROGRESS = re.compile(r"\[[#-]+\]\s+([\d.]+)s\s+(.*)")


def build(folder: Path, gib: float) -> Path:
    """MatMul+Relu layers alternating WIDTH -> 4*WIDTH -> WIDTH until the weights reach `gib`."""
    layer_bytes = WIDTH * WIDTH * 4 * 4
    layers = max(2, round(gib * (1 << 30) / layer_bytes))
    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for i in range(layers):
        shape = (WIDTH, WIDTH * 4) if i % 2 == 0 else (WIDTH * 4, WIDTH)
        w = (rng.standard_normal(shape, dtype=np.float32) * (1 / np.sqrt(shape[0]))).astype(
            np.float32
        )
        weights.append(numpy_helper.from_array(w, f"layer{i}.weight"))
        nodes.append(
            helper.make_node(
                "MatMul", [last, f"layer{i}.weight"], [f"h{i}"], name=f"layer{i}/MatMul"
            )
        )
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"a{i}"], name=f"layer{i}/Relu"))
        last = f"a{i}"
    out_width = WIDTH * 4 if layers % 2 else WIDTH
    graph = helper.make_graph(
        nodes,
        "big_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, out_width])],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = folder / "big_mlp.onnx"
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        location="big_mlp.weights",
        size_threshold=1024,
    )
    (folder / "big_mlp.yaml").write_text(
        "warmup_iterations: 1\nmeasured_iterations: 3\nmin_measured_seconds: 0\n"
        "profiled_iterations: 2\n"
    )
    return path


def tiny(folder: Path) -> Path:
    """A one-node model: its run measures this host's envelope first (a big buffer sweep in
    the aaco process), as a running observatory has it, so the big run's peak is its own."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    path = folder / "tiny.onnx"
    onnx.save_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path
    )
    return path


def run(home: Path, model: Path) -> dict:
    """`aaco run` on the model: stage times from its progress lines, its sampled peak RSS."""
    env = {**os.environ, "AACO_HOME": str(home)}
    aaco = Path(sys.executable).with_name("aaco")
    started = time.monotonic()
    process = subprocess.Popen(
        [str(aaco), "run", "--model", str(model)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    samples: list[tuple[float, int, int]] = []  # (s since start, aaco RSS, measuring RSS)

    def sample() -> None:
        proc = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                measuring = sum(c.memory_info().rss for c in proc.children(recursive=True))
                samples.append((time.monotonic() - started, proc.memory_info().rss, measuring))
            except psutil.Error:
                pass
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stages, last = [], 0.0
    for line in process.stderr:
        match = PROGRESS.search(line)
        if match:
            now = time.monotonic() - started
            stages.append((match.group(2).strip(), last, now))
            last = now
        elif line.strip():
            print("  " + line.rstrip(), file=sys.stderr)
    stdout = process.stdout.read()
    process.wait()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"aaco run failed ({process.returncode}):\n{stdout}")

    def peaks(lo: float, hi: float) -> tuple[int, int]:
        inside = [(a, w) for t, a, w in samples if lo <= t <= hi] or [(0, 0)]
        return max(a for a, _ in inside), max(w for _, w in inside)

    return {
        "wall_s": time.monotonic() - started,
        "stages": [(name, hi - lo, *peaks(lo, hi)) for name, lo, hi in stages],
        "aaco_peak_rss": max((a for _, a, _ in samples), default=0),
        "summary": stdout,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.25, help="weights in GiB (default 2.25)")
    parser.add_argument("--keep", type=Path, help="build and keep everything in this folder")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="aaco-big-model-"))
    try:
        home = root / "aaco"
        registry = home / "registry"
        registry.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        model = build(registry, args.gib)
        weights = (registry / "big_mlp.weights").stat().st_size
        print(
            f"built {model.name}: graph {model.stat().st_size / 1e3:.1f} kB, "
            f"weights {weights / 2**30:.2f} GiB in {time.monotonic() - t0:.1f} s"
        )
        calibration = run(home, tiny(registry))
        print(
            f"envelope measured on a tiny model first: {calibration['wall_s']:.1f} s, "
            f"aaco process peak RSS {calibration['aaco_peak_rss'] / 2**20:.0f} MiB"
        )
        result = run(home, model)
        session = next((home / "sessions").glob("*/*big_mlp*"))
        observed = json.loads((session / "observed.json").read_text())
        request = json.loads((session / "request.json").read_text())
        kept = sum(p.stat().st_size for p in session.rglob("*") if p.is_file())
        print("\nstage (ends with the line aaco printed)        seconds  aaco MiB  measuring MiB")
        for name, seconds, aaco_rss, measuring_rss in result["stages"]:
            print(f"  {name[:44]:44} {seconds:7.2f} {aaco_rss >> 20:9} {measuring_rss >> 20:14}")
        print(f"  {'total (aaco run, wall)':44} {result['wall_s']:7.2f}")
        print("  (the first line includes hashing, snapshot copy and graph extraction; the")
        print("  measuring process's 'done' includes saving the optimized graph, whose weights")
        print("  ONNX Runtime writes beside it and the measuring process then deletes)")
        print(
            f"\naaco process peak RSS   {result['aaco_peak_rss'] / 2**20:8.0f} MiB "
            f"({result['aaco_peak_rss'] / weights:.1%} of the weights)"
        )
        print(
            f"measuring peak RSS      {observed['worker_peak_rss_bytes'] / 2**20:8.0f} MiB "
            f"of a {observed['memory_limit_bytes'] / 2**20:.0f} MiB limit "
            f"({request['limits']['memory_limit_rule']})"
        )
        print(
            f"session bundle          {kept / 2**20:8.2f} MiB "
            f"(optimized graph {(session / 'optimized_model.onnx').stat().st_size / 1e3:.1f} kB)"
        )
        print(
            f"model snapshot          {sum(p.stat().st_size for p in (home / 'models').rglob('*') if p.is_file()) / 2**30:8.2f} GiB"
        )
        print(result["summary"])
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

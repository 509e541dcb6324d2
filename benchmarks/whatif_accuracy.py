"""How well `aaco whatif` predicts a real change: for each model, its longest MatMul with a 2-D
weight is swapped for a cheaper op of the same output shape (Abs when the weight is square, a
Slice of the input when it narrows, a Tile when it widens: the node made faster for real), both
models are measured interleaved (`--rounds` sessions each), and the change the what-if predicts
from the original's profile and the node's measured speedup is compared with the measured one.

    PYTHONPATH=. .venv/bin/python benchmarks/whatif_accuracy.py [--models mlp,bert_encoder]
        [--corpus] [--rounds 2]

Models: the zoo's (aaco zoo build) and, with --corpus, the real-model corpus's
(tests/data/real_models). Prints one row per model: the node, its speedup, measured and
predicted change, and the error relative to the measured change (goal: within 10 %).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aaco_pipelines.analysis.critical_path import what_if
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import load_sidecar
from aaco_pipelines.registry.zoo import ZOO_MODEL_NAMES, build_zoo
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_models"


def cheaper_twin(model: onnx.ModelProto, node_name: str) -> onnx.ModelProto:
    """The model with MatMul `node_name` (input x [..., K], weight [K, N]) replaced by an op of
    the same output shape and name: Abs(x) when K == N, x[..., :N] when K > N, x tiled N / K
    times when N is a multiple of K."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    weights = {init.name: init for init in twin.graph.initializer}
    node = next(n for n in twin.graph.node if n.name == node_name)
    k, n = weights[node.input[1]].dims
    x, out = node.input[0], node.output[0]
    if k == n:
        replacement = [helper.make_node("Abs", [x], [out], name=node_name)]
    elif k > n:
        consts = _constants(twin, node_name, {"starts": [0], "ends": [n], "axes": [-1]})
        replacement = [helper.make_node("Slice", [x, *consts], [out], name=node_name)]
    elif n % k == 0:
        rank = _rank(model, x)
        consts = _constants(twin, node_name, {"repeats": [1] * (rank - 1) + [n // k]})
        replacement = [helper.make_node("Tile", [x, *consts], [out], name=node_name)]
    else:
        raise ValueError(f"{node_name}: no cheap op makes [..., {n}] from [..., {k}]")
    index = list(twin.graph.node).index(node)
    del twin.graph.node[index]
    for offset, new in enumerate(replacement):
        twin.graph.node.insert(index + offset, new)
    return twin


def _constants(model: onnx.ModelProto, prefix: str, values: dict[str, list[int]]) -> list[str]:
    names = []
    for key, value in values.items():
        name = f"{prefix}/{key}"
        model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
        names.append(name)
    return names


def _rank(model: onnx.ModelProto, tensor: str) -> int:
    inferred = onnx.shape_inference.infer_shapes(model)
    for info in [*inferred.graph.value_info, *inferred.graph.input]:
        if info.name == tensor:
            return len(info.type.tensor_type.shape.dim)
    return 2


def swappable_matmuls(model: onnx.ModelProto) -> list[str]:
    """MatMul nodes with a 2-D constant weight a cheap op can stand in for."""
    weights = {init.name: init for init in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights and node.name:
            dims = list(weights[node.input[1]].dims)
            if len(dims) == 2 and (dims[0] >= dims[1] or dims[1] % dims[0] == 0):
                found.append(node.name)
    return found


def measure(paths: AacoPaths, path: Path) -> str:
    return measure_model(registered_model(path), paths, analyze=True).session_id


def node_ns(lake: TraceLake, session_id: str, node: str) -> float | None:
    rows = lake.query(
        "SELECT sum(kernel_ns * share) AS ns FROM critical_path_nodes "
        "WHERE session_id = ? AND onnx_node = ?",
        [session_id, node],
    ).to_pylist()
    return rows[0]["ns"] if rows else None


def p50(lake: TraceLake, session_id: str) -> float:
    rows = lake.query(
        "SELECT latency_p50_ns FROM session_records WHERE session_id = ?", [session_id]
    )
    return rows["latency_p50_ns"][0].as_py()


def longest_swappable(lake: TraceLake, session_id: str, candidates: list[str]) -> str | None:
    times = {name: node_ns(lake, session_id, name) or 0.0 for name in candidates}
    return max(times, key=times.get) if times and max(times.values()) > 0 else None


def validate(paths: AacoPaths, source: Path, rounds: int) -> dict:
    """One model's row: measured and predicted change of its longest swappable MatMul."""
    model = onnx.load(str(source))
    candidates = swappable_matmuls(model)
    if not candidates:
        return {"model": source.stem, "skipped": "no MatMul with a swappable 2-D weight"}
    lake = TraceLake(paths.tracelake)
    slow_path = paths.registry / f"{source.stem}_slow.onnx"
    onnx.save(model, str(slow_path))
    _copy_sidecar(source, slow_path)
    first = measure(paths, slow_path)
    node = longest_swappable(lake, first, candidates)
    if node is None:
        return {"model": source.stem, "skipped": "its MatMuls ran fused out of reach"}
    fast_path = paths.registry / f"{source.stem}_fast.onnx"
    onnx.save(cheaper_twin(model, node), str(fast_path))
    _copy_sidecar(source, fast_path)
    slow, fast = [first], [measure(paths, fast_path)]
    for _ in range(rounds - 1):
        slow.append(measure(paths, slow_path))
        fast.append(measure(paths, fast_path))
    speedup = statistics.median(node_ns(lake, s, node) for s in slow) / max(
        statistics.median(node_ns(lake, s, node) or 1.0 for s in fast), 1.0
    )
    measured = statistics.median(p50(lake, s) for s in fast) - statistics.median(
        p50(lake, s) for s in slow
    )
    predicted = statistics.median(
        what_if(lake, s, None, selector="node", value=node, speedup=speedup).change_ms * 1e6
        for s in slow
    )
    return {
        "model": source.stem,
        "node": node,
        "speedup": round(speedup, 2),
        "p50_ms": round(statistics.median(p50(lake, s) for s in slow) / 1e6, 4),
        "measured_change_ms": round(measured / 1e6, 4),
        "predicted_change_ms": round(predicted / 1e6, 4),
        "error": round(abs(predicted - measured) / abs(measured), 3) if measured else None,
    }


def _copy_sidecar(source: Path, target: Path) -> None:
    sidecar = load_sidecar(source)
    sidecar.save(target.with_suffix(".yaml"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="zoo models, comma-separated (default: all)")
    parser.add_argument("--corpus", action="store_true", help="also the real-model corpus")
    parser.add_argument("--rounds", type=int, default=2, help="sessions per model (2)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        home = Path(work)
        paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
        zoo = home / "zoo"
        build_zoo(zoo)
        names = args.models.split(",") if args.models else list(ZOO_MODEL_NAMES)
        sources = [zoo / f"{name}.onnx" for name in names if name != "llama_decoder"]
        if args.corpus:
            sources += sorted(CORPUS.glob("*.onnx"))
        paths.registry.mkdir(parents=True)
        rows = []
        for source in sources:
            row = validate(paths, source, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
        errors = [r["error"] for r in rows if r.get("error") is not None]
        if errors:
            print(
                f"median error {statistics.median(errors):.1%} over {len(errors)} models; "
                f"within 10 %: {sum(e <= 0.10 for e in errors)}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

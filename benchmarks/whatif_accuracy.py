"""How well `aaco whatif` predicts a real change: in each model, every MatMul with a 2-D weight
is swapped for a cheaper op of the same output shape (Abs when the weight is square, a Slice of
the input when it narrows, a Tile when it widens: the nodes made faster for real). Each model
and its twin are measured once (their profiles: each node's speedup, on the calibrated profiles
the what-if re-times), then side by side (execution.side_by_side: one process, interleaved
blocks, `--rounds` rounds, so whatever else the host does hits both alike). The change the
what-if predicts from the original's profile (analysis.critical_path.what_if_nodes) is compared
with the measured one, both as shares of the original's latency.

    PYTHONPATH=. .venv/bin/python benchmarks/whatif_accuracy.py [--models mlp,bert_encoder]
        [--corpus] [--no-zoo] [--rounds 20]

Models: the zoo's (aaco zoo build) and, with --corpus, the real-model corpus's
(tests/data/real_models). Prints one row per model: the nodes, their median speedup, measured
and predicted change, and the error relative to the measured change (goal: within 10 %).
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

from aaco_pipelines.analysis.critical_path import session_dag, what_if_nodes
from aaco_pipelines.bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution.side_by_side import measure_side_by_side
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.registry.sidecar import load_sidecar
from aaco_pipelines.registry.zoo import ZOO_MODEL_NAMES, build_zoo
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.queries import session_bundle_path
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
        if info.name == tensor and info.type.tensor_type.HasField("shape"):
            return len(info.type.tensor_type.shape.dim)
    raise ValueError(f"the rank of {tensor} is unknown: no Tile can stand in")


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


def calibrated_node_ns(lake: TraceLake, session_id: str) -> dict[str, float]:
    """Each original node's time per iteration in the session's calibrated DAG (its runtime
    node's, by the attribution's share)."""
    dag = session_dag(lake, session_id, None).calibrated
    per_runtime = np.bincount(dag.node, dag.duration, len(dag.nodes)) / len(dag.iterations)
    runtime = dict(zip(dag.nodes.tolist(), per_runtime.tolist(), strict=True))
    shares = lake.query(
        "SELECT runtime_node, onnx_node, share FROM node_attribution WHERE session_id = ? "
        "AND runtime_node IS NOT NULL AND onnx_node IS NOT NULL",
        [session_id],
    ).to_pylist()
    found: dict[str, float] = {}
    for row in shares:
        ns = runtime.get(row["runtime_node"], 0.0) * row["share"]
        found[row["onnx_node"]] = found.get(row["onnx_node"], 0.0) + ns
    return found


def p50(lake: TraceLake, session_id: str) -> float:
    rows = lake.query(
        "SELECT latency_p50_ns FROM session_records WHERE session_id = ?", [session_id]
    )
    return rows["latency_p50_ns"][0].as_py()


def validate(paths: AacoPaths, source: Path, rounds: int) -> dict:
    """One model's row: measured and predicted change with every swappable MatMul cheaper."""
    model = onnx.load(str(source))
    nodes = swappable_matmuls(model)
    if not nodes:
        return {"model": source.stem, "skipped": "no MatMul with a swappable 2-D weight"}
    twin, swapped = model, []
    for node in nodes:
        try:
            twin = cheaper_twin(twin, node)
            swapped.append(node)
        except ValueError:
            continue  # its input's rank is unknown: left as it is
    nodes = swapped
    slow_path, fast_path = (paths.registry / f"{source.stem}_{s}.onnx" for s in ("slow", "fast"))
    for path, version in ((slow_path, model), (fast_path, twin)):
        onnx.save(version, str(path))
        _copy_sidecar(source, path)
    slow = measure(paths, slow_path)
    fast = measure(paths, fast_path)
    lake = TraceLake(paths.tracelake)
    # Each node's speedup on the basis the what-if re-times: the profile calibrated to the
    # measured p50 (a cheap op's profiled time is mostly the profiler's own)
    before, after = calibrated_node_ns(lake, slow), calibrated_node_ns(lake, fast)
    speedups = {
        node: before[node] / after[node]
        for node in nodes
        if before.get(node, 0.0) > 0 and after.get(node, 0.0) > 0
    }
    prediction = what_if_nodes(lake, slow, None, speedups)
    predicted = prediction.change_ms / prediction.current_p50_ms
    # The truth: both models measured side by side (one process, interleaved blocks, so the
    # host's moods hit both alike), as a share of the original's latency
    requests = [SessionBundle(session_bundle_path(lake, s)).request for s in (slow, fast)]
    pair = measure_side_by_side(*requests, rounds=rounds)
    ratio = np.array([np.median(b) for b in pair.b]) / np.array([np.median(a) for a in pair.a])
    measured = float(np.median(ratio) - 1.0)
    others = other_nodes_ns(lake, fast, nodes) - other_nodes_ns(lake, slow, nodes)
    return {
        "model": source.stem,
        "nodes": len(speedups),
        "median_speedup": round(statistics.median(speedups.values()), 2) if speedups else None,
        "p50_ms": round(p50(lake, slow) / 1e6, 4),
        "measured_change": round(measured, 4),  # a share of the original's latency
        "predicted_change": round(predicted, 4),
        # the other nodes' own profiled time moved too (a smaller working set, other fusions):
        # no what-if of the swapped nodes can see that
        "other_nodes_change_ms": round(others / 1e6, 4),
        "error": round(abs(predicted - measured) / abs(measured), 3) if measured else None,
    }


def other_nodes_ns(lake: TraceLake, session_id: str, swapped: list[str]) -> float:
    """The session's node time per iteration outside the swapped nodes."""
    rows = lake.query(
        "SELECT sum(kernel_ns * share) AS ns FROM critical_path_nodes "
        "WHERE session_id = ? AND NOT list_contains(?, onnx_node)",
        [session_id, swapped],
    ).to_pylist()
    return rows[0]["ns"] or 0.0


def _copy_sidecar(source: Path, target: Path) -> None:
    sidecar = load_sidecar(source)
    sidecar.save(target.with_suffix(".yaml"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="zoo models, comma-separated (default: all)")
    parser.add_argument("--corpus", action="store_true", help="also the real-model corpus")
    parser.add_argument("--no-zoo", action="store_true", help="the corpus only")
    parser.add_argument("--rounds", type=int, default=20, help="side-by-side rounds (20)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        home = Path(work)
        paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
        zoo = home / "zoo"
        build_zoo(zoo)
        names = args.models.split(",") if args.models else list(ZOO_MODEL_NAMES)
        sources = [zoo / f"{name}.onnx" for name in names if name != "llama_decoder"]
        sources = [] if args.no_zoo else sources
        if args.corpus:
            sources += sorted(CORPUS.glob("*.onnx"))
        paths.registry.mkdir(parents=True)
        rows = []
        for source in sources:
            try:
                row = validate(paths, source, args.rounds)
            except Exception as exc:  # noqa: BLE001 - one model's failure is its row
                row = {"model": source.stem, "failed": " ".join(str(exc).split())[:300]}
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

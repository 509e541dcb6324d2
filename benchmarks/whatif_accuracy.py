"""How well `aaco whatif` predicts a real change, on the zoo's and the real-model corpus's
transformers. Two kinds of twin of each model, each measured against the original:

- `slower` (the default): the MatMuls and Gemms with a 2-D weight made slower for real, with
  the graph left exactly as it is: a few of each weight's entries are set to subnormal floats
  (same sign, about 1e-39), which x86 FMA units take a microcode assist for (here, 0.2 % of a
  256x256 weight makes its MatMul about 4x slower). Shapes, fusions, the runtime graph and the
  working set are the original's, so the twin differs in those nodes' speed alone: what a
  what-if assumes. Speedups (below 1) are taken per runtime node.
- `cheaper`: every such MatMul swapped for a cheaper op of the same output shape (Abs when the
  weight is square, a Slice of the input when it narrows, a Tile when it widens). ONNX Runtime
  then compiles a different graph (the MatMul+Add -> Gemm fusions and their Reshapes go, Gelu
  becomes BiasGelu): what no what-if of the swapped nodes can see. Speedups are per original
  node.

Each model and its twin are measured once (their profiles give each node's speedup, on the
calibrated profiles the what-if re-times), then side by side (execution.side_by_side: one
process, interleaved blocks, `--rounds` rounds, so whatever else the host does hits both
alike). The change the what-if predicts from the original's profile
(analysis.critical_path.session_whatif.what_if_nodes) is compared with the measured one, both as shares of the
original's latency, with the measured change's 95 % interval over the rounds.

    PYTHONPATH=. .venv/bin/python benchmarks/whatif_accuracy.py [--models mlp,bert_encoder]
        [--corpus] [--no-zoo] [--twin slower|cheaper] [--rounds 20]

Prints one row per model: the nodes, their median speedup, measured and predicted change, and
the error relative to the measured change (goal: within 10 %).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from scipy import stats

from aaco_pipelines.analysis.critical_path.session_path import session_dag
from aaco_pipelines.analysis.critical_path.session_whatif import what_if_nodes
from aaco_pipelines.bundle.session_bundle import SessionBundle
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


SUBNORMAL = np.float32(1e-39)  # below float32's smallest normal, 1.18e-38
CONTROL_SHARE = 0.3  # the untouched nodes correct for the host's speed when they hold this much
# The goal: within GOAL of the measured change. It can be judged only where the measured
# change itself is known that well: its 95 % interval within GOAL of it on either side.
GOAL = 0.10


def weighted_nodes(model: onnx.ModelProto) -> list[str]:
    """MatMul and Gemm nodes whose weight is a 2-D float32 initializer of their own."""
    weights = {init.name: init for init in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    found = []
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm") and node.name and len(node.input) > 1:
            weight = weights.get(node.input[1])
            if (
                weight is not None
                and len(weight.dims) == 2
                and uses[weight.name] == 1
                and weight.data_type == onnx.TensorProto.FLOAT
            ):
                found.append(node.name)
    return found


def subnormal_twin(model: onnx.ModelProto, nodes: list[str], share: float) -> onnx.ModelProto:
    """The model with `share` of each node's weight entries (at least one) set to a subnormal
    float of the same sign: the same graph, slower in those nodes alone."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    weights = {init.name: init for init in twin.graph.initializer}
    rng = np.random.default_rng(0)
    for node in (n for n in twin.graph.node if n.name in set(nodes)):
        init = weights[node.input[1]]
        values = numpy_helper.to_array(init).copy()
        flat = values.reshape(-1)
        chosen = rng.choice(flat.size, max(1, round(flat.size * share)), replace=False)
        flat[chosen] = np.where(flat[chosen] < 0, -SUBNORMAL, SUBNORMAL)
        init.CopyFrom(numpy_helper.from_array(values, init.name))
    return twin


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
    runtime = calibrated_runtime_ns(lake, session_id)
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


def validate(
    paths: AacoPaths,
    source: Path,
    rounds: int,
    twin_kind: str,
    share: float,
    profiled: int,
    sessions: int,
    threads: int | None = None,
) -> dict:
    """One model's row: the measured and predicted change of its twin of this kind."""
    model = onnx.load(str(source))
    if twin_kind == "slower":
        nodes = weighted_nodes(model)
        if not nodes:
            return {"model": source.stem, "skipped": "no MatMul or Gemm with a float 2-D weight"}
        twin = subnormal_twin(model, nodes, share)
    else:
        nodes, twin = cheaper_twins(model)
        if not nodes:
            return {"model": source.stem, "skipped": "no MatMul with a swappable 2-D weight"}
    original_path, twin_path = (
        paths.registry / f"{source.stem}_{s}.onnx" for s in ("original", twin_kind)
    )
    for path, version in ((original_path, model), (twin_path, twin)):
        onnx.save(version, str(path))
        _copy_sidecar(source, path, profiled, threads)
    # Alternated sessions: the host's moods while one session ran hit a speedup through one
    # of its sides only, so each node's time is a median over `sessions` sessions of each
    originals, changed = [], []
    for _ in range(sessions):
        originals.append(measure(paths, original_path))
        changed.append(measure(paths, twin_path))
    lake = TraceLake(paths.tracelake)
    # Each node's speedup on the basis the what-if re-times: the profile calibrated to the
    # measured p50 (a cheap op's profiled time is mostly the profiler's own). The slower twin
    # runs the same runtime graph: its runtime nodes are compared whole (a fused node's
    # members' shares come from a cost model, which subnormals do not move)
    if twin_kind == "slower":
        node_ns, keys = calibrated_runtime_ns, runtime_nodes_of(lake, originals[0], nodes)
    else:
        node_ns, keys = calibrated_node_ns, nodes
    befores = [node_ns(lake, session) for session in originals]
    afters = [node_ns(lake, session) for session in changed]
    if twin_kind == "slower":  # the untouched nodes as the control for the host's speed
        afters = [_host_corrected(b, a, set(keys)) for b, a in zip(befores, afters, strict=True)]
    before, after = _medians(befores), _medians(afters)
    same_graph = twin_kind == "slower" and set(before) == set(after)
    speedups = {
        key: before[key] / after[key]
        for key in keys
        if before.get(key, 0.0) > 0 and after.get(key, 0.0) > 0
    }
    # The what-if's prediction from each original session's own profile, as a share of its
    # p50; their median
    predictions = [what_if_nodes(lake, session, None, speedups) for session in originals]
    predicted = statistics.median(w.change_ms / w.current_p50_ms for w in predictions)
    measured, low, high, side_by_side_ns = measured_change(lake, originals[-1], changed[-1], rounds)
    return {
        "model": source.stem,
        "twin": twin_kind,
        "same_runtime_graph": same_graph,
        "nodes": len(speedups),
        "median_speedup": round(statistics.median(speedups.values()), 3) if speedups else None,
        "p50_ms": [round(w.current_p50_ms, 4) for w in predictions],
        "side_by_side_ms": round(side_by_side_ns / 1e6, 4),
        "predicted_ms": [round(w.change_ms, 4) for w in predictions],
        "measured_change": round(measured, 4),  # a share of the original's latency
        "measured_low": round(low, 4),
        "measured_high": round(high, 4),
        "predicted_change": round(predicted, 4),
        "error": round(abs(predicted - measured) / abs(measured), 3) if measured else None,
        # the truth known to within the goal: only then can the goal be judged
        "judged": bool(measured and max(high - measured, measured - low) <= GOAL * abs(measured)),
    }


def _host_corrected(before: dict, after: dict, changed: set[str]) -> dict[str, float]:
    """The twin session's node times scaled by how much faster or slower the host ran the
    nodes both versions share unchanged (the control): sessions measured a minute apart on a
    shared host differ by up to 1.5x here, which would otherwise land in the speedups."""
    control = [k for k in before if k in after and k not in changed]
    if sum(before[k] for k in control) < CONTROL_SHARE * sum(before.values()):
        return after  # too little left untouched (compute_bound's Relus): its ratio is noise
    scale = sum(before[k] for k in control) / max(sum(after[k] for k in control), 1.0)
    return {k: v * scale for k, v in after.items()}


def _medians(tables: list[dict[str, float]]) -> dict[str, float]:
    """Each key's median over the tables that have it."""
    keys = {key for table in tables for key in table}
    return {key: statistics.median(t[key] for t in tables if key in t) for key in keys}


def cheaper_twins(model: onnx.ModelProto) -> tuple[list[str], onnx.ModelProto]:
    """The swappable MatMuls and the model with each swapped for a cheaper op."""
    twin, swapped = model, []
    for node in swappable_matmuls(model):
        try:
            twin = cheaper_twin(twin, node)
            swapped.append(node)
        except ValueError:
            continue  # its input's rank is unknown: left as it is
    return swapped, twin


def measured_change(lake: TraceLake, original: str, changed: str, rounds: int):
    """The truth: both models measured side by side (one process, interleaved blocks, so the
    host's moods hit both alike), as a share of the original's latency: the median over the
    rounds of each round's ratio, and its 95 % bootstrap interval."""
    requests = [SessionBundle(session_bundle_path(lake, s)).request for s in (original, changed)]
    pair = measure_side_by_side(*requests, rounds=rounds)
    a = np.array([np.median(r) for r in pair.a])
    ratio = np.array([np.median(b) for b in pair.b]) / a
    interval = stats.bootstrap(
        (ratio,), np.median, confidence_level=0.95, n_resamples=2000, random_state=0
    ).confidence_interval
    return (
        float(np.median(ratio) - 1.0),
        float(interval.low - 1.0),
        float(interval.high - 1.0),
        float(np.median(a)),
    )


def calibrated_runtime_ns(lake: TraceLake, session_id: str) -> dict[str, float]:
    """Each runtime node's time per iteration in the session's calibrated DAG."""
    dag = session_dag(lake, session_id, None).calibrated
    per_runtime = np.bincount(dag.node, dag.duration, len(dag.nodes)) / len(dag.iterations)
    return dict(zip(dag.nodes.tolist(), per_runtime.tolist(), strict=True))


def runtime_nodes_of(lake: TraceLake, session_id: str, nodes: list[str]) -> list[str]:
    """The runtime nodes executing any of these original nodes."""
    rows = lake.query(
        "SELECT DISTINCT runtime_node FROM node_attribution WHERE session_id = ? "
        "AND runtime_node IS NOT NULL AND list_contains(?, onnx_node) ORDER BY 1",
        [session_id, nodes],
    )
    return rows["runtime_node"].to_pylist()


def _copy_sidecar(source: Path, target: Path, profiled: int, threads: int | None) -> None:
    """The source's sidecar, with `profiled` profiled iterations (each node's speedup is a
    median over them) and `threads` intra-op threads (None: the sidecar's)."""
    sidecar = dataclasses.replace(load_sidecar(source), profiled_iterations=profiled)
    if threads is not None:
        sidecar = dataclasses.replace(sidecar, intra_op_threads=threads)
    sidecar.save(target.with_suffix(".yaml"))


def _summary(rows: list[dict]) -> None:
    judged = [r["error"] for r in rows if r.get("judged")]
    unjudged = [r["model"] for r in rows if r.get("error") is not None and not r.get("judged")]
    if judged:
        print(
            f"judged on {len(judged)} models (the measured change known within "
            f"{GOAL:.0%}): within {GOAL:.0%} on {sum(e <= GOAL for e in judged)}, median error "
            f"{statistics.median(judged):.1%}",
            flush=True,
        )
    if unjudged:
        print(f"not judged (the measured change less certain than the goal): {unjudged}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="only these models, comma-separated")
    parser.add_argument("--corpus", action="store_true", help="also the real-model corpus")
    parser.add_argument("--no-zoo", action="store_true", help="the corpus only")
    parser.add_argument("--twin", choices=("slower", "cheaper"), default="slower")
    parser.add_argument(
        "--subnormal-share",
        type=float,
        default=0.002,
        help="share of each weight's entries made subnormal in the slower twin (0.002)",
    )
    parser.add_argument("--rounds", type=int, default=40, help="side-by-side rounds (40)")
    parser.add_argument(
        "--threads", type=int, help="intra-op threads (default: the sidecar's, else ONNX Runtime's)"
    )
    parser.add_argument(
        "--sessions", type=int, default=3, help="alternated sessions of each version (3)"
    )
    parser.add_argument(
        "--profiled", type=int, default=100, help="profiled iterations per session (100)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        home = Path(work)
        paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
        zoo = home / "zoo"
        build_zoo(zoo)
        sources = [] if args.no_zoo else [zoo / f"{n}.onnx" for n in ZOO_MODEL_NAMES]
        sources = [s for s in sources if s.stem != "llama_decoder"]
        if args.corpus:
            sources += sorted(CORPUS.glob("*.onnx"))
        if args.models:
            sources = [s for s in sources if s.stem in args.models.split(",")]
        paths.registry.mkdir(parents=True)
        rows = []
        for source in sources:
            try:
                row = validate(
                    paths,
                    source,
                    args.rounds,
                    args.twin,
                    args.subnormal_share,
                    args.profiled,
                    args.sessions,
                    args.threads,
                )
            except Exception as exc:  # noqa: BLE001 - one model's failure is its row
                row = {"model": source.stem, "failed": " ".join(str(exc).split())[:300]}
            rows.append(row)
            print(json.dumps(row), flush=True)
        _summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

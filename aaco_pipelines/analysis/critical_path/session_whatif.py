"""What if some nodes ran faster (or slower): the session's p50 latency predicted by re-timing
its DAG (`session_path.session_dag`: host threads or device queues), never by subtracting
shares.

`what_if` re-times either DAG with some nodes' durations divided by a speedup and predicts the
session's p50 latency as its measured p50 moved by the median change per profiled iteration
(with a bootstrap interval over those iterations).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from scipy import stats

from aaco_pipelines.analysis.critical_path.device_whatif import SPEEDUP_RANGE, usable_speedup
from aaco_pipelines.analysis.critical_path.session_path import (
    SessionDag,
    current_p50,
    latency_changes,
    session_dag,
)
from aaco_pipelines.errors import AacoInputError

SELECTORS = ("node", "op_type", "kernel_family")
CONFIDENCE = 0.95


@dataclass(frozen=True)
class WhatIf:
    """A predicted end-to-end latency with some nodes made faster (or slower)."""

    session_id: str
    selector: str  # node | op_type | kernel_family
    value: str
    speedup: float
    runtime_nodes: list[str]  # the runtime nodes re-timed, with their effective speedup
    current_p50_ms: float  # the session's measured p50
    predicted_p50_ms: float
    change_ms: float  # predicted - current (negative: faster)
    change_low_ms: float  # its bootstrap interval over the profiled iterations
    change_high_ms: float
    iterations: int  # profiled iterations the prediction rests on
    share_of_kernel_time: float  # what the re-timed nodes hold: share is not impact
    dag: str  # host_threads | device_queues
    caveats: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def what_if(
    lake,
    session_id: str,
    optimized: onnx.ModelProto | None,
    *,
    selector: str,
    value: str,
    speedup: float,
) -> WhatIf:
    """The session's predicted p50 with the chosen nodes `speedup` times faster (< 1: slower).

    `selector` node: an original ONNX node or a runtime node; op_type: every original node of
    that type; kernel_family: a GPU trace's kernels of that family. A runtime node that fuses
    the chosen original node with others speeds up by its share only (Amdahl within the node)."""
    if not usable_speedup(speedup):
        low, high = SPEEDUP_RANGE
        raise AacoInputError(
            f"speedup must be a number from {low:g} to {high:g}, not {speedup}",
            fix="e.g. --speedup 2 (twice as fast) or 0.5 (twice as slow)",
        )
    dag = _require_dag(lake, session_id, optimized)
    speedups = _runtime_speedups(lake, session_id, dag, selector, value, speedup)
    key = "kernel_family" if selector == "kernel_family" else "node_name"
    return _predict(lake, session_id, dag, speedups, key, (selector, value, speedup))


def what_if_nodes(
    lake, session_id: str, optimized: onnx.ModelProto | None, speedups: dict[str, float]
) -> WhatIf:
    """The predicted p50 with several original ONNX nodes each made faster by its own factor
    (a runtime node fusing some of them is shortened by 1 - sum(share) + sum(share / speedup));
    what validating against a model with several nodes changed for real needs. A name that is
    no original node but a runtime node (a fused or inserted one) is re-timed whole, as
    `what_if` does with one."""
    if not speedups or not all(usable_speedup(k) for k in speedups.values()):
        low, high = SPEEDUP_RANGE
        raise AacoInputError(f"every speedup must be a number from {low:g} to {high:g}",
                             fix="e.g. {node: 2.0}")  # fmt: skip
    dag = _require_dag(lake, session_id, optimized)
    shares = lake.query(
        "SELECT runtime_node, onnx_node, share FROM node_attribution WHERE session_id = $sid "
        "AND runtime_node IS NOT NULL AND list_contains($nodes, onnx_node)",
        {"sid": session_id, "nodes": list(speedups)},
    ).to_pylist()
    kept: dict[str, float] = {}
    for row in shares:
        share = min(row["share"], 1.0)
        kept[row["runtime_node"]] = (
            kept.get(row["runtime_node"], 1.0) - share + share / speedups[row["onnx_node"]]
        )
    runtime = {name: 1.0 / max(fraction, 1e-9) for name, fraction in kept.items()}
    named = {row["onnx_node"] for row in shares}
    for name in (set(speedups) - named) & _runtime_names(dag):
        runtime[name] = speedups[name]
    if not runtime:
        raise AacoInputError(
            f"none of {sorted(speedups)[:3]} ran in session {session_id}",
            fix="aaco report --session " + session_id + " lists its nodes",
        )
    described = ("nodes", ", ".join(sorted(speedups)), float(np.median(list(speedups.values()))))
    return _predict(lake, session_id, dag, runtime, "node_name", described)


def _require_dag(lake, session_id: str, optimized: onnx.ModelProto | None) -> SessionDag:
    dag = session_dag(lake, session_id, optimized)
    if dag is None:
        raise AacoInputError(
            f"session {session_id} has no profiled node executions or device kernels to re-time",
            fix="measure the model again with profiling (aaco run), or ingest a trace with "
            "its iterations",
        )
    return dag


def _predict(
    lake, session_id: str, dag: SessionDag, speedups: dict[str, float], key: str, described
) -> WhatIf:
    """The WhatIf of these runtime node (or kernel family) speedups."""
    selector, value, speedup = described
    changes = latency_changes(lake, session_id, dag, speedups, key)
    current = current_p50(lake, session_id, dag)
    median = float(np.median(changes))
    low, high = _interval(changes)
    return WhatIf(
        session_id=session_id,
        selector=selector,
        value=value,
        speedup=speedup,
        runtime_nodes=sorted(speedups),
        current_p50_ms=current / 1e6,
        predicted_p50_ms=(current + median) / 1e6,
        change_ms=median / 1e6,
        change_low_ms=low / 1e6,
        change_high_ms=high / 1e6,
        iterations=len(changes),
        share_of_kernel_time=_share(lake, session_id, dag, speedups, key),
        dag=dag.kind,
        caveats=dag.caveats,
    )


def _runtime_speedups(
    lake, session_id: str, dag: SessionDag, selector: str, value: str, speedup: float
) -> dict[str, float]:
    """Each runtime node's effective speedup: 1 / (1 - share + share / speedup) for the
    share of its time that the chosen original nodes hold."""
    if selector not in SELECTORS:
        raise AacoInputError(f"unknown selector {selector!r}", fix=f"one of {SELECTORS}")
    if selector == "kernel_family":
        return _family_speedups(lake, session_id, dag, value, speedup)
    column = "onnx_node" if selector == "node" else "onnx_op_type"
    shares = lake.query(
        f"SELECT runtime_node, sum(share) AS share FROM node_attribution "  # noqa: S608
        f"WHERE session_id = $sid AND {column} = $value AND runtime_node IS NOT NULL "
        "GROUP BY runtime_node",
        {"sid": session_id, "value": value},
    ).to_pylist()
    found = {r["runtime_node"]: min(r["share"], 1.0) for r in shares}
    if selector == "node" and not found and value in _runtime_names(dag):
        found = {value: 1.0}  # a runtime node named directly (a fused or inserted one)
    if not found:
        raise AacoInputError(
            f"no {selector.replace('_', ' ')} {value!r} ran in session {session_id}",
            fix="aaco report --session " + session_id + " lists its nodes and op types",
        )
    return {name: 1.0 / (1.0 - share + share / speedup) for name, share in found.items()}


def _family_speedups(lake, session_id, dag, family: str, speedup: float) -> dict[str, float]:
    """{family: speedup}, re-timed on the device queues by kernel family."""
    if dag.kind != "device_queues":
        raise AacoInputError(
            f"session {session_id} ran on the CPU: it has no GPU kernel families",
            fix="choose nodes by --node or --op-type",
        )
    rows = lake.query(
        "SELECT 1 FROM kernel_events_with_family WHERE session_id = $sid AND category = 'Kernel' "
        "AND kernel_family = $family LIMIT 1",
        {"sid": session_id, "family": family},
    )
    if rows.num_rows == 0:
        raise AacoInputError(
            f"no kernels of family {family!r} in session {session_id}",
            fix="aaco report --session " + session_id + " lists its kernels and families",
        )
    return {family: speedup}


def _runtime_names(dag: SessionDag) -> set[str]:
    if dag.kind == "host_threads":
        return set(dag.host.nodes.tolist())
    return set(dag.device.per_node["node_name"].to_pylist())


def _share(
    lake, session_id: str, dag: SessionDag, speedups: dict[str, float], key: str = "node_name"
) -> float:
    """The share of the session's node (kernel) time the re-timed nodes or families hold."""
    if key == "kernel_family":
        rows = lake.query(
            "SELECT sum(duration_ns) FILTER (WHERE kernel_family = $family) / sum(duration_ns) "
            "AS share FROM kernel_events_with_family WHERE session_id = $sid "
            "AND category = 'Kernel'",
            {"sid": session_id, "family": next(iter(speedups))},
        ).to_pylist()
        return float(rows[0]["share"] or 0.0)
    if dag.kind == "host_threads":
        host = dag.host
        chosen = np.isin(host.nodes[host.node], list(speedups))
        return float(host.duration[chosen].sum() / max(host.duration.sum(), 1))
    nodes = dag.device.per_node
    kernel = np.nan_to_num(nodes["kernel_ns"].to_numpy(zero_copy_only=False))
    chosen = np.isin(np.asarray(nodes["node_name"].to_pylist(), dtype=object), list(speedups))
    return float(kernel[chosen].sum() / max(kernel.sum(), 1))


def _interval(changes: np.ndarray) -> tuple[float, float]:
    """The bootstrap interval of the median change (percentile; its point when all agree)."""
    if len(changes) < 2 or np.ptp(changes) == 0:
        return float(np.median(changes)), float(np.median(changes))
    result = stats.bootstrap(
        (changes,), np.median, confidence_level=CONFIDENCE, method="percentile",
        n_resamples=2000, random_state=0,
    )  # fmt: skip
    interval = result.confidence_interval
    return float(interval.low), float(interval.high)

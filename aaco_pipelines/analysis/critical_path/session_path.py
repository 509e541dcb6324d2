"""Which node, made faster, makes the model faster, and by how much: the critical path of each
profiled iteration, every node's slack, and each node's gain at 2x (the what-if re-timing with
any speedup: `session_whatif`).

Share is not impact: a node that overlaps with others, or waits on the host, can hold 30 % of
kernel time and none of the critical path. So every session gets, per runtime node (and, through
the attribution, per original ONNX node):

- `critical_ns`: its time on the critical path per iteration (median over the profiled
  iterations), `slack_ns`: how much longer it could take without delaying the iteration;
  `overlap_ns` = its time off the path (hidden behind others);
- `gain_2x_ns`: the end-to-end time a 2x faster node saves, by re-timing the DAG (never by
  subtracting shares), for the nodes that could matter (see `GAIN_CANDIDATES`);
- for the session: the path's time, and the share of it the node executions do not cover
  (the host's share: launches and scheduling on a GPU, the executor's own time between nodes
  on a CPU).

Two DAGs, by what the trace holds: a CPU session's node executions on host threads
(`host_dag`), or a GPU trace's kernels on device queues behind their host launches
(`device_path`). `latency_changes` re-times either with some nodes' durations divided by a
speedup: each profiled iteration's change of latency.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import onnx
import pyarrow as pa

from aaco_pipelines.analysis.attribution.mapping import graph_from_nodes
from aaco_pipelines.analysis.attribution.session import (
    session_kernels,
    session_model_sha,
    with_profiled_nodes,
)
from aaco_pipelines.analysis.critical_path import device_path, device_whatif
from aaco_pipelines.analysis.critical_path import host_dag as dag_module
from aaco_pipelines.tracelake.schema import CRITICAL_PATH_NODES, CRITICAL_PATHS, conform

# Nodes whose 2x-faster gain is re-timed: those with the most time on the critical path.
# Shortening work off the path never shortens the iteration, and shortening the path by x
# shortens it by x at most, so a node outside them saves at most half its critical time, less
# than the last of them holds: once the best gain found exceeds that, no other node can beat
# it. A GPU trace's what-if is a pass over every kernel (seconds at 10^7), so fewer of them.
GAIN_CANDIDATES = {"host_threads": 20, "device_queues": 5}


# --- the session's DAG -----------------------------------------------------------------


@dataclass(frozen=True)
class SessionDag:
    """A session's DAG of one kind, with what every answer needs from it."""

    kind: str  # host_threads | device_queues
    host: dag_module.HostDag | None
    device: object | None  # analysis.critical_path.device_path's, for a GPU trace
    caveats: list[str]
    kernels: pa.Table | str | None = None  # a GPU trace's kernels with their node (attribution)
    # a CPU session's DAG with the profiler's own time taken out (host_dag.calibrated): what
    # what-ifs and gains re-time; the critical path itself is the observed DAG's
    calibrated: dag_module.HostDag | None = None
    # a GPU trace's 2x gains, re-timed over the same placing of its kernels (node -> changes)
    device_gains: dict[str, np.ndarray] | None = None


def session_dag(
    lake, session_id: str, optimized: onnx.ModelProto | None, with_gains: bool = False
) -> SessionDag | None:
    """The session's DAG: its device queues when it has device kernels, else its host node
    executions; None when it has neither (no profiled iterations). `with_gains`: a GPU trace's
    candidates' 2x gains too, computed over the same placing of its kernels."""
    if _has_device_kernels(lake, session_id):
        kernels = session_kernels(lake, session_id)
        names: list[str] = []

        def doubled(path) -> list[pa.Table]:
            critical = np.nan_to_num(path.per_node["critical_ns"].to_numpy(zero_copy_only=False))
            rows = gain_candidates(critical, GAIN_CANDIDATES["device_queues"])
            names.extend(path.per_node["node_name"][r].as_py() for r in rows)
            return [
                pa.table({"node_name": [n], "speedup": pa.array([2.0], pa.float64())})
                for n in names
            ]

        device, predicted = device_path.device_critical_path_and_what_ifs(
            lake, session_id, kernels, doubled if with_gains else None
        )
        if device is not None:
            gains = dict(zip(names, (_span_changes(p) for p in predicted), strict=True))
            return SessionDag(
                "device_queues", None, device, list(device.caveats), kernels,
                device_gains=gains if with_gains else None,
            )  # fmt: skip
    host = dag_module.host_dag(lake, session_id, runtime_graph(lake, session_id, optimized))
    if host is None:
        return None
    measured = _measured_p50(lake, session_id)
    retimed = dag_module.calibrated(host, measured) if measured is not None else host
    caveats = [] if optimized is not None else [NO_RUNTIME_GRAPH]
    caveats += _profiling_caveat(lake, session_id) + _pool_caveat(lake, session_id)
    return SessionDag("host_threads", host, None, caveats, calibrated=retimed)


PROFILING_CAVEAT_PCT = 50.0  # profiled iterations this much slower than measured get a caveat


def _profiling_caveat(lake, session_id: str) -> list[str]:
    """The profiler's own slowdown, when it is large: node times are then mostly its
    bookkeeping, and the re-timed changes (scaled to the measured p50) are rougher."""
    rows = lake.query(
        "SELECT profiling_overhead_pct FROM session_records WHERE session_id = ?", [session_id]
    ).to_pylist()
    overhead = rows[0]["profiling_overhead_pct"] if rows else None
    if overhead is None or overhead < PROFILING_CAVEAT_PCT:
        return []
    return [
        f"profiled iterations took {1 + overhead / 100:.1f}x the measured p50 (the profiler's "
        "own time around each node): what-ifs re-time them with that time taken out, first "
        "from the waits between nodes, then equally from every node; small nodes' changes are "
        "the roughest"
    ]


POOL_CAVEAT_SHARE = 0.5  # of the profiled node time run on a pool of several threads

POOL_SQL = """
SELECT max(e.pool_threads) AS threads,
       sum(e.duration_ns) FILTER (WHERE e.pool_threads > 1) / nullif(sum(e.duration_ns), 0)
           AS pooled,
       any_value(TRY_CAST(json_extract(s.env_json, '$.cpu.logical_cores') AS INTEGER)) AS cores
FROM kernel_events e JOIN session_records s USING (session_id)
WHERE e.session_id = $sid AND e.category = 'Node' AND e.iteration >= 0
"""


def _pool_caveat(lake, session_id: str) -> list[str]:
    """Nodes run on ONNX Runtime's intra-op pool of several threads: their time then depends on
    how the host scheduled the pool's threads (on a 2-core runner, whether the second one got a
    core), which re-timing one node cannot know. The what-if's accuracy was validated with one
    intra-op thread (README "What-if accuracy"); with the pool, neither the truth nor the
    prediction held still there."""
    [row] = lake.query(POOL_SQL, {"sid": session_id}).to_pylist()
    if not row["threads"] or (row["pooled"] or 0.0) < POOL_CAVEAT_SHARE:
        return []
    host = f" of a host with {row['cores']} logical cores" if row["cores"] else ""
    return [
        f"{row['pooled']:.0%} of the profiled node time ran on ONNX Runtime's intra-op pool of "
        f"{row['threads']} threads{host}: a pooled node's time depends on how the host "
        "scheduled those threads, which the what-if does not model; it is validated with one "
        "intra-op thread (README, What-if accuracy): set intra_op_threads: 1 in the sidecar "
        "for what-if studies"
    ]


def _has_device_kernels(lake, session_id: str) -> bool:
    rows = lake.query(
        "SELECT 1 FROM kernel_events WHERE session_id = $sid AND category = 'Kernel' LIMIT 1",
        {"sid": session_id},
    )
    return rows.num_rows > 0


NO_RUNTIME_GRAPH = (
    "no runtime graph in the bundle (optimized_model.onnx): data dependencies are the "
    "original graph's, as the profile names its nodes"
)


def runtime_graph(lake, session_id: str, optimized: onnx.ModelProto | None) -> onnx.GraphProto:
    """The graph ONNX Runtime ran, as its profile names the nodes."""
    if optimized is not None:
        graph = optimized.graph
    else:
        sha = session_model_sha(lake, session_id)
        graph = graph_from_nodes(
            lake.query("SELECT * FROM graph_nodes WHERE model_sha256 = ?", [sha])
        )
    return with_profiled_nodes(graph, lake, session_id)


# --- critical path, slack, gains ---------------------------------------------------------


def critical_path(lake, session_id: str, optimized: onnx.ModelProto | None) -> dict[str, pa.Table]:
    """The session's CRITICAL_PATHS row and CRITICAL_PATH_NODES rows (empty without a DAG)."""
    dag = session_dag(lake, session_id, optimized, with_gains=True)
    if dag is None:
        return {
            "critical_paths": CRITICAL_PATHS.empty_table(),
            "critical_path_nodes": CRITICAL_PATH_NODES.empty_table(),
        }
    if dag.kind == "host_threads":
        summary, nodes = _host_critical_path(dag.host)
    else:
        summary, nodes = _device_critical_path(dag.device)
    nodes = _with_gains(lake, session_id, dag, nodes)
    nodes = _onnx_nodes(lake, session_id, nodes)
    summary = {"session_id": session_id, "dag": dag.kind, **summary}
    summary["caveats_json"] = json.dumps(dag.caveats)
    return {
        "critical_paths": conform(pa.Table.from_pylist([summary]), CRITICAL_PATHS),
        "critical_path_nodes": conform(
            nodes.add_column(0, "session_id", pa.array([session_id] * nodes.num_rows, pa.string())),
            CRITICAL_PATH_NODES,
        ),
    }


def _host_critical_path(dag: dag_module.HostDag) -> tuple[dict, pa.Table]:
    finish = dag_module.finishes(dag, dag.duration)
    on_path = dag_module.critical_executions(dag, finish)
    slack = dag_module.slack(dag, finish)
    iterations, nodes = len(dag.iterations), len(dag.nodes)
    cell = dag.iteration * nodes + dag.node  # (iteration, node)
    kernel = np.bincount(cell, dag.duration, iterations * nodes).reshape(iterations, nodes)
    critical = np.bincount(cell, dag.duration * on_path, iterations * nodes)
    critical = critical.reshape(iterations, nodes)
    least_slack = np.full(iterations * nodes, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least_slack, cell, slack)
    ran = np.bincount(cell, minlength=iterations * nodes).reshape(iterations, nodes) > 0
    least_slack = np.where(ran, least_slack.reshape(iterations, nodes), np.nan)
    executions = np.bincount(cell, minlength=iterations * nodes).reshape(iterations, nodes)
    span = dag.run_end - dag.run_start
    path_nodes = critical.sum(axis=1)
    summary = {
        "iterations": iterations,
        "span_p50_ns": float(np.median(span)),
        "path_p50_ns": float(np.median(span)),  # the path runs from the run's start to its end
        "node_time_on_path_p50_ns": float(np.median(path_nodes)),
        "host_share": float(np.median(1 - path_nodes / np.maximum(span, 1))),
        "parallelism": float(np.median(kernel.sum(axis=1) / np.maximum(path_nodes, 1))),
    }
    table = pa.table(
        {
            "runtime_node": pa.array(dag.nodes.astype(object), pa.string()),
            "runtime_op_type": pa.array(dag.op_types, pa.string()),
            "kernel_ns": np.median(kernel, axis=0),
            "critical_ns": np.median(critical, axis=0),
            "slack_ns": np.nanmedian(least_slack, axis=0),
            "executions_per_iteration": np.median(executions, axis=0).astype(np.float64),
        }
    )
    return summary, _overlap(table)


def _device_critical_path(device) -> tuple[dict, pa.Table]:
    per_iteration = device.per_iteration
    span = np.asarray(per_iteration["span_ns"].to_numpy(zero_copy_only=False), np.float64)
    path = np.asarray(per_iteration["path_ns"].to_numpy(zero_copy_only=False), np.float64)
    host = np.asarray(per_iteration["host_ns"].to_numpy(zero_copy_only=False), np.float64)
    nodes = device.per_node
    kernel_total = float(np.nansum(nodes["kernel_ns"].to_numpy(zero_copy_only=False)))
    path_device = path - host
    summary = {
        "iterations": per_iteration.num_rows,
        "span_p50_ns": float(np.median(span)) if len(span) else None,
        "path_p50_ns": float(np.median(path)) if len(path) else None,
        "node_time_on_path_p50_ns": float(np.median(path_device)) if len(path) else None,
        "host_share": float(device.host_share) if device.host_share is not None else None,
        "parallelism": kernel_total / float(np.median(path_device)) if len(path) else None,
    }
    table = pa.table(
        {
            "runtime_node": nodes["node_name"],
            "runtime_op_type": pa.nulls(nodes.num_rows, pa.string()),
            "kernel_ns": nodes["kernel_ns"].cast(pa.float64()),
            "critical_ns": nodes["critical_ns"].cast(pa.float64()),
            "slack_ns": nodes["slack_ns"].cast(pa.float64()),
            "executions_per_iteration": nodes["dispatches_per_iteration"].cast(pa.float64()),
        }
    )
    return summary, _overlap(table)


def _overlap(table: pa.Table) -> pa.Table:
    kernel = table["kernel_ns"].to_numpy(zero_copy_only=False)
    critical = table["critical_ns"].to_numpy(zero_copy_only=False)
    return table.append_column("overlap_ns", pa.array(np.maximum(kernel - critical, 0.0)))


def _with_gains(lake, session_id: str, dag: SessionDag, nodes: pa.Table) -> pa.Table:
    """Each candidate node's end-to-end gain if it ran 2x faster (per iteration, at the
    session's measured p50); null for the nodes that cannot beat the best candidate."""
    gains = np.full(nodes.num_rows, np.nan)
    names = nodes["runtime_node"].to_pylist()
    critical = np.nan_to_num(nodes["critical_ns"].to_numpy(zero_copy_only=False))
    rows = gain_candidates(critical, GAIN_CANDIDATES[dag.kind])
    for row, changes in zip(rows, _doubled(lake, session_id, dag, [names[r] for r in rows]),
                            strict=True):  # fmt: skip
        gains[row] = -float(np.median(changes))
    return nodes.append_column("gain_2x_ns", pa.array(gains, mask=np.isnan(gains)))


def _doubled(lake, session_id: str, dag: SessionDag, names: list[str]) -> list[np.ndarray]:
    """Each node's latency changes at 2x (a GPU trace's: computed with its path)."""
    if dag.kind == "host_threads":
        return [latency_changes(lake, session_id, dag, {name: 2.0}) for name in names]
    gains = dag.device_gains or {}
    return [gains.get(name, np.zeros(1)) for name in names]


def _span_changes(spans: pa.Table) -> np.ndarray:
    span = np.asarray(spans["span_ns"].to_numpy(zero_copy_only=False), np.float64)
    predicted = np.asarray(spans["predicted_span_ns"].to_numpy(zero_copy_only=False), np.float64)
    return predicted - span


def gain_candidates(critical_ns: np.ndarray, count: int) -> list[int]:
    """The rows whose 2x gain is re-timed: the `count` with most time on the critical path."""
    order = np.argsort(-critical_ns, kind="stable")
    return [int(i) for i in order[:count] if critical_ns[i] > 0]


def latency_changes(
    lake, session_id: str, dag: SessionDag, speedups: dict[str, float], key: str = "node_name"
) -> np.ndarray:
    """Each profiled iteration's latency change (ns) with these runtime nodes' (or kernel
    families') speedups, re-timed on the session's DAG (a CPU session's with the profiler's
    own time taken out: host_dag.calibrated)."""
    if dag.kind == "host_threads":
        host = dag.calibrated
        factor = np.ones(len(host.nodes))
        index = {name: i for i, name in enumerate(host.nodes)}
        for name, speedup in speedups.items():
            if name in index:
                factor[index[name]] = speedup
        duration = np.round(host.duration / factor[host.node]).astype(np.int64)
        return dag_module.changes(host, duration).astype(np.float64)
    table = pa.table(
        {key: list(speedups), "speedup": pa.array(list(speedups.values()), pa.float64())}
    )
    spans = device_whatif.predict_device_spans(lake, session_id, table, key, kernels=dag.kernels)
    return _span_changes(spans)


def _measured_p50(lake, session_id: str) -> float | None:
    rows = lake.query(
        "SELECT latency_p50_ns FROM session_records WHERE session_id = ?", [session_id]
    ).to_pylist()
    return float(rows[0]["latency_p50_ns"]) if rows and rows[0]["latency_p50_ns"] else None


def current_p50(lake, session_id: str, dag: SessionDag) -> float:
    """The session's measured p50 latency (ns); a trace ingested without one: its profiled
    iterations' median span."""
    measured = _measured_p50(lake, session_id)
    if measured is not None:
        return measured
    if dag.kind == "host_threads":
        return float(np.median(dag.host.run_end - dag.host.run_start))
    return float(np.median(dag.device.per_iteration["span_ns"].to_numpy(zero_copy_only=False)))


def _onnx_nodes(lake, session_id: str, nodes: pa.Table) -> pa.Table:
    """The runtime nodes' rows spread over the original ONNX nodes they execute (the
    attribution's shares); a runtime node the attribution did not map keeps its own name."""
    return lake.query(
        """
        SELECT n.runtime_node, n.runtime_op_type,
               coalesce(a.onnx_node, '(unmatched) ' || n.runtime_node) AS onnx_node,
               a.onnx_op_type, coalesce(a.share, 1.0) AS share,
               n.kernel_ns, n.critical_ns, n.slack_ns, n.overlap_ns,
               n.executions_per_iteration, n.gain_2x_ns
        FROM nodes n
        LEFT JOIN (SELECT * FROM node_attribution WHERE session_id = $sid) a
          ON a.runtime_node = n.runtime_node
        ORDER BY n.gain_2x_ns DESC NULLS LAST, n.critical_ns DESC, n.runtime_node, onnx_node
        """,
        {"sid": session_id},
        tables={"nodes": nodes},
    )


# --- what to fix first ------------------------------------------------------------------

FIX_FIRST_MIN_GAIN = 0.05  # of the p50: a smaller gain is not worth reading (actions.MIN_WORTH)
FIX_FIRST_LIMIT = 3


def node_gains(lake, session_id: str) -> dict[str, float]:
    """Each runtime node's stored 2x gain (ns per iteration), for ranking by impact."""
    rows = lake.query(
        "SELECT runtime_node, max(gain_2x_ns) AS gain FROM critical_path_nodes "
        "WHERE session_id = $sid AND gain_2x_ns IS NOT NULL GROUP BY runtime_node",
        {"sid": session_id},
    ).to_pylist()
    return {r["runtime_node"]: r["gain"] for r in rows}


def fix_first(lake, session_id: str) -> list[tuple[str, str, float]]:
    """(action, why, ns saved) for the nodes whose 2x speedup saves the most end to end, best first:
    at most FIX_FIRST_LIMIT, each saving at least FIX_FIRST_MIN_GAIN of the p50."""
    rows = lake.query(
        """
        SELECT runtime_node, string_agg(onnx_node, ', ' ORDER BY share DESC) AS onnx_nodes,
               any_value(kernel_ns) AS kernel_ns, any_value(critical_ns) AS critical_ns,
               any_value(gain_2x_ns) AS gain, s.latency_p50_ns AS p50,
               (SELECT sum(kernel_ns) FROM (SELECT DISTINCT runtime_node, kernel_ns
                FROM critical_path_nodes WHERE session_id = $sid)) AS total
        FROM critical_path_nodes
        JOIN session_records s USING (session_id)
        WHERE session_id = $sid AND gain_2x_ns IS NOT NULL
        GROUP BY runtime_node, s.latency_p50_ns
        ORDER BY gain DESC, runtime_node
        """,
        {"sid": session_id},
    ).to_pylist()
    found = []
    for row in rows:
        p50 = row["p50"] or 0.0
        if not p50 or row["gain"] < FIX_FIRST_MIN_GAIN * p50 or len(found) == FIX_FIRST_LIMIT:
            break
        found.append(
            (
                f"make {row['onnx_nodes']} faster first: 2x faster saves "
                f"{row['gain'] / 1e6:.3g} ms of the {p50 / 1e6:.3g} ms p50 "
                f"({row['gain'] / p50:.0%})",
                f"re-timed critical path: it holds {row['kernel_ns'] / max(row['total'], 1):.0%} "
                f"of node time, {row['critical_ns'] / 1e6:.3g} ms of it on the critical path "
                f"(runtime node {row['runtime_node']})",
                float(row["gain"]),
            )
        )
    return found

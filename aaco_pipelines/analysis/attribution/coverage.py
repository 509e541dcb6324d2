"""Attribution coverage: how much of a model's profiled node time lands on original ONNX nodes.

The promise of attribution is that nearly all time (>= 95 %) is explained by the graph the user
wrote, whatever ONNX Runtime did to it. This module checks that promise on one model under one
optimization configuration (a sidecar's graph_optimization_level and disabled_optimizers): it
runs the model with ONNX Runtime's profiler on the CPU provider, in this process, through the
worker's own session set-up, and maps the saved runtime graph back with the session analysis'
own SQL and mapping. Used by the real-model tests and `benchmarks/real_models/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import onnx
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.analysis.attribution.mapping import (
    CONFIDENCE,
    as_profiled,
    map_runtime_nodes,
    original_nodes,
)
from aaco_pipelines.analysis.attribution.session import HOST_KERNELS_SQL
from aaco_pipelines.collectors.ort_profile import read_ort_profile
from aaco_pipelines.execution.ort_session import create_session, session_options
from aaco_pipelines.graph.extract import GraphExtract, extract_graph
from aaco_pipelines.graph.inputs import load_model, make_inputs, resolve_input_specs
from aaco_pipelines.registry.sidecar import load_sidecar

# label: (graph_optimization_level, disabled_optimizers), as a sidecar gives them
OPTIMIZATION_CONFIGS = {
    "basic": ("basic", ()),
    "extended": ("extended", ()),
    "all": ("all", ()),  # with the NCHWc layout transformer on the CPU provider
    "all_no_nchwc": ("all", ("NchwcTransformer",)),
}


@dataclass(frozen=True)
class ProfiledModel:
    extract: GraphExtract  # the original graph, with subgraph nodes and costs
    optimized: onnx.GraphProto  # the graph ONNX Runtime ran, as it saved it
    events: pa.Table  # the profile, in the KERNEL_EVENTS schema
    run_ns: int  # summed model_run spans of the profiled iterations


def profile_model(model_path: Path, config: str, workdir: Path, iterations: int = 5):
    """Run the model `iterations` times under one of OPTIMIZATION_CONFIGS, profiled."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # not the warning that an NCHWc model is host-specific
    specs = resolve_input_specs(load_model(model_path), load_sidecar(model_path).inputs, model_path)
    level, disabled = OPTIMIZATION_CONFIGS[config]
    request = {
        "model_path": str(model_path),
        "graph_optimization_level": level,
        "disabled_optimizers": disabled,
        "resolved_providers": ["CPUExecutionProvider"],
    }
    stem = workdir / f"{model_path.stem}.{config}"
    options = session_options(ort, request, profile_prefix=stem)
    optimized = Path(f"{stem}.optimized.onnx")
    session = create_session(ort, request, options, optimized)
    start_ns = session.get_profiling_start_time_ns()
    feeds = make_inputs(specs, seed=0)
    for _ in range(iterations):
        session.run(None, feeds)
    events = read_ort_profile(Path(session.end_profiling()), "coverage", start_ns)
    runs = events.filter(pc.equal(events["event_name"], "model_run"))
    return ProfiledModel(
        extract=extract_graph(model_path, specs),
        optimized=onnx.load(str(optimized), load_external_data=False).graph,
        events=events,
        run_ns=pc.sum(runs["duration_ns"]).as_py() or 0,
    )


def attribution_coverage(profiled: ProfiledModel) -> dict:
    """The session analysis' mapping and node times for a profiled model, and the share of node
    time per attribution method ("share" is all but runtime_inserted)."""
    con = duckdb.connect()
    con.register("events", profiled.events)
    con.execute(
        "CREATE VIEW kernel_events_with_family AS SELECT *, NULL AS kernel_family FROM events"
    )
    kernels = con.sql(HOST_KERNELS_SQL, params={"sid": "coverage"}).to_arrow_table()
    names = con.sql("SELECT DISTINCT node_name, op_type FROM events WHERE category = 'Node'")
    runtime_graph = as_profiled(profiled.optimized, names.to_arrow_table().to_pylist())
    mapping = map_runtime_nodes(original_nodes(profiled.extract.nodes), runtime_graph)
    con.register("kernels", kernels)
    con.register("mapping", mapping)
    per_node = con.sql(
        """
        WITH per_node AS (
            SELECT node_name, sum(duration_ns)::BIGINT AS ns FROM kernels GROUP BY ALL
        ),
        methods AS (
            SELECT runtime_node, arg_max(method, confidence) AS method,
                   any_value(runtime_op_type) AS op_type
            FROM mapping WHERE runtime_node IS NOT NULL GROUP BY ALL
        )
        SELECT p.node_name, coalesce(m.op_type, '?') AS op_type, p.ns,
               coalesce(m.method, 'runtime_inserted') AS method
        FROM per_node p LEFT JOIN methods m ON m.runtime_node = p.node_name
        ORDER BY p.ns DESC
        """
    ).to_arrow_table()
    total = pc.sum(per_node["ns"]).as_py() or 1
    by_method = {method: 0.0 for method in CONFIDENCE}
    for row in per_node.to_pylist():
        by_method[row["method"]] += row["ns"] / total
    return {
        "share": 1.0 - by_method["runtime_inserted"],
        "by_method": {m: v for m, v in by_method.items() if v > 0},
        "node_ns": total,
        "per_node": per_node,
        "mapping": mapping,
    }

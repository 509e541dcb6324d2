"""onnx_graph: the exact model file, frozen by content hash, and its extracted graph."""

import dagster as dg

from aaco_pipelines.assets.partitions import model_and_target, model_target_partitions
from aaco_pipelines.assets.session_page import as_text
from aaco_pipelines.resources import ModelRegistryResource
from aaco_pipelines.stages.prepare import prepare_model_version


@dg.asset(
    partitions_def=model_target_partitions,
    group_name="measurement",
    kinds={"onnx"},
    description="Freezes the registered model at its content hash and extracts its graph: nodes, "
    "edges, inferred shapes, and per-node FLOPs and bytes moved from the cost model.",
)
def onnx_graph(
    context: dg.AssetExecutionContext, registry: ModelRegistryResource
) -> dg.Output[dict]:
    model = registry.model(model_and_target(context.partition_key)[0])
    version, graph = prepare_model_version(model, registry.paths)
    return dg.Output(
        version.to_record(), metadata=as_text(_metadata(model, version, graph.summary))
    )


def _metadata(model, version, summary: dict) -> dict:
    return {
        "model_file": dg.MetadataValue.path(str(model.path)),
        "model_sha256": summary["model_sha256"],
        "node_count": summary["node_count"],
        "edge_count": summary["edge_count"],
        "opset": summary["opset"],
        "ir_version": summary["ir_version"],
        "parameter_count": summary["parameter_count"],
        "parameter_mib": round(summary["parameter_bytes"] / 2**20, 3),
        "total_gflops": round(summary["total_flops"] / 1e9, 4),
        "total_gbytes_moved": round(summary["total_bytes_moved"] / 1e9, 4),
        "inputs": dg.MetadataValue.json(
            {n: {"shape": list(s.shape), "dtype": s.dtype} for n, s in version.input_specs.items()}
        ),
        "op_type_histogram": dg.MetadataValue.table(
            records=[
                dg.TableRecord({"op_type": op, "count": n})
                for op, n in summary["op_histogram"].items()
            ],
            schema=dg.TableSchema(
                columns=[dg.TableColumn("op_type", "string"), dg.TableColumn("count", "int")]
            ),
        ),
        "graph_store": dg.MetadataValue.path(str(version.graph_dir)),
    }

"""Attribution: which ONNX graph node(s) each executed kernel belongs to, and GPU time per node.

Entry points:

- `session.attribute_session` maps a session's kernels to original ONNX nodes (through ONNX
  Runtime's fused graph) and stores time per node, op type and phase.
- `mapping.map_runtime_nodes` the pure mapping: runtime (fused) nodes -> original nodes.
- `gpu_kernels.attribute_gpu_kernels` which host node launched each device kernel of a GPU
  trace, after `clock_alignment.estimate_clock_offset` aligns the profiler's clock.
- `fusion_groups.fusion_groups` the nodes ONNX Runtime ran as one, one roofline point each.
- `coverage.attribution_coverage` how much profiled time lands on original nodes.
- `ranking_stability.ranking_stability` how sure the ranking of ops is (a bootstrap).
"""

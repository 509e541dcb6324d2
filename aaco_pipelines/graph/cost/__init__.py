"""The cost model: FLOPs and bytes moved per ONNX node, from tensor shapes alone, one module per
op family (dense, quantized, attention, normalization, elementwise, spatial, movement) on top of
the shared types and helpers (core), mapped to op types by domain (rules).

Entry points:

- `model.node_cost` one node's FLOPs and bytes moved, rule "unknown" when they cannot be told.
- `model.output_infos` a node's outputs, completed where ONNX shape inference cannot see them
  (the com.microsoft contrib ops), to feed back to inference.
- `model.rule_for` the name of the rule that costs an op of a domain.
- `core.TensorInfo` a tensor's shape and dtype; `core.tensor_bytes` its size in memory.
- `rules.RULES` and `rules.MS_RULES` the rules of the default domain and of com.microsoft.
"""

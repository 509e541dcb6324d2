"""Which node, made faster, makes the model faster, and by how much.

Entry points:

- `session_path.critical_path` each profiled iteration's critical path and every node's slack,
  on the host DAG (CPU sessions) or the device queues (GPU traces).
- `session_whatif.what_if` the model's latency with nodes (or an op family) made faster;
  `session_path.fix_first` the nodes whose speed-up pays most.
- `host_dag.host_dag` the dependency DAG of ONNX Runtime's node executions, and its re-timing.
- `device_path.device_critical_path` device queues and the host launches that feed them,
  placed as chains by `device_chains.session_chains`;
  `device_whatif.predict_device_spans` their spans with some kernels made faster.
"""

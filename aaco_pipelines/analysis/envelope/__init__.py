"""The hardware envelope: what an execution target can do, measured or from its datasheet.

Entry points:

- `measure.measure_envelope` peak GEMM FLOP/s per data type and streaming bandwidth per memory
  level, measured with ONNX Runtime on this host.
- `choice.session_envelope` which envelope judges a session: measured here, measured on that
  GPU model, or its datasheet; `choice.measure_and_save` keeps one in the TraceLake.
- `datasheets.match_datasheet` the published peaks of an AMD GPU this host cannot measure.
- `host_peak.theoretical_cpu_peak` the host CPU's theoretical fp32 peak, for a sanity check.
"""

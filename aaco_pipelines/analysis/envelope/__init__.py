"""The hardware envelope: what an execution target can do, measured or from its datasheet.

Entry points:

- `measure.measure_envelope` peak GEMM FLOP/s per data type and streaming bandwidth per memory
  level, measured with ONNX Runtime on this host (the micro-benchmark models in kernels.py, their
  sessions in session.py, the size and cache sweeps in sweep.py, the cache levels in caches.py).
- `record.HardwareEnvelope` what an envelope holds: a peak per resource and data type, and the
  hierarchical memory ceilings a roofline judges an op against.
- `choice.session_envelope` which envelope judges a session: measured here, measured on that
  GPU model, or its datasheet; `choice.measure_and_save` keeps one in the TraceLake.
- `record.datasheet_envelope` the envelope of a GPU this host cannot measure, from
  `datasheets.match_datasheet` (the published peaks of an AMD GPU).
- `host_peak.theoretical_cpu_peak` the host CPU's theoretical fp32 peak, for a sanity check.
"""

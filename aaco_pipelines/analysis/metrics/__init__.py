"""A session's derived metrics, one definition each, and whether its latencies can be trusted.

Entry points:

- `derived.session_metrics` the derived metrics of a session (kernel amplification, busy time,
  launch overhead...), computed from the kernel trace with numpy.
- `measurement_quality.measurement_quality` whether a session's latencies can be trusted
  (contention, throttling, too few samples), and why not.
"""

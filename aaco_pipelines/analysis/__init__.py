"""Turning measured sessions into findings: what limits a model, and what to do about it.

One sub-package per question a performance engineer asks of a session:

    attribution/    which ONNX node each kernel belongs to, time per node, op and fusion group
    metrics/        the session's derived metrics, and whether its latencies can be trusted
    envelope/       what this hardware can do: measured peaks, datasheets, which envelope judges
    bottleneck/     what limits the session: roofline, evidence, class with its confidence
    kernels/        why each GPU kernel takes its time: occupancy, counters, its class
    critical_path/  which node, made faster, makes the model faster (critical path, what-if)
    comparison/     what two sessions ran differently (structural diff), and run-to-run rivals

Readers of the TraceLake: they may import the foundation, storage and the producers, never a
stage or a surface. Each sub-package's __init__ names its entry points.
"""

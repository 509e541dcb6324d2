"""Governance: is a session a regression, an improvement or noise, and who should hear of it?

    drift/   each metric's series and verdict (robust z, EWMA, CUSUM, bootstrap), change points,
             false discovery control across a night's sweep
    gate/    the CI gate against a baseline: named baselines, the side-by-side re-measurement,
             root cause, bisection of versions
    alerts/  objectives (SLOs) judged, alerts with a lifecycle, webhook notifications

Readers of the TraceLake: they may import the foundation, storage and the producers, never a
stage or a surface. Each sub-package's __init__ names its entry points.
"""

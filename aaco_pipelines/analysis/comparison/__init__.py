"""Comparing sessions: what two sessions of one model ran differently, and run-to-run rivals.

Entry points:

- `structural_diff.structural_diff` node by node: fusions made or undone, kernels added or gone,
  time moved, each with its interval; `structural_diff.since_previous` against the model's last
  session.
- `across_sessions.rivals` whether a session's top op and class hold in its neighbours.
"""

"""Comparing sessions: what two sessions of one model ran differently, and run-to-run rivals.

Entry points:

- `structural_diff.structural_diff` node by node: fusions made or undone, kernels added or gone,
  time moved, each with its interval (its records: `structure_records.StructuralDiff`).
- `stored_structure.stored_since_previous` the diff against the model's previous session, as
  the drift stage kept it (`stored_structure.structure_row`);
  `stored_structure.structure_between` any pair, the kept diff where it is that pair.
- `across_sessions.rivals` whether a session's top op and class hold in its neighbours.
"""

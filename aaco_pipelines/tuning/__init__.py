"""Acting on a diagnosis (`aaco tune`): try a change, keep it only if it is faster and still
correct.

A tuner that keeps the fastest candidate without checking its outputs would recommend int8 to a
model that cannot bear it. This package judges candidates; it may import the foundation,
storage, the producers and the readers (analysis), never a stage or a surface.

Entry points:

- `accuracy.compare_outputs` a candidate's outputs against the baseline's: max absolute and
  relative error, cosine, top-1 agreement, and a one-line verdict against the limits
  (registry.accuracy_limits: the sidecar's `accuracy` key, `--accuracy METRIC:LIMIT[,...]`).
- `accuracy.fixed_seed_inputs` the model's inputs at a fixed seed (the measuring process's own);
  `accuracy.run_outputs` its outputs from a real ONNX Runtime session on the CPU provider.
- `candidates.runtime_candidates` and `candidates.graph_candidates` what may be tried: sidecar
  changes, and ONNX Runtime's own rewrites where the graph has what they act on;
  `candidates.search_order` in the order the session's decided class points at.
- `rewrites.rewrite_model` a graph candidate made by ONNX Runtime's own tools (transformer
  fusions, dynamic int8, fp16) into a new file, never over the user's model.
- `race.race` a candidate against the baseline side by side (the gate's mirrored rounds): faster
  only with its interval on the faster side, the threshold met and a second process agreeing.
- `search.search` the candidates in order: checked correct, screened, raced; the best is the
  accepted candidate most surely faster (the highest lower bound of its speedup).
"""

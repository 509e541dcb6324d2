"""Drift: each metric of a model as a series of sessions, and a verdict on the newest one.

A verdict needs statistical evidence and a practically significant effect with a bootstrap CI
that excludes zero, and it carries every parameter it used so it can be reproduced.

Entry points:

- `series.judge_series` every metric's history and verdict for a model on one target.
- `verdict.drift_verdict` the verdict for one series: regression, improvement or no change.
- `detectors.ewma` and `detectors.cusum` the shift detectors, with their average run lengths
  from `arl.ewma_arl` and `arl.cusum_arl`.
- `robust_scale.robust_reference` median and Qn scale of a series' reference points.
- `session_bootstrap.bootstrap_effects` a session against reference sessions, hierarchically.
- `noise.series_shape` whether a history is too noisy or bimodal for a verdict to mean much.
- `changepoint.detect_change_points` where a series' level or distribution changed.
- `fdr.control_sweep` a night's verdicts under false-discovery-rate control.
"""

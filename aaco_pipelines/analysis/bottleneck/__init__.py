"""What limits a session: its place on the roofline, the evidence, and a class with confidence.

Entry points:

- `roofline.roofline_table` ops and fusion groups placed on the measured envelope's roofline;
  `roofline.judge_roofline` keeps no point above its roof.
- `evidence.session_evidence` the evidence signals of one session, from the TraceLake.
- `classification.classify_bottleneck` launch-, CPU-, memory-, compute-bound or throttled, with a
  Bayesian confidence and what to do about it.
"""

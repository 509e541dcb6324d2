"""The gate: is this session a regression against its baseline, and what caused it?

Entry points:

- `decision.gate_verdict` one answer for a CI job: regression, severity, each metric's change
  with its CI, suspected cause and what to do next.
- `baselines.create_baseline` and `baselines.compare_to_baseline` named baselines, kept with
  the environment they were measured in.
- `paired.judge_side_by_side` the baseline's model version and the current one measured again
  together, interleaved, and judged on that paired comparison.
- `root_cause.explain_change` what differs between baseline and current sessions, ranked.
- `generation_effects.generation_effects` where a generation session's TTFT change went.
- `bisection.bisect_versions` which of the versions between a good and a bad session did it.
"""

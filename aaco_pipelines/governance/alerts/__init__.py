"""Alerts: the changes a team should hear about, and the limits it set.

Entry points:

- `objectives.judge_objectives` each objective (SLO) judged on a session, breached only when
  the figure's interval lies beyond the limit.
- `lifecycle.sync_alerts` opens, updates, fixes and reopens alerts from a session's verdicts;
  `lifecycle.set_state` is what people do (acknowledge, invalid, fixed).
- `notifications.deliver_due` sends pending alert events to the webhook, at least once and
  never twice.
"""

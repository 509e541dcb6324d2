"""The TraceLake's tables, one Arrow schema each, in modules by the group they belong to.

- sessions: a session and the model it ran: `sessions.SESSIONS`, `sessions.ITERATIONS`,
  `sessions.TELEMETRY`, `sessions.COMPLETED_SESSIONS`; `sessions.MODELS`,
  `sessions.GRAPH_NODES`, `sessions.GRAPH_EDGES`.
- traces: what the profilers recorded: `traces.KERNEL_EVENTS`, `traces.API_CALLS`,
  `traces.MEMORY_COPIES`, `traces.COUNTERS`, `traces.AGENTS`, `traces.KERNEL_SYMBOLS`.
- generation: LLM generation sessions: `generation.REQUESTS`, `generation.GENERATION_STEPS`,
  `generation.GENERATION_METRICS`.
- analysis: attribution and analysis results: `analysis.NODE_ATTRIBUTION`,
  `analysis.OP_BREAKDOWN`, `analysis.PHASE_BREAKDOWN`, `analysis.DERIVED_METRICS`,
  `analysis.MEASUREMENT_QUALITY`, `analysis.BOTTLENECK_REPORTS`, `analysis.KERNEL_PLACES`,
  `analysis.CRITICAL_PATHS`, `analysis.CRITICAL_PATH_NODES`, `analysis.STRUCTURAL_DIFFS`.
- roofline: the hardware's peaks and the work against them: `roofline.HARDWARE_ENVELOPES`,
  `roofline.ROOFLINE_POINTS`, `roofline.KERNEL_DIAGNOSES`, `roofline.COUNTER_ROOFLINE`.
- governance: `governance.DRIFT_VERDICTS`, `governance.OBJECTIVE_VERDICTS`, `governance.ALERTS`,
  `governance.ALERT_EVENTS`, `governance.ALERT_DELIVERIES`, `governance.BISECTIONS`,
  `governance.BASELINES`.
- columns: the column types they share.

The registry of them all is aaco_pipelines.tracelake.schema (schema.py beside this package): it
imports every table by name into TABLES, holds SCHEMA_VERSION, how tables are stored and viewed,
the DDL and conform(). Code imports a table from there (from aaco_pipelines.tracelake.schema import
KERNEL_EVENTS, conform). A new table or column: its schema here, in its group's module; a new
table registered in TABLES; SCHEMA_VERSION bumped and the migration in tracelake/store.py.
"""

"""Every environment variable aaco reads, with what it does: one table, for the documentation.

Each module that reads a variable keeps reading it where it needs it; this is where people find
them all. An entry is the variable's meaning, then its value when unset after "Default: " (the
reference page shows the two apart). The reference page (docs/reference_pages.py) fails the
site's build, and tests/test_docs_reference.py fails, when an `AACO_...` name (or DAGSTER_HOME)
written in aaco_pipelines/, assets/, resources/ or sensors/ has no entry here, or an entry names
a variable no source mentions any more. The variables aaco sets for its own child processes are
listed too (marked internal): they show up in process environments and should not be set by hand.
"""

from __future__ import annotations

DEFAULT = " Default: "  # separates an entry's meaning from its default

ENVIRONMENT: dict[str, str] = {
    # --- where the data is
    "AACO_HOME": "Where aaco keeps everything: the model registry, session bundles (sessions/), "
    "failed runs' evidence (failed/), the graph store, the TraceLake and the Dagster instance."
    + DEFAULT
    + "$XDG_DATA_HOME/aaco when XDG_DATA_HOME is an absolute path, else ~/.aaco.",
    "XDG_DATA_HOME": "The user's data folder (XDG Base Directory specification): AACO_HOME's "
    "default lies under it." + DEFAULT + "unset (AACO_HOME is then ~/.aaco).",
    "AACO_REGISTRY": "The model registry: the folder of *.onnx files (and their sidecars) "
    "the registry sensor watches and `aaco sweep` measures." + DEFAULT + "AACO_HOME/registry.",
    "AACO_TRACELAKE": "The TraceLake's DuckDB file, where every session's tables are loaded."
    + DEFAULT
    + "AACO_HOME/tracelake.duckdb.",
    "DAGSTER_HOME": "The Dagster instance's folder: its dagster.yaml, runs, dynamic partitions "
    "and sensor cursors (aaco writes its dagster.yaml there on first start)."
    + DEFAULT
    + "AACO_HOME/dagster.",
    # --- what and when to measure
    "AACO_TARGET": "The execution target this deployment measures on (cpu, gpu0, ...): its "
    "partition, its device pool, and the run queue a device worker takes." + DEFAULT + "cpu.",
    "AACO_NIGHTLY_CRON": "When the nightly regression sweep runs (a cron expression), read when "
    "the code location loads." + DEFAULT + "0 2 * * * (02:00).",
    "AACO_TIMEZONE": "The time zone of the nightly schedule and of the nights' partitions, so "
    "a night's date is the same for the sweep and its review." + DEFAULT + "UTC.",
    "AACO_LABORATORY": "1: the runner measures in laboratory mode (cores pinned, thread counts "
    "fixed, a cgroup where possible)." + DEFAULT + "0 (off).",
    "AACO_UI_PORT": "The port `aaco ui` (and `make run`) serves the Dagster UI on, unless "
    "--port is given." + DEFAULT + "3000.",
    "AACO_REPORTS_PORT": "The port `aaco ui` serves AACO_HOME/reports/ on (the sessions' HTML "
    "reports and Perfetto traces the asset pages link to); ui.perfetto.dev fetches traces only "
    "from 9001." + DEFAULT + "9001, else any free port.",
    # --- limits and patience
    "AACO_LOCK_TIMEOUT_S": "The longest wait, in seconds, for a TraceLake that another process "
    "holds, before the step fails naming that process." + DEFAULT + "60.",
    "AACO_DUCKDB_MEMORY_MB": "The memory DuckDB may use for a TraceLake file, in MiB (at least "
    "128)." + DEFAULT + "1024.",
    "AACO_TRACE_READ_TIMEOUT_S": "The seconds a trace file's read may take before it is stopped "
    "as stuck (a damaged or hostile trace)." + DEFAULT + "60 s plus 1 s per 10 MB of trace.",
    "AACO_SERVICE_PATIENCE_S": "How long, in seconds, a service (PostgreSQL, redis) may be away "
    "before the operation that needs it fails: a restart or failover is waited out."
    + DEFAULT
    + "60.",
    "AACO_ORPHAN_GRACE_S": "Seconds after its last change before a published session that "
    "never completed is quarantined to failed/ as an orphan." + DEFAULT + "3600 (an hour).",
    "AACO_FAILED_KEEP_DAYS": "failed/ keeps a failed run's evidence this many days; older "
    "folders are pruned when a new session starts." + DEFAULT + "14.",
    "AACO_FAILED_KEEP_GB": "failed/ is pruned, oldest first, while larger than this many GiB."
    + DEFAULT
    + "2.",
    # --- scaling out
    "AACO_DAGSTER_POSTGRES_URL": "The PostgreSQL database of a scaled-out Dagster instance "
    "(runs, event log, schedules), shared by the head node and the device workers."
    + DEFAULT
    + "unset: SQLite files in DAGSTER_HOME.",
    "AACO_CELERY_BROKER": "The broker (redis URL) that routes each run to its device's worker "
    "(dagster-celery)." + DEFAULT + "unset: runs are launched on this host.",
    "AACO_DUCKLAKE_CATALOG": "The libpq connection string of the shared TraceLake's catalog "
    "(DuckLake on PostgreSQL); set, every host reads and writes that lake instead of the DuckDB "
    "file. Needs AACO_DUCKLAKE_DATA." + DEFAULT + "unset: the DuckDB file AACO_TRACELAKE.",
    "AACO_DUCKLAKE_DATA": "The folder (or object-store URL) every host sees, where the shared "
    "TraceLake keeps its data files." + DEFAULT + "unset (required with AACO_DUCKLAKE_CATALOG).",
    "AACO_HEARTBEAT_S": "Seconds between a device worker's signs of life while it runs a run "
    "(a test cluster shortens it); every write is valid six beats." + DEFAULT + "5.",
    # --- alerts
    "AACO_ALERT_WEBHOOK_URL": "The webhook alert notifications are POSTed to (the alert sensor "
    "and `aaco alert deliver`)." + DEFAULT + "unset: alerts are kept, not sent.",
    "AACO_ALERT_WEBHOOK_SECRET": "Signs each notification's body with HMAC-SHA256 under this "
    "secret." + DEFAULT + "unset: unsigned.",
    # --- the terminal
    "NO_COLOR": "Any non-empty value: the command line prints no colour, even on a terminal "
    "(no-color.org); piped output never has any." + DEFAULT + "unset: verdicts coloured on a "
    "terminal.",
    # --- internal: set by aaco for its own child processes
    "AACO_REPORTS_URL": "Internal: where `aaco ui` serves the session files, handed to Dagster "
    "so the asset pages link to them." + DEFAULT + "unset: the pages show their paths.",
    "AACO_HEARTBEAT_URL": "Internal: the result backend's URL, handed to a worker's heartbeat "
    "process (not in its command line)." + DEFAULT + "set by aaco.",
    "AACO_LIFELINE_FD": "Internal: the pipe a measuring process watches to die with the process "
    "that started it." + DEFAULT + "set by aaco.",
    "AACO_LIFELINE_PARENT": "Internal: pid, start time and process group of the process that "
    "started a measuring process, watched where the pipe did not survive."
    + DEFAULT
    + "set by aaco.",
    "AACO_CLUSTER_PROCESS": "Internal: the mark the processes of `aaco ui` and `aaco cluster` "
    "inherit, by which what a killed one left behind is found and stopped."
    + DEFAULT
    + "set by aaco.",
}

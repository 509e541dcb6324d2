"""The Dagster instance AACO runs on: DAGSTER_HOME under AACO_HOME, with its dagster.yaml.

Embedded by default (SQLite files in DAGSTER_HOME, no services). With AACO_DAGSTER_POSTGRES_URL
set, runs, event logs, schedules, sensor cursors and dynamic partitions live in PostgreSQL
(dagster-postgres's storages, patient with a server away for a moment: patient_postgres.py), so
several hosts can share one instance. The URL's driver is made explicit:
SQLAlchemy 2.1 reads a plain `postgresql://` as psycopg 3, which is not what dagster-postgres
ships with (psycopg2). With AACO_CELERY_BROKER set too (a redis URL), runs are
launched as Celery tasks on the queue of their partition's target (launcher.py), which that
device's worker on the host that owns it takes (`aaco worker --target gpu3`).

A surface, and with definitions.py the only part of aaco_pipelines that imports Dagster; it
imports the foundation only.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from aaco_pipelines.config import TRACELAKE_WRITER_POOL, default_target, device_pool
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.extras import needed
from aaco_pipelines.foundation.service_errors import cannot_connect, refuse_unencoded_at
from aaco_pipelines.instance.variables import BROKER_ENV, POSTGRES_ENV

TEMPLATE = Path(__file__).with_name("dagster.yaml")
DRIVER = "postgresql+psycopg2"
TARGETS_PARTITIONS = "targets"  # assets.partitions.targets_partitions
CONNECT_TIMEOUT_S = 10  # the up-front check's longest wait for the server
EVENT_LOG_TITLE = (
    "# Dagster's SQLite event log, its files opened cheaper (instance/event_log.py).\n"
)


def event_log_dir(dagster_home: Path) -> Path:
    """Where Dagster's own SQLite event log keeps its files, and so the embedded one's."""
    return Path(dagster_home).absolute() / "history" / "runs"


def event_log_settings(dagster_home: Path) -> dict:
    """dagster.yaml's event_log_storage section for the embedded instance: event_log.py's
    SqliteEventLog, keeping its files where Dagster's own does, so the runs recorded before stay
    readable."""
    return {
        "event_log_storage": {
            "module": "aaco_pipelines.instance.event_log",
            "class": "SqliteEventLog",
            "config": {"base_dir": str(event_log_dir(dagster_home))},
        }
    }


def _check_event_log_place(config: Path, stored: dict) -> None:
    """The event log's folder is written into dagster.yaml as a full path: a DAGSTER_HOME moved
    (or copied) elsewhere would start an empty history there instead of reading its own."""
    written = ((stored.get("event_log_storage") or {}).get("config") or {}).get("base_dir")
    own = event_log_dir(config.parent)
    if isinstance(written, str) and not Path(written).exists() and own.exists():
        raise AacoInputError(
            f"this DAGSTER_HOME's event log is configured at {written}, which does not exist, "
            f"while its own history is at {own} (was the folder moved?)",
            path=config,
            fix=f"set event_log_storage's base_dir in it to {own}",
        )


NUX_OFF = (
    '# No "Join the Dagster community" sign-up dialog over the asset graph on first open.\n'
    "nux:\n  enabled: false\n"
)


def _turn_off_nux(config: Path, stored: dict) -> None:
    """A dagster.yaml AACO wrote (its template's title first) before the template turned
    Dagster's sign-up dialog off gets the setting appended, its comments and edits kept. One
    that says anything about `nux`, or that is not AACO's, stays as it is: the user's choice."""
    text = config.read_text()
    if "nux" in stored or not text.startswith(TEMPLATE.read_text().split("\n", 1)[0]):
        return
    config.write_text(text + ("" if text.endswith("\n") else "\n") + NUX_OFF)


def celery_launcher(default_queue: str) -> dict:
    """dagster.yaml's run_launcher section: Celery tasks, broker and results on the broker URL
    (read from the environment), runs without a device queue tag on `default_queue`."""
    broker = {"env": BROKER_ENV}
    return {
        "run_launcher": {
            "module": "aaco_pipelines.instance.launcher",
            "class": "DeviceQueueRunLauncher",
            "config": {"broker": broker, "backend": broker, "default_queue": default_queue},
        }
    }


# A run whose device worker died (or that no worker started in time) is run again, at most
# twice, on its device's queue; a run that failed in a step (a failed measurement, a
# regression) is not: it would fail the same way.
RUN_RETRIES = {
    "run_retries": {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False}
}


def postgres_url(raw: str) -> str:
    """The URL with psycopg2 named as its driver; an error naming the variable otherwise."""
    scheme = urlsplit(raw).scheme
    if scheme in ("postgres", "postgresql"):
        return DRIVER + raw[len(scheme) :]
    if scheme == DRIVER:
        return raw
    raise AacoInputError(
        f"{POSTGRES_ENV} must be a PostgreSQL URL, not one with scheme {scheme or '(none)'!r}",
        fix=f"e.g. {POSTGRES_ENV}=postgresql://USER:PASSWORD@HOST:5432/dagster",
    )


def check_postgres(url: str) -> None:
    """Connect once, briefly: a wrong password, a server down or a missing database is one line
    naming the variable and the fix now, not minutes of dagster-postgres retries and a
    traceback later."""
    import psycopg2

    dsn = "postgresql" + url[len(DRIVER) :] if url.startswith(DRIVER + "://") else url
    try:
        psycopg2.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg2.Error as exc:
        raise cannot_connect(
            str(exc), url, service="the Dagster instance's database", variable=POSTGRES_ENV
        ) from None


def prepare_dagster_home(dagster_home: Path) -> Path:
    """Create DAGSTER_HOME with AACO's dagster.yaml unless the user already has one there.

    A persistent DAGSTER_HOME keeps runs, dynamic partitions and sensor cursors across restarts:
    the history that drift detection reads. With AACO_DAGSTER_POSTGRES_URL set, the new
    dagster.yaml stores them in PostgreSQL, and the variable is normalized in this process's
    environment (which Dagster's processes inherit); with AACO_CELERY_BROKER set too, it launches
    runs on their device's Celery queue. An existing dagster.yaml without what the variables ask
    for is refused rather than silently kept embedded.
    """
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    raw, broker = os.environ.get(POSTGRES_ENV), os.environ.get(BROKER_ENV)
    for variable, url in ((POSTGRES_ENV, raw), (BROKER_ENV, broker)):
        if url:
            refuse_unencoded_at(url, variable)
    if broker and not raw:
        raise AacoInputError(
            f"{BROKER_ENV} is set without {POSTGRES_ENV}: device workers on other hosts must "
            "share the instance",
            fix=f"set {POSTGRES_ENV} too (see 'Scaling out' in README)",
        )
    for module in (["dagster_postgres", "psycopg2"] if raw else []) + (
        ["dagster_celery", "redis"] if broker else []
    ):
        needed(module)  # the `cluster` extra: one line now, not a traceback from Dagster later
    if not config.exists():
        _write_config(config, postgres=bool(raw), celery=bool(broker))
    if raw:
        os.environ[POSTGRES_ENV] = postgres_url(raw)
    stored = yaml.safe_load(config.read_text()) or {}
    _check_event_log_place(config, stored)
    _turn_off_nux(config, stored)
    if raw and not stores_on_postgres(stored):
        raise AacoInputError(
            f"{POSTGRES_ENV} is set but this DAGSTER_HOME's dagster.yaml stores on SQLite",
            path=config,
            fix=f"add to it: storage: {{postgres: {{postgres_url: {{env: {POSTGRES_ENV}}}}}}}, "
            "or use a new DAGSTER_HOME",
        )
    if broker and "run_launcher" not in stored:
        raise AacoInputError(
            f"{BROKER_ENV} is set but this DAGSTER_HOME's dagster.yaml launches runs in place",
            path=config,
            fix="add the run_launcher section of README's 'Scaling out', or use a new DAGSTER_HOME",
        )
    if raw:
        check_postgres(os.environ[POSTGRES_ENV])
        initialize_pools(dagster_home, (TRACELAKE_WRITER_POOL, device_pool()))
    return dagster_home


def stores_on_postgres(stored: dict) -> bool:
    """Whether a dagster.yaml stores on PostgreSQL: AACO's patient storages, or Dagster's own
    (`storage: postgres`, what AACO wrote before)."""
    if "postgres" in (stored.get("storage") or {}):
        return True
    run_storage = stored.get("run_storage") or {}
    return str(run_storage.get("module", "")).startswith(("dagster_postgres", __name__))


def routes_runs(instance) -> bool:
    """Whether the instance sends runs to device workers (dagster-celery's launcher, queue per
    device) instead of running them on this host. Then only the workers' devices are targets:
    the head node measures nothing itself. Without the `cluster` extra, no instance can."""
    try:
        from dagster_celery.launcher import CeleryRunLauncher
    except ModuleNotFoundError:
        return False

    return isinstance(instance.run_launcher, CeleryRunLauncher)


def register_target(dagster_home: Path, target: str) -> None:
    """Add the target's partition (`targets`): from now on the sensors and the nightly schedule
    request every model on it too."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        if target not in instance.get_dynamic_partitions(TARGETS_PARTITIONS):
            instance.add_dynamic_partitions(TARGETS_PARTITIONS, [target])


def initialize_pools(dagster_home: Path, pools: tuple[str, ...]) -> None:
    """Give the pools their default limit now, once, rather than when two runs first claim a
    slot at the same moment: on PostgreSQL, Dagster 1.13's first-claim initialization of one pool
    by two runs fails one of them (an IntegrityError leaves its transaction aborted, and the
    UPDATE that follows raises InFailedSqlTransaction)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        storage = instance.event_log_storage
        for pool in pools:
            if pool in storage.get_concurrency_keys():
                continue
            try:
                storage.initialize_concurrency_limit_to_default(pool)
            except Exception:
                if pool not in storage.get_concurrency_keys():  # not another host's doing
                    raise


def _write_config(config: Path, *, postgres: bool, celery: bool) -> None:
    """The template, with the PostgreSQL storage and the Celery launcher when asked for, else
    with the embedded event log (event_log.py: Dagster's SQLite one, opened cheaper)."""
    if not postgres:
        section = yaml.safe_dump(event_log_settings(config.parent), sort_keys=False)
        config.write_text(TEMPLATE.read_text() + EVENT_LOG_TITLE + section)
        return
    from aaco_pipelines.instance.patient_postgres import storage_settings

    # the URL is read from the environment, never written down
    settings = yaml.safe_load(TEMPLATE.read_text()) | storage_settings(POSTGRES_ENV)
    if celery:
        settings |= celery_launcher(default_target()) | RUN_RETRIES
    title = TEMPLATE.read_text().split("\n", 1)[0]
    config.write_text(title + "\n" + yaml.safe_dump(settings))

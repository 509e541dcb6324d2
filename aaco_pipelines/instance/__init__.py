"""The Dagster instance AACO runs on: DAGSTER_HOME under AACO_HOME, with its dagster.yaml.

Embedded by default (SQLite files in DAGSTER_HOME, no services). With AACO_DAGSTER_POSTGRES_URL
set, runs, event logs, schedules, sensor cursors and dynamic partitions live in PostgreSQL
(dagster-postgres), so several hosts can share one instance. The URL's driver is made explicit:
SQLAlchemy 2.1 reads a plain `postgresql://` as psycopg 3, which is not what dagster-postgres
ships with (psycopg2).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from aaco_pipelines.errors import AacoInputError

TEMPLATE = Path(__file__).with_name("dagster.yaml")
POSTGRES_ENV = "AACO_DAGSTER_POSTGRES_URL"
DRIVER = "postgresql+psycopg2"
# dagster.yaml's storage section: the URL is read from the environment, never written down.
POSTGRES_STORAGE = {"storage": {"postgres": {"postgres_url": {"env": POSTGRES_ENV}}}}


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


def prepare_dagster_home(dagster_home: Path) -> Path:
    """Create DAGSTER_HOME with AACO's dagster.yaml unless the user already has one there.

    A persistent DAGSTER_HOME keeps runs, dynamic partitions and sensor cursors across restarts:
    the history that drift detection reads. With AACO_DAGSTER_POSTGRES_URL set, the new
    dagster.yaml stores them in PostgreSQL, and the variable is normalized in this process's
    environment (which Dagster's processes inherit); an existing dagster.yaml that does not
    store in PostgreSQL is refused rather than silently kept on SQLite.
    """
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    raw = os.environ.get(POSTGRES_ENV)
    if not config.exists():
        if raw:
            settings = yaml.safe_load(TEMPLATE.read_text()) | POSTGRES_STORAGE
            config.write_text(
                TEMPLATE.read_text().split("\n", 1)[0] + "\n" + yaml.safe_dump(settings)
            )
        else:
            shutil.copyfile(TEMPLATE, config)
    if raw:
        os.environ[POSTGRES_ENV] = postgres_url(raw)
        stored = yaml.safe_load(config.read_text()) or {}
        if "postgres" not in (stored.get("storage") or {}):
            raise AacoInputError(
                f"{POSTGRES_ENV} is set but this DAGSTER_HOME's dagster.yaml stores on SQLite",
                path=config,
                fix=f"add to it: storage: {{postgres: {{postgres_url: {{env: {POSTGRES_ENV}}}}}}}, "
                "or use a new DAGSTER_HOME",
            )
    return dagster_home

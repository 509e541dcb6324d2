"""Dagster's PostgreSQL storages, patient with a server that is away for a moment.

dagster-postgres tries a connection six times over about six seconds, then raises
`DagsterPostgresException: too many retries`: a 15 s restart of the server (an upgrade, a
failover) failed every run in flight, killed the daemon's iterations and the waiting `aaco sweep`.
These storages keep trying while the server is unreachable (refused, shutting down, starting
up), for AACO_SERVICE_PATIENCE_S (60 s), then give up with the one-line error of
`service_errors` naming the server and the fix. A refused password or a missing database is not waited for: it will not heal.

The storages open a new connection for every operation (dagster-postgres's NullPool), so a
patient connect covers a server that restarts between two operations; the few milliseconds of
an operation already running when the server goes down are not covered. In the webserver,
dagster-postgres holds one connection open instead (optimize_for_webserver): after a restart
the next page load failed on it. Here that held connection is pinged at every checkout and
replaced when dead (SQLAlchemy's pool_pre_ping), then connected patiently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy.exc
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import (
    create_pg_engine,
    get_token_provider_from_config,
    pg_url_from_config,
    set_pg_statement_timeout,
)
from sqlalchemy import event

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.patience import patiently, service_patience_s
from aaco_pipelines.foundation.service_errors import cannot_connect, unreachable
from aaco_pipelines.instance.variables import POSTGRES_ENV

SERVICE = "the Dagster instance's database"
CONNECTION_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


def connect_patiently(engine: sqlalchemy.engine.Engine, patience_s: float | None = None):
    """A connection of `engine`, tried again while the server is unreachable, for up to
    `patience_s` (AACO_SERVICE_PATIENCE_S, 60 s); then the one-line error."""
    if patience_s is None:
        patience_s = service_patience_s()

    def away(exc: Exception) -> bool:
        return isinstance(exc, CONNECTION_ERRORS) and unreachable(str(exc.orig or exc))

    def give_up(exc: Exception) -> Exception:
        error = cannot_connect(
            str(exc.orig or exc),
            engine.url.render_as_string(hide_password=True),
            service=SERVICE,
            variable=POSTGRES_ENV,
        )
        return AacoInputError(f"{error.problem} for over {patience_s:.0f} s", fix=error.fix)

    return patiently(engine.connect, away, patience_s=patience_s, what=SERVICE, give_up=give_up)


@contextlib.contextmanager
def patient_connection(engine: sqlalchemy.engine.Engine) -> Iterator[sqlalchemy.Connection]:
    connection = connect_patiently(engine)
    try:
        yield connection
    finally:
        connection.close()


def _arguments(inst_data, config_value) -> dict:
    """What dagster-postgres's own from_config_value passes to each storage."""
    return {
        "inst_data": inst_data,
        "postgres_url": pg_url_from_config(config_value),
        "should_autocreate_tables": config_value.get("should_autocreate_tables", True),
        "token_provider": get_token_provider_from_config(config_value),
    }


class PingedInWebserver:
    """dagster-postgres's webserver engine (one held connection, a statement timeout), with the
    held connection pinged at each checkout: a dead one (the server restarted) is replaced."""

    def optimize_for_webserver(
        self, statement_timeout: int, pool_recycle: int, max_overflow: int
    ) -> None:
        kwargs = {
            "isolation_level": "AUTOCOMMIT",
            "pool_size": 1,
            "pool_recycle": pool_recycle,
            "max_overflow": max_overflow,
            "pool_pre_ping": True,
        }
        options = self._engine.url.query.get("options")
        if options:
            kwargs["connect_args"] = {"options": options}
        self._engine = create_pg_engine(self.postgres_url, self._token_provider, **kwargs)
        event.listen(
            self._engine,
            "connect",
            lambda connection, _: set_pg_statement_timeout(connection, statement_timeout),
        )


class PatientRunStorage(PingedInWebserver, PostgresRunStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):  # ty: ignore[invalid-method-override]
        return cls(**_arguments(inst_data, config_value))

    def connect(self):
        return patient_connection(self._engine)


class PatientEventLogStorage(PingedInWebserver, PostgresEventLogStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(**_arguments(inst_data, config_value))

    def _connect(self):
        return patient_connection(self._engine)


class PatientScheduleStorage(PingedInWebserver, PostgresScheduleStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):  # ty: ignore[invalid-method-override]
        return cls(**_arguments(inst_data, config_value))

    def connect(self, run_id: str | None = None):
        return patient_connection(self._engine)


def storage_settings(variable: str) -> dict:
    """dagster.yaml's three storage sections: these classes, the URL read from `variable`."""
    config = {"postgres_url": {"env": variable}}
    return {
        section: {"module": __name__, "class": cls.__name__, "config": config}
        for section, cls in (
            ("run_storage", PatientRunStorage),
            ("event_log_storage", PatientEventLogStorage),
            ("schedule_storage", PatientScheduleStorage),
        )
    }

"""A TraceLake shared by several hosts: DuckLake (a PostgreSQL catalog, Parquet data files on
storage every host mounts).

Selected by AACO_DUCKLAKE_CATALOG (a libpq connection string for the catalog database, e.g.
`dbname=lake host=db.example user=aaco`) and AACO_DUCKLAKE_DATA (the data path); the DuckDB file
stays the default. DuckLake needs DuckDB 1.5 with the ducklake and postgres extensions from PyPI
(`duckdb-extension-ducklake`, `duckdb-extension-postgres-scanner`; the `ducklake` extra, `make
ducklake-setup`): their files are loaded from those packages, never downloaded.

DuckLake has no primary keys, so two writers replacing the same new session would both commit
and double its rows; and two processes creating the catalog at once fail. Every writer holds a
PostgreSQL advisory lock on the catalog database for its whole write, the role the file lock
plays for a DuckDB file.

A catalog that refuses us or cannot be reached is one line naming its server and the fix
(service_errors), never DuckDB's message: that quotes the connection string, password and all.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.redaction import redact
from aaco_pipelines.foundation.service_errors import (
    cannot_connect,
    postgres_failure,
    refuse_unencoded_at,
)
from aaco_pipelines.foundation.sql import sql_literal
from aaco_pipelines.tracelake import engine
from aaco_pipelines.tracelake.locking import TraceLakeBusy

CATALOG_ENV = "AACO_DUCKLAKE_CATALOG"
DATA_ENV = "AACO_DUCKLAKE_DATA"
ALIAS = "lake"
CATALOG = "the shared TraceLake's catalog"  # the service, in its errors
WRITER_LOCK_KEY = 0x4141434F  # "AACO": the advisory lock every TraceLake writer takes
# libpq waits for a server that does not answer (a host down behind a firewall) for ever unless
# told otherwise: the catalog gets this unless its connection string says.
CONNECT_TIMEOUT_S = 10


class NotCreated(Exception):
    """No writer has created the lake in this catalog yet."""


@dataclass(frozen=True)
class SharedLake:
    catalog: str  # libpq connection string of the catalog database
    data_path: str

    def __str__(self) -> str:
        """Where the lake is, for people: never the catalog's password."""
        return redact(f"the shared DuckLake at {self.data_path} (catalog: {self.catalog})")


def shared_lake() -> SharedLake | None:
    """The shared TraceLake this process is configured for, or None (the DuckDB file)."""
    catalog = os.environ.get(CATALOG_ENV)
    if not catalog:
        return None
    data = os.environ.get(DATA_ENV)
    if not data:
        raise AacoInputError(
            f"{CATALOG_ENV} is set without {DATA_ENV}",
            fix=f"set {DATA_ENV} to the folder (or object-store URL) every host sees",
        )
    refuse_unencoded_at(catalog, CATALOG_ENV)
    return SharedLake(with_connect_timeout(catalog), data.rstrip("/") + "/")


def with_connect_timeout(catalog: str) -> str:
    """The catalog's connection string with libpq's connect_timeout, unless it has one."""
    from psycopg2 import ProgrammingError
    from psycopg2.extensions import make_dsn, parse_dsn

    try:
        if "connect_timeout" in parse_dsn(catalog):
            return catalog
    except ProgrammingError:
        return catalog  # libpq will say what is wrong with it
    return make_dsn(catalog, connect_timeout=CONNECT_TIMEOUT_S)


def extension_file(name: str) -> str:
    """The extension shipped in its PyPI package for this DuckDB version."""
    try:
        root = importlib.resources.files(f"duckdb_extension_{name}")
    except ModuleNotFoundError:
        root = None
    path = (
        root / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        if root
        else None
    )
    if path is None or not path.is_file():
        raise AacoInputError(
            f"the DuckDB extension {name} for DuckDB {duckdb.__version__} is not installed",
            fix="install the ducklake environment: DuckDB 1.5 with duckdb-extension-ducklake and "
            "duckdb-extension-postgres-scanner of the same version",
        )
    return str(path)


@contextlib.contextmanager
def connect(
    lake: SharedLake, *, write: bool, lock_timeout_s: float
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the shared lake; a writer holds the lock,
    waiting for it at most `lock_timeout_s` (then TraceLakeBusy, as for a lake file)."""
    with _writer_lock(lake, lock_timeout_s) if write else contextlib.nullcontext():
        database = _attached(lake, write)
        con = database.cursor()  # its own transactions, each on the lake's newest snapshot
        try:
            con.execute(f"USE {ALIAS}")
            yield con
        except duckdb.Error as exc:
            _ATTACHED.pop((os.getpid(), lake, write), None)  # a lost catalog: attach anew
            _raise_if_unreachable(exc, lake)
            raise
        finally:
            con.close()


# Attaching costs about 0.2 s (extensions, catalog round trips) and an analysis connects dozens
# of times, so each process attaches once per lake and mode (a fork attaches its own).
_ATTACHED: dict[tuple[int, SharedLake, bool], duckdb.DuckDBPyConnection] = {}


def _attached(lake: SharedLake, write: bool) -> duckdb.DuckDBPyConnection:
    """This process's database with the lake attached (read-only for readers)."""
    key = (os.getpid(), lake, write)
    if key in _ATTACHED:
        return _ATTACHED[key]
    con = engine.connect()
    try:
        for name in ("ducklake", "postgres_scanner"):
            con.execute(f"LOAD {sql_literal(extension_file(name))}")
        options = f"DATA_PATH {sql_literal(lake.data_path)}" + ("" if write else ", READ_ONLY")
        try:
            con.execute(
                f"ATTACH {sql_literal('ducklake:postgres:' + lake.catalog)} AS {ALIAS} ({options})"
            )
        except duckdb.Error as exc:
            _raise_if_unreachable(exc, lake)
            if not write and isinstance(exc, duckdb.InvalidInputException):
                if "does not exist" in str(exc):
                    raise NotCreated(str(lake)) from None  # a reader never creates it
            raise
    except BaseException:
        con.close()
        raise
    _ATTACHED[key] = con
    return con


def delete_orphaned_files(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Delete the data files no snapshot knows: those a writer killed before its commit left
    behind. Only safe under the writer lock (no other writer has uncommitted files then)."""
    rows = con.execute(
        f"SELECT path FROM ducklake_delete_orphaned_files({sql_literal(ALIAS)}, cleanup_all => true)"
    ).fetchall()
    return [path for (path,) in rows]


def _raise_if_unreachable(exc: Exception, lake: SharedLake) -> None:
    """A catalog that refused us or could not be reached, as one line naming its server and the
    fix; DuckDB's own message is not chained (it quotes the catalog's password)."""
    error = postgres_failure(str(exc), lake.catalog, service=CATALOG, variable=CATALOG_ENV)
    if error is not None:
        raise error from None


@contextlib.contextmanager
def _writer_lock(lake: SharedLake, timeout_s: float) -> Iterator[None]:
    """The catalog database's advisory lock, held by this session until it ends: a killed
    writer's session ends with its process, and the lock with it."""
    import psycopg2
    import psycopg2.errors

    try:
        pg = psycopg2.connect(lake.catalog)
    except psycopg2.Error as exc:
        raise cannot_connect(
            str(exc), lake.catalog, service=CATALOG, variable=CATALOG_ENV
        ) from None
    try:
        pg.autocommit = True
        with pg.cursor() as cursor:
            # An advisory lock's wait obeys lock_timeout (0 would mean no limit).
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, false)",
                [f"{max(1, round(timeout_s * 1000))}ms"],
            )
            try:
                cursor.execute("SELECT pg_advisory_lock(%s)", [WRITER_LOCK_KEY])
            except psycopg2.errors.LockNotAvailable as exc:
                raise TraceLakeBusy(
                    f"gave up after {timeout_s:g} s waiting for the shared TraceLake's writer "
                    "lock, held by another writer",
                    path=lake.catalog,
                    fix="wait for the other host's ingest to finish, or raise "
                    f"AACO_LOCK_TIMEOUT_S (now {timeout_s:g} s)",
                ) from exc
        yield
    finally:
        pg.close()

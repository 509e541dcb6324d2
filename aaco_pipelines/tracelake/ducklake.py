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
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.sql import sql_literal
from aaco_pipelines.tracelake import engine

CATALOG_ENV = "AACO_DUCKLAKE_CATALOG"
DATA_ENV = "AACO_DUCKLAKE_DATA"
ALIAS = "lake"
WRITER_LOCK_KEY = 0x4141434F  # "AACO": the advisory lock every TraceLake writer takes


class NotCreated(Exception):
    """No writer has created the lake in this catalog yet."""


@dataclass(frozen=True)
class SharedLake:
    catalog: str  # libpq connection string of the catalog database
    data_path: str


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
    return SharedLake(catalog, data.rstrip("/") + "/")


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
def connect(lake: SharedLake, *, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the shared lake; a writer holds the lock."""
    with _writer_lock(lake) if write else contextlib.nullcontext():
        con = engine.connect()
        try:
            for name in ("ducklake", "postgres_scanner"):
                con.execute(f"LOAD '{extension_file(name)}'")
            options = f"DATA_PATH {sql_literal(lake.data_path)}" + ("" if write else ", READ_ONLY")
            try:
                con.execute(
                    f"ATTACH {sql_literal('ducklake:postgres:' + lake.catalog)} AS {ALIAS} ({options})"
                )
            except duckdb.InvalidInputException as exc:
                if not write and "does not exist" in str(exc):
                    raise NotCreated(lake.catalog) from exc  # a reader never creates it
                raise
            con.execute(f"USE {ALIAS}")
            yield con
        finally:
            con.close()


@contextlib.contextmanager
def _writer_lock(lake: SharedLake) -> Iterator[None]:
    """The catalog database's advisory lock, held by this session until it ends: a killed
    writer's session ends with its process, and the lock with it."""
    import psycopg2

    pg = psycopg2.connect(lake.catalog)
    try:
        pg.autocommit = True
        with pg.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [WRITER_LOCK_KEY])
        yield
    finally:
        pg.close()

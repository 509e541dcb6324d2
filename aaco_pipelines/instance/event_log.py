"""The embedded instance's event log: Dagster's SQLite event log, its files opened cheaper.

Dagster's SqliteEventLogStorage builds a new SQLAlchemy engine for every connection it opens
(to a run's shard or to the index), opens one SQLite connection through it and closes both
after use: about 4,400 times in a zoo sweep. Closing the last connection to a WAL database
checkpoints the WAL into the file and deletes it, so every event paid a new connection, its
schema read, a checkpoint and a WAL file made and removed. Before every dynamic-partition lookup
(728 in a sweep) it also asked, through yet another engine, whether the partitions table exists;
and it builds every run's new shard with SQLAlchemy's create_all and an Alembic stamp (90 ms).

This subclass keeps, per shard, one engine and one SQLite connection, reused by one thread at a
time under the storage's lock (the 16 latest shards'; an older one's connection is closed).
What the webserver sees is unchanged: after every use of a run's shard its WAL is checkpointed
into `<run_id>.db` (PASSIVE: it waits for nobody), the file the webserver's watcher waits on to
show a run's logs live, as a closing connection did before. Durability is SQLite's default
(synchronous FULL in WAL mode): a committed event survives a crash. A new run's shard is a copy
of one schema-only shard built once per process by Dagster's own code. Tables found in the
index are remembered (they are only ever added, by migrations).

Dynamic partitions (the models and targets) are asked for about 100 times a run and change a few
times a day. They are kept per partitions definition for as long as the index's
`PRAGMA data_version` stays the same on the kept connection (SQLite changes it when any other
connection commits: another process, a sensor adding a model) and this storage itself has not
added or deleted any.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
)
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, create_db_conn_string
from sqlalchemy.pool import QueuePool

ENGINES_KEPT = 16  # the index and the latest runs' shards, each with one open connection


class SqliteEventLog(SqliteEventLogStorage):
    """SqliteEventLogStorage with one engine and one kept connection per shard, new run shards
    copied from a schema-only one, and the tables it found remembered."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict[str, object] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._tables_found: set[str] = set()
        self._empty_shard: bytes | None = None
        self._partitions: dict[str, dict[str, None]] = {}  # definition -> its keys, in order
        self._partitions_seen_at: tuple | None = None  # (connection, data_version) they hold for
        self._partitions_lock = threading.Lock()
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> SqliteEventLog:
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str):
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is None:
                engine = _kept_engine(self.conn_string_for_shard(shard))
                self._engines[shard] = engine
                if len(self._engines) > ENGINES_KEPT:
                    self._engines.popitem(last=False)[1].dispose()
            else:
                self._engines.move_to_end(shard)
            return engine

    @contextmanager
    def _connect(self, shard: str):
        """As SqliteEventLogStorage._connect (one transaction, under the storage's lock, the
        shard's database created on first use), on the shard's kept connection; a run's shard
        is checkpointed after each use, so its file changes as each event lands."""
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._create_shard(engine, shard)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME:
                    conn.connection.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _create_shard(self, engine, shard: str) -> None:
        """A run's new shard as a copy of the schema-only one; an existing shard (another
        process made it first, or it is the index) is checked by Dagster's own _initdb."""
        if shard == INDEX_SHARD_NAME:
            return self._initdb(engine, for_index_shard=True)
        try:
            created = os.open(self.path_for_shard(shard), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return self._initdb(engine)
        with os.fdopen(created, "wb") as file:
            file.write(self._schema_only_shard())

    def _schema_only_shard(self) -> bytes:
        """The bytes of an empty run shard, built once by Dagster's _initdb (tables, WAL mode,
        Alembic stamp) in a folder of its own, where no watcher or run listing sees it."""
        if self._empty_shard is None:
            with tempfile.TemporaryDirectory(prefix="aaco-event-shard-") as folder:
                engine = _kept_engine(create_db_conn_string(folder, "empty"))
                self._initdb(engine)
                engine.dispose()  # closes the connection: the WAL is checkpointed into the file
                self._empty_shard = (Path(folder) / "empty.db").read_bytes()
        return self._empty_shard

    def has_table(self, table_name: str) -> bool:
        """Whether the index has the table; once found, not asked again (tables are only ever
        added, by migrations). Not under the storage's lock, as Dagster's own."""
        if table_name in self._tables_found:
            return True
        engine = self._engine(INDEX_SHARD_NAME)
        with engine.connect() as conn:
            found = bool(engine.dialect.has_table(conn, table_name))
        if found:
            self._tables_found.add(table_name)
        return found

    def get_dynamic_partitions(self, partitions_def_name: str) -> list[str]:
        return list(self._dynamic_partitions(partitions_def_name))

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        return partition_key in self._dynamic_partitions(partitions_def_name)

    def add_dynamic_partitions(self, partitions_def_name: str, partition_keys) -> None:
        super().add_dynamic_partitions(partitions_def_name, partition_keys)
        self._forget_partitions()

    def delete_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> None:
        super().delete_dynamic_partition(partitions_def_name, partition_key)
        self._forget_partitions()

    def _dynamic_partitions(self, partitions_def_name: str) -> dict[str, None]:
        """The definition's keys as Dagster's storage reads them, read again only when the
        index has changed since (read after the version: never older than it)."""
        seen_at = self._index_version()
        with self._partitions_lock:
            if seen_at != self._partitions_seen_at:
                self._partitions, self._partitions_seen_at = {}, seen_at
            keys = self._partitions.get(partitions_def_name)
        if keys is None:
            keys = dict.fromkeys(super().get_dynamic_partitions(partitions_def_name))
            with self._partitions_lock:
                if self._partitions_seen_at == seen_at:
                    self._partitions[partitions_def_name] = keys
        return keys

    def _index_version(self) -> tuple:
        """(a token of the kept index connection, its PRAGMA data_version): changes when any
        other connection has committed to the index since, or the connection is another one."""
        with self._db_lock:
            connection = self._engine(INDEX_SHARD_NAME).raw_connection()
            try:
                token = connection.info.setdefault("aaco_partitions_token", object())
                version = connection.driver_connection.execute("PRAGMA data_version").fetchone()
                return token, version[0]
            finally:
                connection.close()  # back to the pool, still open

    def _forget_partitions(self) -> None:
        with self._partitions_lock:
            self._partitions, self._partitions_seen_at = {}, None

    def _close_connections(self) -> None:
        with self._db_lock, self._engines_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
        self._forget_partitions()

    def wipe(self) -> None:
        """Dagster's wipe deletes the run shards' files: no connection may stay on them."""
        self._close_connections()
        super().wipe()

    def upgrade(self) -> None:
        self._close_connections()
        super().upgrade()
        self._close_connections()  # migrated shards are opened again as they are

    def dispose(self) -> None:
        self._close_connections()
        super().dispose()


def _kept_engine(conn_string: str):
    """An engine keeping one SQLite connection (more only while threads overlap, closed after
    use). Any thread may take it, one at a time, as the pool hands it out."""
    return create_engine(
        conn_string,
        poolclass=QueuePool,
        pool_size=1,
        max_overflow=-1,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
    )

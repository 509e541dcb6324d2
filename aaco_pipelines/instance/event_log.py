"""The embedded instance's event log: Dagster's SQLite event log, its files opened cheaper.

Dagster's SqliteEventLogStorage builds a new SQLAlchemy engine for every connection it opens
(to a run's shard or to the index) and disposes of it after use: about 4,400 times in a zoo
sweep, each paying SQLAlchemy's first-connect set-up. Before every dynamic-partition lookup
(728 in a sweep: the model x target partitions) it also asks, through yet another new engine,
whether the partitions table exists. This subclass keeps one engine per shard and remembers
the tables it has found; nothing else changes. The pool is still NullPool: every use opens and
closes its own SQLite connection as Dagster's does, so closing still checkpoints a run's WAL
into `<run_id>.db`, the file the webserver's watcher waits on to show a run's logs live.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager

from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
)
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy.pool import NullPool

ENGINES_KEPT = 16  # the index and the latest runs' shards; an engine holds no connection


class SqliteEventLog(SqliteEventLogStorage):
    """SqliteEventLogStorage with one engine per shard and the tables it found remembered."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict[str, object] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._tables_found: set[str] = set()
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> SqliteEventLog:
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str):
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is None:
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    poolclass=NullPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
                )
                self._engines[shard] = engine
                if len(self._engines) > ENGINES_KEPT:
                    self._engines.popitem(last=False)[1].dispose()
            else:
                self._engines.move_to_end(shard)
            return engine

    @contextmanager
    def _connect(self, shard: str):
        """As SqliteEventLogStorage._connect (one transaction, under the storage's lock, the
        shard's database created on first use), on the shard's kept engine."""
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

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

"""The TraceLake file: versioned schema, serialized writers, one transaction per write.

DuckDB allows one read-write process per file and fails every other process, read-only ones
included, with "Could not set lock" while it is held; read-only processes share the file. So
readers open read-only, writers take an exclusive advisory lock on `<file>.lock` first (which
serializes the CLI and the Dagster run workers), connections are short, and every wait for a lock
is bounded and names the process it waits for (tracelake.locking).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake import ducklake, engine
from aaco_pipelines.tracelake.locking import (
    LockWait,
    Notice,
    damaged_or_same,
    lock_timeout,
    open_duckdb,
    refuse_missing_blocks,
    write_failure,
    writer_lock,
)
from aaco_pipelines.tracelake.schema import (
    SCHEMA_VERSION,
    TABLES,
    conform,
    schema_ddl,
    stored,
    stored_tables,
)

# Migrations from version N-1 to N, applied in order inside one transaction. New tables need no
# statement: every table of the current schema is created if missing after the migrations.
MIGRATIONS: dict[int, list[str]] = {
    2: [],
    3: [
        f"ALTER TABLE kernel_events ADD COLUMN IF NOT EXISTS {name} {kind}"
        for name, kind in (
            ("kernel_family", "VARCHAR"),
            ("dispatch_id", "BIGINT"),
            ("stream_id", "BIGINT"),
            ("process_id", "BIGINT"),
            ("grid_size", "BIGINT"),
            ("workgroup_size", "BIGINT"),
            ("lds_bytes", "BIGINT"),
            ("scratch_bytes", "BIGINT"),
            ("vgpr_count", "BIGINT"),
            ("sgpr_count", "BIGINT"),
        )
    ],
    4: [],  # the baselines table, created with every missing table
    5: ["ALTER TABLE drift_verdicts ADD COLUMN IF NOT EXISTS p_value DOUBLE"],  # + kernel_symbols
    # Session rows move under the `sessions` view of completed sessions; every session stored
    # before was visible, so each counts as complete.
    6: [
        "ALTER TABLE sessions RENAME TO session_records",
        "CREATE TABLE IF NOT EXISTS completed_sessions (session_id VARCHAR, completed_at TIMESTAMPTZ)",
        "INSERT INTO completed_sessions SELECT session_id, finished_at FROM session_records",
    ],
    7: ["ALTER TABLE graph_nodes ADD COLUMN IF NOT EXISTS parent_node VARCHAR"],
    # Envelopes say where their peaks come from (every earlier one was measured), which GPU
    # they belong to and a GEMM peak per data type; roofline points their data type's roof;
    # bottleneck reports the envelope's source, or why there was none.
    8: [
        *(
            f"ALTER TABLE hardware_envelopes ADD COLUMN IF NOT EXISTS {name} {kind}"
            for name, kind in (
                ("source", "VARCHAR"),
                ("device_arch", "VARCHAR"),
                ("device_name", "VARCHAR"),
                ("compute_units", "BIGINT"),
                ("gemm_peaks_json", "VARCHAR"),
                ("reference", "VARCHAR"),
            )
        ),
        "UPDATE hardware_envelopes SET source = 'measured' WHERE source IS NULL",
        "ALTER TABLE roofline_points ADD COLUMN IF NOT EXISTS dtype VARCHAR",
        "ALTER TABLE roofline_points ADD COLUMN IF NOT EXISTS roof_dtype VARCHAR",
        "ALTER TABLE bottleneck_reports ADD COLUMN IF NOT EXISTS envelope_source VARCHAR",
        "ALTER TABLE bottleneck_reports ADD COLUMN IF NOT EXISTS envelope_note VARCHAR",
        "UPDATE bottleneck_reports SET envelope_source = 'measured' "
        "WHERE envelope_source IS NULL AND envelope_id IS NOT NULL",
    ],
    # Sessions say their workload (every earlier one ran forward passes); the generation
    # tables are created with every missing table.
    9: [
        "ALTER TABLE session_records ADD COLUMN IF NOT EXISTS workload VARCHAR",
        "ALTER TABLE session_records ADD COLUMN IF NOT EXISTS scenario VARCHAR",
        "UPDATE session_records SET workload = 'forward' WHERE workload IS NULL",
    ],
    # kernel_events becomes a view over kernel_events_profile (every row stored so far) and
    # kernel_events_trace (device traces' kernels from now on), created with the schema.
    10: ["ALTER TABLE kernel_events RENAME TO kernel_events_profile"],
    # Roofline points say which ceiling judges them and whether it was lifted to the observed
    # (earlier points were all judged against the GEMM peak or DRAM, never lifted); op shares
    # become median-based beside the mean-based one.
    11: [
        "ALTER TABLE roofline_points ADD COLUMN IF NOT EXISTS roof_level VARCHAR",
        "ALTER TABLE roofline_points ADD COLUMN IF NOT EXISTS roof_lifted BOOLEAN",
        "UPDATE roofline_points SET roof_level = CASE bound WHEN 'compute' THEN 'GEMM' "
        "ELSE 'DRAM' END WHERE bound IS NOT NULL",
        # Shares become median-based; the mean-based share stored so far is kept as mean_share.
        "ALTER TABLE op_breakdown ADD COLUMN IF NOT EXISTS mean_share DOUBLE",
        "UPDATE op_breakdown SET mean_share = share",
        # (made with every missing table after the migrations when the lake predates v9)
        "ALTER TABLE IF EXISTS phase_breakdown ADD COLUMN IF NOT EXISTS mean_share DOUBLE",
    ],
    # Each op's rank stability (a bootstrap over the profiled iterations): unknown for the
    # sessions attributed before it.
    12: [
        "ALTER TABLE op_breakdown ADD COLUMN IF NOT EXISTS p_top DOUBLE",
        "ALTER TABLE op_breakdown ADD COLUMN IF NOT EXISTS p_top3 DOUBLE",
        "ALTER TABLE IF EXISTS phase_breakdown ADD COLUMN IF NOT EXISTS p_top DOUBLE",
        "ALTER TABLE IF EXISTS phase_breakdown ADD COLUMN IF NOT EXISTS p_top3 DOUBLE",
    ],
    # The class's close calls: unknown for the sessions classified before it.
    13: ["ALTER TABLE bottleneck_reports ADD COLUMN IF NOT EXISTS close_calls_json VARCHAR"],
    # The digest of each bundle's manifest: unknown (not covered) for sessions loaded before.
    14: ["ALTER TABLE session_records ADD COLUMN IF NOT EXISTS manifest_sha256 VARCHAR"],
    # Kernels keep their accumulation VGPRs (occupancy): unknown for kernels loaded before. The
    # table of device-trace kernels exists from v10 on (made with the schema after this, else).
    15: [
        "ALTER TABLE kernel_events_profile ADD COLUMN IF NOT EXISTS accum_vgpr_count BIGINT",
        "ALTER TABLE IF EXISTS kernel_events_trace ADD COLUMN IF NOT EXISTS accum_vgpr_count BIGINT",
    ],
    16: [],  # kernel_places, kernel_diagnoses, counter_roofline: created as missing tables
    17: [],  # critical_paths, critical_path_nodes: created as missing tables
    # Profiled nodes keep the size of the intra-op pool they ran on: unknown for those before.
    18: ["ALTER TABLE kernel_events_profile ADD COLUMN IF NOT EXISTS pool_threads INTEGER"],
    19: [],  # objective_verdicts: created as a missing table
    20: [],  # alerts, alert_events, alert_deliveries, bisections: created as missing tables
    # Bisections across runtime environments: what was bisected, and the runtimes found.
    21: [
        f"ALTER TABLE IF EXISTS bisections ADD COLUMN IF NOT EXISTS {column} VARCHAR"
        for column in ("dimension", "last_good_runtime", "first_bad_runtime")
    ],
    22: [],  # structural_diffs: created as a missing table
    # Sessions restored without verifiable evidence (aaco restore --unverified) say why.
    23: ["ALTER TABLE session_records ADD COLUMN IF NOT EXISTS unverified_reason VARCHAR"],
    # A class the evidence could not settle says so (analysis.bottleneck.contention); a
    # report judged before v24 was taken as decided.
    24: [
        "ALTER TABLE bottleneck_reports ADD COLUMN IF NOT EXISTS decided BOOLEAN DEFAULT true",
        "ALTER TABLE bottleneck_reports ADD COLUMN IF NOT EXISTS undecided_reason VARCHAR",
    ],
}
MANIFEST_SINCE = 14  # the schema version whose session rows keep their manifest's digest
UNVERIFIED_SINCE = 23  # the schema version whose session rows say their evidence is unverified


class TraceLake:
    """One DuckDB TraceLake file."""

    def __init__(
        self,
        path: Path | str,
        lock_timeout_s: float | None = None,
        on_wait: Notice | None = None,
    ):
        """`lock_timeout_s`: the longest wait for a lake another process holds (default
        AACO_LOCK_TIMEOUT_S, else 60 s); `on_wait` gets a line every few seconds of such a wait
        (default: stderr; the Dagster resource logs it)."""
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout(lock_timeout_s)
        self.on_wait = on_wait

    @contextlib.contextmanager
    def connect(self, *, write: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection: read-only (shared with other readers), or with `write=True`
        read-write under the writer lock. Reading a lake not created yet reads an empty one in
        memory: a read never creates the file. A damaged file, a busy lake past the timeout and
        a full disk end in one AacoInputError."""
        if (shared := ducklake.shared_lake()) is not None:
            with self._shared(shared, write) as con:
                yield con
            return
        if not write and not self.path.exists():
            with self._empty() as con:
                yield con
            return
        held = _held_readers()
        key = self.path.resolve()
        if write:
            _release(held, key)  # one configuration per file in a process: the writer's
        wait = LockWait(self.path, self.lock_timeout_s, self.on_wait)
        if key in held.depth and not write:
            with self._one_line_errors(False):
                if key not in held.connections:
                    held.connections[key] = open_duckdb(self.path, read_only=True, wait=wait)
                con = held.connections[key].cursor()
                try:
                    yield con
                finally:
                    con.close()
            return
        with self._one_line_errors(write):
            if write:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            with writer_lock(self.path, wait) if write else contextlib.nullcontext():
                con = open_duckdb(self.path, read_only=not write, wait=wait)
                try:
                    if write:
                        # Rows carry their own keys and times: letting DuckDB insert in parallel
                        # without keeping file order halves the load of 10^7-row traces.
                        con.execute("SET preserve_insertion_order = false")
                        self._ensure_schema(con)
                    yield con
                finally:
                    con.close()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Within the block, this thread's reads of the lake file share one read-only
        connection: opening one costs 20-40 ms (DuckDB 2.0 starts its thread pools at every
        open) and an analysis reads dozens of times. A write in the block closes it first, the
        next read opens it again. Other processes' writers wait while it is open: one stage,
        not a whole run. (The shared lake attaches once per process anyway.)"""
        held = _held_readers()
        key = self.path.resolve()
        held.depth[key] = held.depth.get(key, 0) + 1
        try:
            yield
        finally:
            held.depth[key] -= 1
            if not held.depth[key]:
                del held.depth[key]
                _release(held, key)

    def query(
        self, sql: str, params: list | dict | None = None, tables: dict[str, pa.Table] | None = None
    ) -> pa.Table:
        """Run a read query and return Arrow. `tables` are Arrow tables visible to the query by
        name (joined against TraceLake tables without writing them)."""
        with self.connect() as con:
            for name, table in (tables or {}).items():
                con.register(name, table)
            return con.sql(sql, params=params).to_arrow_table()

    @contextlib.contextmanager
    def batches(
        self,
        sql: str,
        params: list | dict | None = None,
        tables: dict[str, pa.Table] | None = None,
        rows: int = 1 << 20,
    ) -> Iterator[Iterator[pa.RecordBatch]]:
        """A read query's result as Arrow batches of at most `rows` rows, streamed while the
        block lasts: for results too large to hold whole (a session's 10^7 kernels)."""
        with self.connect() as con:
            for name, table in (tables or {}).items():
                con.register(name, table)
            reader = con.sql(sql, params=params).to_arrow_reader(rows)
            yield iter(reader)

    def replace_session_rows(
        self, session_id: str, tables: dict[str, pa.Table], *, complete: bool = False
    ) -> None:
        """Replace one session's rows in several analysis tables, in one transaction;
        `complete=True` (the last analysis stage) also makes the session visible to readers."""
        with self.transaction() as con:
            for name, table in tables.items():
                delete_session_rows(con, name, [session_id])
                insert_rows(con, name, table)
            if complete:
                mark_complete(con, session_id)

    def append_rows(self, name: str, table: pa.Table) -> None:
        """Append rows (for tables keyed by their own id, such as hardware_envelopes)."""
        with self.connect(write=True) as con:
            insert_rows(con, name, table)

    def session_states(self) -> dict[str, bool]:
        """{session_id: complete} of every session the TraceLake has rows of."""
        rows = self.query(
            "SELECT r.session_id, c.session_id IS NOT NULL AS complete FROM session_records r "
            "LEFT JOIN completed_sessions c USING (session_id)"
        )
        return dict(zip(rows["session_id"].to_pylist(), rows["complete"].to_pylist(), strict=True))

    def manifest_digests(
        self, session_ids: list[str] | None = None
    ) -> dict[str, tuple[str | None, str | None]]:
        """{session_id: (bundle_path, manifest_sha256)} of these sessions, or of every complete
        one (None); the digest is None for a session loaded before manifests, and for every
        session of a lake not migrated yet (a read never migrates)."""
        with self.connect() as con:
            since = (_stored_version(con) or 0) >= MANIFEST_SINCE
            digest = "manifest_sha256" if since else "NULL"
            if session_ids is None:
                sql, params = f"SELECT session_id, bundle_path, {digest} FROM sessions", []
            else:
                sql = (
                    f"SELECT session_id, bundle_path, {digest} FROM session_records "
                    "WHERE list_contains(?, session_id)"
                )
                params = [session_ids]
            rows = con.execute(sql + " ORDER BY started_at, session_id", params).fetchall()
        return {sid: (path, sha) for sid, path, sha in rows}

    def unverified_sessions(self, session_ids: list[str] | None = None) -> dict[str, str]:
        """{session_id: why its evidence is unverified} of the sessions a restore brought back
        without a record of their bundle; none in a lake not migrated yet."""
        with self.connect() as con:
            if (_stored_version(con) or 0) < UNVERIFIED_SINCE:
                return {}
            rows = con.execute(
                "SELECT session_id, unverified_reason FROM session_records "
                "WHERE unverified_reason IS NOT NULL AND (? IS NULL OR list_contains(?, session_id))",
                [session_ids, session_ids],
            ).fetchall()
        return dict(rows)

    def mark_unverified(self, session_id: str, reason: str) -> None:
        """The session's evidence cannot be verified (restored without a record of its
        bundle): its row says why, and its measurement is suspect for that reason, so no new
        baseline rests on it and every page that shows its quality says so."""
        with self.transaction() as con:
            con.execute(
                "UPDATE session_records SET unverified_reason = ? WHERE session_id = ?",
                [reason, session_id],
            )
            row = con.execute(
                "SELECT reasons_json FROM measurement_quality WHERE session_id = ?", [session_id]
            ).fetchone()
            if row is not None:
                reasons = [*json.loads(row[0] or "[]"), f"its evidence is unverified: {reason}"]
                con.execute(
                    "UPDATE measurement_quality SET verdict = 'suspect', reasons_json = ? "
                    "WHERE session_id = ?",
                    [json.dumps(reasons), session_id],
                )

    def delete_sessions(self, session_ids: list[str]) -> None:
        """Remove every row of these sessions, from every table, in one transaction."""
        tables = [name for name, schema in TABLES.items() if "session_id" in schema.names]
        with self.transaction() as con:
            for name in tables:
                delete_session_rows(con, name, session_ids)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A write connection inside one transaction, committed when the block ends."""
        with self.connect(write=True) as con, _transaction(con):
            yield con

    def exists(self) -> bool:
        """Whether there may be sessions to read: the lake file exists, or the lake is shared
        (a shared lake nobody has written yet reads empty)."""
        return ducklake.shared_lake() is not None or self.path.exists()

    def delete_orphaned_files(self) -> list[str]:
        """The shared lake's data files that a killed writer left uncommitted, deleted (a lake
        file has none: DuckDB rolls them back in place)."""
        if ducklake.shared_lake() is None:
            return []
        with self.connect(write=True) as con:
            return ducklake.delete_orphaned_files(con)

    def schema_version(self, *, check_blocks: bool = False) -> int | None:
        """The stored schema version; None for a lake not created yet. `check_blocks` first
        checks that every block the lake uses is in its file (aaco doctor's thorough look)."""
        if not self.exists():
            return None
        with self.connect() as con:
            if check_blocks and ducklake.shared_lake() is None:  # DuckLake: Parquet files
                refuse_missing_blocks(con, self.path)
            return _stored_version(con)

    @contextlib.contextmanager
    def _empty(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """An empty lake of the current schema, in memory: what reading a missing lake sees."""
        con = engine.connect()
        try:
            self._ensure_schema(con)
            yield con
        finally:
            con.close()

    @contextlib.contextmanager
    def _shared(self, shared, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        """The shared lake (ducklake.py); reading one no writer has created reads an empty one."""
        try:
            with (
                self._one_line_errors(write),
                ducklake.connect(shared, write=write, lock_timeout_s=self.lock_timeout_s) as con,
            ):
                if write:
                    self._ensure_schema(con)
                elif _stored_version(con) is None:  # created, but no writer has committed yet
                    raise ducklake.NotCreated(str(shared))
                yield con
        except ducklake.NotCreated:
            with self._empty() as con:
                yield con

    @contextlib.contextmanager
    def _one_line_errors(self, write: bool) -> Iterator[None]:
        """A damaged lake file, or a write the disk refused, as one AacoInputError."""
        try:
            yield
        except (duckdb.Error, OSError) as exc:
            if write:
                error = write_failure(exc, self.path)
            elif isinstance(exc, duckdb.Error):
                error = damaged_or_same(exc, self.path)
            else:
                error = exc
            if error is exc:
                raise
            raise error from exc

    def _ensure_schema(self, con) -> None:
        version = _stored_version(con)
        if version == SCHEMA_VERSION:
            return
        if version is not None and version > SCHEMA_VERSION:
            raise AacoInputError(
                f"TraceLake schema v{version} is newer than this aaco (v{SCHEMA_VERSION})",
                path=self.path,
                fix="upgrade aaco-pipelines, or point AACO_TRACELAKE at another file",
            )
        with _transaction(con):
            con.execute(
                "CREATE TABLE IF NOT EXISTS schema_info (version INTEGER, applied_at TIMESTAMPTZ)"
            )
            if version is not None:  # an existing lake: bring its tables up to date first
                for step in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS.get(step, []):
                        con.execute(statement)
            for statement in schema_ddl():
                con.execute(statement)
            con.execute(
                "INSERT INTO schema_info VALUES (?, ?)",
                [SCHEMA_VERSION, dt.datetime.now(dt.timezone.utc)],
            )


@contextlib.contextmanager
def _transaction(con) -> Iterator[None]:
    """BEGIN ... COMMIT. On an error the error that stopped the write is the one raised: a
    rollback that fails (a failed COMMIT has already ended the transaction) never replaces it."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def reads_together(fn):
    """Decorator: the reads a function makes of its TraceLake (its first argument) share one
    connection (`TraceLake.reading`)."""

    @functools.wraps(fn)
    def wrapper(lake, *args, **kwargs):
        with lake.reading():
            return fn(lake, *args, **kwargs)

    return wrapper


_HELD = threading.local()


def _held_readers():
    """This thread's `TraceLake.reading` state: open blocks and connections, per lake file."""
    if not hasattr(_HELD, "depth"):
        _HELD.depth, _HELD.connections = {}, {}
    return _HELD


def _release(held, key: Path) -> None:
    """Close the held reader of one lake file, if open."""
    con = held.connections.pop(key, None)
    if con is not None:
        con.close()


def delete_session_rows(con, name: str, session_ids: list[str]) -> None:
    """Every row of these sessions in a table of TABLES, in each table it is stored in."""
    for table in stored_tables(name):
        con.execute(f"DELETE FROM {table} WHERE session_id IN (SELECT unnest(?))", [session_ids])


def insert_rows(con, name: str, table: pa.Table) -> None:
    """Append Arrow rows to a TraceLake table, conformed to its schema."""
    con.register("incoming", conform(table, TABLES[name]))
    con.execute(f"INSERT INTO {stored(name)} BY NAME SELECT * FROM incoming")
    con.unregister("incoming")


def mark_complete(con, session_id: str) -> None:
    con.execute("DELETE FROM completed_sessions WHERE session_id = ?", [session_id])
    con.execute(
        "INSERT INTO completed_sessions VALUES (?, ?)",
        [session_id, dt.datetime.now(dt.timezone.utc)],
    )


def stored_manifest_digest(con, session_id: str) -> str | None:
    """The manifest digest the lake keeps of a session (None: not loaded, or before manifests)."""
    row = con.execute(
        "SELECT manifest_sha256 FROM session_records WHERE session_id = ?", [session_id]
    ).fetchone()
    return row[0] if row else None


def record_manifest_digest(con, session_id: str, digest: str | None) -> None:
    con.execute(
        "UPDATE session_records SET manifest_sha256 = ? WHERE session_id = ?", [digest, session_id]
    )


def _stored_version(con) -> int | None:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_info'"
    ).fetchall()[0][0]
    if not exists:
        return None
    return con.execute("SELECT max(version) FROM schema_info").fetchall()[0][0]

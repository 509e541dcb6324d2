"""Load (tracelake_session): a collected session into the TraceLake, in one transaction.

Its Parquet tables, its device trace read straight from the raw file (collectors.traces), its
kernels labelled by family, and its model's graph. Loading a session again replaces it, never
doubles it. A loaded session is not complete: readers see it once its analysis commits, or at
once with `complete=True` (a caller that runs no analysis).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from aaco_pipelines.analysis.metrics.measurement_quality import (
    MeasurementQuality,
    measurement_quality,
)
from aaco_pipelines.bundle.manifest import manifest_digest
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.collectors.traces import label_kernels, load_trace
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.session_folders import session_folder_held
from aaco_pipelines.tracelake.journal import BUNDLE, LOADED_COMPLETE, LakeJournal
from aaco_pipelines.tracelake.queries import generation_quality, session_quality
from aaco_pipelines.tracelake.schema import MODELS, TABLES, conform, stored, stored_tables
from aaco_pipelines.tracelake.store import (
    TraceLake,
    delete_session_rows,
    insert_rows,
    mark_complete,
    record_manifest_digest,
    stored_manifest_digest,
)

SESSION_TABLES = ("sessions", "iterations", "kernel_events", "telemetry")
# Only sessions traced by a GPU profiler have device-trace tables; only generation sessions
# have requests and steps.
OPTIONAL_SESSION_TABLES = (
    "api_calls", "memory_copies", "counters", "agents",
    "requests", "generation_steps", "generation_metrics",
)  # fmt: skip
GRAPH_TABLES = ("graph_nodes", "graph_edges")

# The rules a generation session's steps and requests keep (tracelake.queries.
# generation_quality counts what breaks each), in the words of a one-line error.
GENERATION_RULES = {
    "batches_with_wrong_step_count": "batches did not run one step per output token",
    "steps_with_wrong_kv_growth": "steps did not grow the KV cache by one position",
    "steps_with_wrong_phase": "steps were not one prefill followed by decode steps",
    "batches_with_missing_requests": "batches are missing requests",
}


@dataclass(frozen=True)
class LoadedSession:
    session_id: str
    row_counts: dict[str, int]  # rows of the session (and its graph) per table
    quality: dict  # tracelake.queries.session_quality: did every iteration land, once
    generation_quality: dict  # tracelake.queries.generation_quality (batches 0: forward)
    measurement: MeasurementQuality  # can its latencies be trusted (stored)

    @property
    def broken_generation_rules(self) -> list[str]:
        """What a generation session broke, one phrase a rule ("3 steps did not grow the KV
        cache by one position"); empty for a whole one and for forward passes."""
        return [
            f"{self.generation_quality[name]} {rule}"
            for name, rule in GENERATION_RULES.items()
            if self.generation_quality.get(name)
        ]


def load(
    lake: TraceLake,
    bundle: SessionBundle,
    *,
    complete: bool = False,
    verify: bool = True,
    scratch: Path | None = None,
    vouch: bool = True,
) -> LoadedSession:
    """Load the session, then read back whether it landed whole and judge whether its
    latencies can be trusted (measurement_quality, stored). `verify`, `scratch` and `vouch`: as
    for load_session."""
    with session_folder_held(bundle.path, bundle.session_id):
        counts = load_session(
            lake, bundle, complete=complete, verify=verify, scratch=scratch, vouch=vouch
        )
    with lake.reading():  # one open of the lake for all three
        quality = session_quality(lake, bundle.session_id)
        generation = generation_quality(lake, bundle.session_id)
        measurement = measurement_quality(lake, bundle.session_id, laboratory_cores(bundle))
        lake.replace_session_rows(
            bundle.session_id, {"measurement_quality": pa.Table.from_pylist([measurement.row()])}
        )
    return LoadedSession(bundle.session_id, counts, quality, generation, measurement)


def laboratory_cores(bundle: SessionBundle) -> list[int]:
    """The cores a laboratory session's worker was pinned to; none for other sessions (an
    ingested trace's request says laboratory False)."""
    return list((bundle.request.get("laboratory") or {}).get("cores", []))


def load_session(
    lake: TraceLake,
    bundle: SessionBundle,
    derive: Callable[[duckdb.DuckDBPyConnection], dict[str, pa.Table]] | None = None,
    *,
    verify: bool = True,
    complete: bool = False,
    trace_source: Path | None = None,
    scratch: Path | None = None,
    vouch: bool = True,
) -> dict[str, int]:
    """Load one session and its model graph in a single transaction, replacing any earlier
    load of the same session. `derive` returns rows to add that depend on the loaded ones (an
    ingested trace's span becomes its latency). The bundle is checked against its recorded
    digests and manifest first (`verify=False` only right after the bundle was written and
    hashed); the manifest's digest is kept with the session's row. `trace_source`: the device
    trace to read instead of the bundle's copy (`aaco ingest` reads the original while the copy
    is made). `scratch`: where a gzip device trace is inflated (default AACO_HOME's scratch).
    `vouch`: the journal records the manifest's digest, which a restore later checks the bundle
    against (a restore itself never vouches: it would launder what it could not verify)."""
    graph = read_graph_dir(bundle.graph_dir)
    with lake.transaction() as con:
        _replace_session(con, bundle, verify, trace_source, scratch)
        if complete:
            mark_complete(con, bundle.session_id)
        for name, table in (derive(con) if derive else {}).items():
            insert_rows(con, name, table)
        digest = _published_manifest(con, bundle)
        record_manifest_digest(con, bundle.session_id, digest)
        counts = _session_counts(con, bundle.session_id)
        if graph is not None:
            counts.update(_replace_graph(con, graph))
    journal = LakeJournal(lake.path)
    if vouch:
        journal.record(BUNDLE, session_id=bundle.session_id, manifest_sha256=digest)
    if complete:  # visible without analysis: `aaco restore` must not analyse it either
        journal.record(LOADED_COMPLETE, session_id=bundle.session_id)
    return counts


def _replace_session(
    con,
    bundle: SessionBundle,
    verify: bool,
    trace_source: Path | None = None,
    scratch: Path | None = None,
) -> None:
    """The bundle's Parquet tables, then its device trace straight from the raw file."""
    if not bundle.has_tables():
        raise AacoInputError(
            "session bundle has no collected tables",
            path=bundle.path,
            fix="materialize collected_traces for this session first",
        )
    if verify:
        bundle.verify_evidence()
        bundle.verify_manifest(stored_manifest_digest(con, bundle.session_id))
    # A session loaded again is not complete until it is analysed again.
    con.execute("DELETE FROM completed_sessions WHERE session_id = ?", [bundle.session_id])
    for table in (*SESSION_TABLES, *OPTIONAL_SESSION_TABLES):
        delete_session_rows(con, table, [bundle.session_id])
        source = bundle.table_path(table)
        if source.exists():
            con.execute(
                f"INSERT INTO {stored(table)} BY NAME SELECT * FROM read_parquet(?)",
                [str(source)],
            ).fetchall()
    trace = bundle.device_trace
    if trace is not None:
        source = trace_source or bundle.inside(trace["path"])
        load_trace(con, source, bundle.session_id, iteration=trace["iteration"], scratch=scratch)
    label_kernels(con, bundle.session_id)


def _published_manifest(con, bundle: SessionBundle) -> str | None:
    """The digest of the bundle's manifest where it is published: the bundle itself, or, for
    a trace being ingested (published while it loads), where its session row says it went."""
    if bundle.path.is_dir():
        return manifest_digest(bundle.path)
    row = con.execute(
        "SELECT bundle_path FROM session_records WHERE session_id = ?", [bundle.session_id]
    ).fetchone()
    return manifest_digest(Path(row[0])) if row and row[0] else None


def _session_counts(con, session_id: str) -> dict[str, int]:
    counts = {}
    for table in (*SESSION_TABLES, *OPTIONAL_SESSION_TABLES):
        rows = sum(
            con.execute(
                f"SELECT count(*) FROM {name} WHERE session_id = ?", [session_id]
            ).fetchall()[0][0]
            for name in stored_tables(table)
        )
        if rows or table in SESSION_TABLES:
            counts[table] = rows
    return counts


def _replace_graph(con, graph: dict[str, pa.Table]) -> dict[str, int]:
    sha = graph["models"]["model_sha256"][0].as_py()
    counts = {}
    for table in ("models", *GRAPH_TABLES):
        con.execute(f"DELETE FROM {table} WHERE model_sha256 = ?", [sha])
        con.register("incoming", graph[table])
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming")
        con.unregister("incoming")
        counts[table] = graph[table].num_rows
    return counts


def read_graph_dir(directory: Path) -> dict[str, pa.Table] | None:
    """The graph tables saved by graph extraction (graph.json + nodes/edges Parquet), if any."""
    if not (directory / "graph.json").is_file():
        return None
    summary = json.loads((directory / "graph.json").read_text())
    model_row = {field.name: summary.get(field.name) for field in MODELS}
    if isinstance(model_row["input_spec"], dict):
        model_row["input_spec"] = json.dumps(model_row["input_spec"], sort_keys=True)
    return {
        "models": pa.Table.from_pylist([model_row], schema=MODELS),
        "graph_nodes": conform(pq.read_table(directory / "nodes.parquet"), TABLES["graph_nodes"]),
        "graph_edges": conform(pq.read_table(directory / "edges.parquet"), TABLES["graph_edges"]),
    }

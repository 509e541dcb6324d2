"""The session bundle: the immutable on-disk evidence of one measured session.

    sessions/<YYYY-MM-DD>/<session_id>/
      request.json          what was asked (model, inputs, iterations, providers, limits)
      session.json          what happened (passes with their times, providers used, outcome)
      env.json              the environment the worker measured in
      worker.log            everything the worker and ONNX Runtime printed
      latencies.json        raw per-iteration latencies (ns) of every pass
      ort_profile.json      ONNX Runtime's own profile of the profiled pass
      optimized_model.onnx  the graph after ONNX Runtime's fusions (for attribution)
      host_samples.parquet  raw host counters sampled during the run
      graph/                the graph extraction of the exact model file (nodes, edges, summary)
      rocprof/              rocprofv3's output of the traced pass (GPU hosts; or raw/ for an
                            ingested trace)
      tables/               normalized TraceLake tables, written by collection; a device trace
                            is not copied into them but named by tables/device_trace.json and
                            loaded from its raw file straight into the TraceLake

Raw files are written once, by the run, and never modified; `tables/` is derived from them and
can be rebuilt at any time. A bundle only appears under sessions/ once the run succeeded: work in
progress lives under sessions/.staging/ and failures are moved to failed/ with their evidence.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DEVICE_TRACE = "device_trace.json"


@dataclass(frozen=True)
class SessionBundle:
    path: Path

    @property
    def session_id(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    def read_json(self, name: str) -> dict:
        return json.loads(self.file(name).read_text())

    @property
    def session(self) -> dict:
        return self.read_json("session.json")

    @property
    def request(self) -> dict:
        return self.read_json("request.json")

    @property
    def environment(self) -> dict:
        return self.read_json("env.json")

    @property
    def graph_dir(self) -> Path:
        return self.path / "graph"

    @property
    def tables_dir(self) -> Path:
        return self.path / "tables"

    def table_path(self, table: str) -> Path:
        return self.tables_dir / f"{table}.parquet"

    def has_tables(self) -> bool:
        return (self.tables_dir / "_COMPLETE").is_file()

    @property
    def device_trace(self) -> dict | None:
        """{"path": bundle-relative trace file or folder, "iteration": int | None}, when the
        session has a device trace to load into the TraceLake."""
        manifest = self.tables_dir / DEVICE_TRACE
        return json.loads(manifest.read_text()) if manifest.is_file() else None

    def write_tables(self, tables: dict[str, pa.Table], device_trace: dict | None = None) -> None:
        """Replace tables/ as a whole: written beside it, then swapped in, never half there."""
        staging = Path(tempfile.mkdtemp(prefix=".tables-", dir=self.path))
        try:
            for name, table in tables.items():
                pq.write_table(table, staging / f"{name}.parquet", compression="zstd")
            if device_trace is not None:
                (staging / DEVICE_TRACE).write_text(json.dumps(device_trace, sort_keys=True))
            (staging / "_COMPLETE").write_text(json.dumps(sorted(tables)))
            if self.tables_dir.exists():
                shutil.rmtree(self.tables_dir)
            os.replace(staging, self.tables_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def add_tables(self, tables: dict[str, pa.Table]) -> None:
        """Add or replace single tables in tables/ (rows derived once the trace is loaded),
        each file swapped in whole."""
        for name, table in tables.items():
            target = self.table_path(name)
            partial = target.with_name(f".{target.name}.tmp")
            pq.write_table(table, partial, compression="zstd")
            os.replace(partial, target)
        listed = json.loads((self.tables_dir / "_COMPLETE").read_text())
        (self.tables_dir / "_COMPLETE").write_text(json.dumps(sorted({*listed, *tables})))

    def read_table(self, table: str) -> pa.Table:
        return pq.read_table(self.table_path(table))


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename) so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)

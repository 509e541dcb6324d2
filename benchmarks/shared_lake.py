"""Shared TraceLake benchmark: `aaco ingest` of an N-kernel rocprofv3 trace into the shared
TraceLake (DuckLake: a PostgreSQL catalog + a Parquet data folder) against the default file
backend (one DuckDB file).

    .venv-ducklake/bin/python benchmarks/shared_lake.py [--kernels N] [--repeats R]

(defaults 10,000,000 kernels and 3 repeats). It runs in the DuckLake environment (DuckDB 1.5 and
its extensions: `make ducklake-setup`), and needs Debian's postgresql package (initdb, pg_ctl):
tests/services.py starts one PostgreSQL server on a free loopback port (fsync off) for the run.

Simulates the N-kernel run once (benchmarks/gpu_traces.py: kernel trace + HIP API trace from a
real ONNX Runtime profile of the zoo's resnet_cnn), then alternates `--repeats` times:
  a. our ingest (ingest.ingest_trace, what `aaco ingest <kernel trace>` does: session bundle
     plus one-transaction load, kernel families included) into a fresh TraceLake file;
  b. the same into a fresh shared lake: a new catalog database on the server and a new data
     folder, selected only by AACO_DUCKLAKE_CATALOG and AACO_DUCKLAKE_DATA in the child's
     environment.
Each runs in a fresh child process (gpu_traces' stage runner, the same DuckDB 1.5 for both),
which reports its wall time and peak resident memory (VmHWM). After the last pair the session's
kernel_events rows are counted in both lakes (they must agree) and the storage measured: the
DuckDB file against the data folder's Parquet files (and the catalog database). Prints a small
table (medians; the ratio is the median of the pairs' shared/file ratios) and one JSON line.
Everything lives in a temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from trace_simulator import SimulationSettings, simulate_at_scale

from aaco_pipelines.tracelake import ducklake
from aaco_pipelines.tracelake.store import TraceLake

BENCHMARKS = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS.parent / "tests")]

from gpu_traces import _median_run, bench_paths, print_rows, run_stage, zoo_profile  # noqa: E402
from services import postgres_server  # noqa: E402

BACKEND_ENV = (ducklake.CATALOG_ENV, ducklake.DATA_ENV)


def libpq(url: str) -> str:
    """services' SQLAlchemy URL as the libpq string DuckLake and psycopg2 take."""
    parts = urlsplit(url)
    return f"dbname={parts.path[1:]} host={parts.hostname} port={parts.port} user={parts.username}"


def new_shared_lake(server: str, name: str, work: Path) -> dict[str, str]:
    """A new catalog database on the server and a new data folder: the variables selecting
    that lake."""
    import psycopg2

    pg = psycopg2.connect(server)
    try:
        pg.autocommit = True  # CREATE DATABASE cannot run in a transaction
        with pg.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        pg.close()
    return {
        ducklake.CATALOG_ENV: server.replace(f"dbname={server_database(server)}", f"dbname={name}"),
        ducklake.DATA_ENV: str(work / "data"),
    }


def server_database(catalog: str) -> str:
    return catalog.split("dbname=", 1)[1].split()[0]


@contextlib.contextmanager
def backend(selected: dict[str, str]) -> Iterator[None]:
    """This process reads the lake these variables select (none: the file), then as before."""
    saved = {name: os.environ.pop(name, None) for name in BACKEND_ENV}
    os.environ.update(selected)
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def session_kernels(lake: TraceLake) -> tuple[str, int]:
    """The one session a benchmark lake holds, and its kernel_events rows."""
    rows = lake.query(
        "SELECT session_id, count(*) AS n FROM kernel_events GROUP BY session_id"
    ).to_pylist()
    if len(rows) != 1:
        raise SystemExit(f"expected one session in {lake.path}, found {rows}")
    return rows[0]["session_id"], rows[0]["n"]


def folder_bytes(folder: Path) -> tuple[int, int]:
    """Total size and count of the files under a folder."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def catalog_bytes(catalog: str) -> int:
    import psycopg2

    pg = psycopg2.connect(catalog)
    try:
        with pg.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            return cursor.fetchone()[0]
    finally:
        pg.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=10_000_000)
    parser.add_argument(
        "--repeats", type=int, default=3, help="interleaved file/shared pairs; medians reported"
    )
    args = parser.parse_args(argv)
    # The file runs see no shared lake, whatever this shell has set.
    file_env = {k: v for k, v in os.environ.items() if k not in BACKEND_ENV}

    with tempfile.TemporaryDirectory(prefix="aaco-shared-lake-bench-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        truth = simulate_at_scale(
            args.kernels, tmp / "trace", SimulationSettings(), zoo_profile(tmp)
        )
        simulate_s = time.perf_counter() - t0
        trace_mb = truth.kernel_trace.stat().st_size / 1e6

        with postgres_server() as url:
            server = libpq(url)
            runs: dict[str, list[dict]] = {"file": [], "shared": []}
            for i in range(args.repeats):
                file_work, shared_work = tmp / f"file{i}", tmp / f"shared{i}"
                runs["file"].append(run_stage("ours", truth.kernel_trace, file_work, file_env))
                shared_env = new_shared_lake(server, f"lake_{i}", shared_work)
                runs["shared"].append(
                    run_stage("ours", truth.kernel_trace, shared_work, {**file_env, **shared_env})
                )
                if i < args.repeats - 1:  # keep the last pair: read back and measured below
                    shutil.rmtree(file_work)
                    shutil.rmtree(shared_work)
            ratios = [
                s["seconds"] / f["seconds"]
                for f, s in zip(runs["file"], runs["shared"], strict=True)
            ]

            file_lake = TraceLake(bench_paths(file_work).tracelake)
            with backend({}):
                _, file_rows = session_kernels(file_lake)
            with backend(shared_env):
                t1 = time.perf_counter()
                _, shared_rows = session_kernels(TraceLake(tmp / "unused.duckdb"))
                count_s = time.perf_counter() - t1
            if shared_rows != file_rows:
                raise SystemExit(
                    f"the shared lake holds {shared_rows:,} kernel_events rows of the session, "
                    f"the file lake {file_rows:,}"
                )
            file_bytes = sum(
                p.stat().st_size
                for p in (file_lake.path, file_lake.path.with_name(file_lake.path.name + ".wal"))
                if p.exists()
            )
            data_bytes, data_files = folder_bytes(Path(shared_env[ducklake.DATA_ENV]))
            catalog_size = catalog_bytes(shared_env[ducklake.CATALOG_ENV])

    file_run, shared_run = _median_run(runs["file"]), _median_run(runs["shared"])
    summary = {
        "kernels": truth.kernels,
        "kernel_trace_mb": round(trace_mb, 1),
        "simulate_s": round(simulate_s, 2),
        "file_s": round(file_run["seconds"], 2),
        "file_all_s": file_run["all_seconds"],
        "file_peak_mb": round(file_run["peak_rss_bytes"] / 2**20),
        "shared_s": round(shared_run["seconds"], 2),
        "shared_all_s": shared_run["all_seconds"],
        "shared_peak_mb": round(shared_run["peak_rss_bytes"] / 2**20),
        "shared_over_file": round(float(np.median(ratios)), 3),
        "ratios": [round(r, 3) for r in ratios],
        "kernel_events_rows": shared_rows,
        "shared_count_query_s": round(count_s, 2),
        "file_lake_mb": round(file_bytes / 1e6, 1),
        "shared_data_mb": round(data_bytes / 1e6, 1),
        "shared_data_files": data_files,
        "shared_catalog_mb": round(catalog_size / 1e6, 1),
    }
    _print_table(summary)
    print(json.dumps(summary))
    return 0


def _print_table(s: dict) -> None:
    rows = [
        ("kernels simulated", f"{s['kernels']:,}", f"{s['kernel_trace_mb']} MB CSV"),
        ("simulate (profile + traces)", f"{s['simulate_s']:.2f} s", ""),
        ("a. ingest into the TraceLake file", f"{s['file_s']:.2f} s",
         f"runs {s['file_all_s']}; peak {s['file_peak_mb']} MB"),
        ("b. ingest into the shared lake", f"{s['shared_s']:.2f} s",
         f"runs {s['shared_all_s']}; peak {s['shared_peak_mb']} MB"),
        ("   shared / file", f"{s['shared_over_file']:.2f}x", f"median of pairs {s['ratios']}"),
        ("kernel_events rows (both lakes)", f"{s['kernel_events_rows']:,}",
         f"shared count query {s['shared_count_query_s']:.2f} s"),
        ("storage: DuckDB file", f"{s['file_lake_mb']} MB", ""),
        ("storage: shared data folder", f"{s['shared_data_mb']} MB",
         f"data files: {s['shared_data_files']}; catalog database {s['shared_catalog_mb']} MB"),
    ]  # fmt: skip
    print_rows(rows)


if __name__ == "__main__":
    sys.exit(main())

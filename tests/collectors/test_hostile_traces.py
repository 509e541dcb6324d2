"""Hostile traces: whatever a trace file holds is data, never SQL, and no trace input hangs aaco.

Every trace here is a real profiler sample (../shared/samples/profilers) with hostile text put
in its headers, kernel names, values, JSON keys, SQLite table and column names, and its own file
and folder names; each is loaded for real into a real TraceLake file, and through `aaco ingest`.
The second part gives `aaco ingest` what hangs or escapes: FIFOs, devices, dangling links, link
loops and links out of the trace's folder, which must be refused, in one line, before any work.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import duckdb
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.collectors.traces import label_kernels, load_trace
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.schema import schema_ddl
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED

SAMPLES = SHARED / "samples" / "profilers"
KERNEL_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
COUNTER_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_counter_collection.csv"
AGENT_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_agent_info.csv"
V1_CSV = SAMPLES / "hpctraining_mi250_laplacian_rocprofv1_results.csv"
JSON_GZ = SAMPLES / "tracelens_mi350x_pytorch_train_908_results.json.gz"
RPD_GZ = SAMPLES / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"

# An agent_info.csv column name that, put unquoted into `"{name}"`, closes the identifier, ends
# the INSERT, writes a file, empties session_records, and hides the rest of the statement in a
# string literal (its second copy). It did all of that on the TraceLake writer before names
# were quoted. Sorted last among the sample's columns ("zzz"), so it is the last details key.
EXPLOIT = (
    'zzz"AS JSON),0)})AS VARCHAR)AS "details_json"FROM "rocprofv3_agent_info",(SELECT 1 zzz);'
    "COPY(SELECT 1)TO ';DELETE FROM session_records;SELECT CAST(to_json({k:coalesce((\"node_id"
)
HOSTILE = (
    EXPLOIT,
    "x\" ; COPY (SELECT 1) TO 'pwn' ; --",
    "'; DROP TABLE sessions; --",
    "\"); ATTACH 'evil.duckdb' AS evil; --",
    "'); INSTALL httpfs; LOAD httpfs; SELECT ('",
    'a"b""c\'d;--e/*',
    'x"\n; DROP TABLE kernel_events; --',
)
IDS = ("exploit", "copy", "drop", "attach", "install", "quotes", "newline")


# --- a real TraceLake, and proof that nothing outside the trace's rows changed -------------------


@pytest.fixture
def lake_con(tmp_path):
    """An open DuckDB connection to a TraceLake file holding an earlier, finished session."""
    con = duckdb.connect(str(tmp_path / "lake.duckdb"))
    for statement in schema_ddl():
        con.execute(statement)
    con.execute("INSERT INTO session_records (session_id, model_slug) VALUES ('earlier', 'kept')")
    con.execute("INSERT INTO completed_sessions (session_id) VALUES ('earlier')")
    con.execute(  # a device trace's kernel, stored where the hostile ones will go
        "INSERT INTO kernel_events_trace (session_id, kernel_name) VALUES ('earlier', 'kept')"
    )
    yield con
    con.close()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working folder: a smuggled COPY ... TO 'relative' would write here."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def lake_state(con) -> dict:
    return {
        "tables": con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT temporary "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT temporary AND NOT internal "
            "ORDER BY 1"
        ).fetchall(),
        "databases": con.execute(
            "SELECT database_name FROM duckdb_databases() ORDER BY 1"
        ).fetchall(),
        "extensions": con.execute(
            "SELECT extension_name FROM duckdb_extensions() WHERE loaded OR installed ORDER BY 1"
        ).fetchall(),
    }


def assert_untouched(con, before: dict, workdir: Path) -> None:
    """No table or view dropped or added, nothing attached or installed, the earlier session
    and its kernel still there, and no file written."""
    assert lake_state(con) == before
    assert con.execute("SELECT session_id FROM sessions").fetchall() == [("earlier",)]
    earlier = "SELECT kernel_name FROM kernel_events WHERE session_id = 'earlier'"
    assert con.execute(earlier).fetchall() == [("kept",)]
    assert list(workdir.iterdir()) == []


def load(con, path: Path) -> dict[str, int]:
    counts = load_trace(con, path, "hostile")
    label_kernels(con, "hostile")
    return counts


def column(con, sql: str) -> list:
    return [row[0] for row in con.execute(sql).fetchall()]


# --- writing hostile copies of the real samples --------------------------------------------------


def rewrite_csv(source: Path, target: Path, extra: dict[str, str], **replace) -> list[list[str]]:
    """The sample with `extra` columns (name → every row's value) appended and the named columns
    replaced row by row (column → function of the row number and old value); the written rows."""
    with open(source, newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    index = {name.lower(): header.index(name) for name in header}
    for i, row in enumerate(rows):
        for name, change in replace.items():
            row[index[name]] = change(i, row[index[name]])
        row.extend(extra.values())
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header + list(extra), *rows])
    return rows


def hostile_name(i: int, _old: str = "") -> str:
    return HOSTILE[i % len(HOSTILE)]


def hostile_rocprofv3_folder(folder: Path, agent_column: str) -> None:
    """The sLLM rocprofv3 output with hostile kernel and counter names, a hostile column in
    every file (each row's value the same text), and `agent_column` added to agent_info.csv."""
    extra = {f"{text} {i}": text for i, text in enumerate(HOSTILE)}
    rewrite_csv(KERNEL_CSV, folder / "1_kernel_trace.csv", extra, kernel_name=hostile_name)
    rewrite_csv(
        COUNTER_CSV,
        folder / "1_counter_collection.csv",
        extra,
        kernel_name=hostile_name,
        counter_name=hostile_name,
    )
    rewrite_csv(AGENT_CSV, folder / "1_agent_info.csv", {agent_column: agent_column})


# --- SQL in the trace is data ---------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE, ids=IDS)
def test_agent_info_column_names_become_details_keys_never_sql(lake_con, workdir, tmp_path, name):
    before = lake_state(lake_con)
    trace = tmp_path / "agents" / "1_agent_info.csv"
    rewrite_csv(AGENT_CSV, trace, {name: name})
    assert load(lake_con, trace) == {"agents": 4}
    details = [json.loads(d) for d in column(lake_con, "SELECT details_json FROM agents")]
    # Header names are matched lower-cased and trimmed (rocprofv3 spells them both ways); the
    # value is the file's text as it was.
    assert [d[name.strip().lower()] for d in details] == [name] * 4
    assert_untouched(lake_con, before, workdir)


def test_hostile_names_in_a_rocprofv3_folder_are_stored_as_written(lake_con, workdir, tmp_path):
    before = lake_state(lake_con)
    folder = tmp_path / "rocprofv3"
    hostile_rocprofv3_folder(folder, EXPLOIT)
    assert load(lake_con, folder) == {"kernel_events": 319, "counters": 530, "agents": 4}
    names = column(
        lake_con,
        "SELECT kernel_name FROM kernel_events WHERE session_id = 'hostile' ORDER BY dispatch_id",
    )
    assert names == [hostile_name(i) for i in range(319)]
    assert set(column(lake_con, "SELECT kernel_name FROM kernel_symbols")) >= set(HOSTILE)
    assert set(column(lake_con, "SELECT counter FROM counters")) == set(HOSTILE)
    assert all(
        EXPLOIT.lower() in json.loads(d)
        for d in column(lake_con, "SELECT details_json FROM agents")
    )
    assert_untouched(lake_con, before, workdir)


def test_hostile_rocprof_v1_names_are_kept(lake_con, workdir, tmp_path):
    before = lake_state(lake_con)
    trace = tmp_path / "results.csv"
    rows = rewrite_csv(V1_CSV, trace, {h: h for h in HOSTILE}, kernelname=hostile_name)
    assert load(lake_con, trace) == {"kernel_events": len(rows)}
    names = column(
        lake_con,
        "SELECT event_name FROM kernel_events WHERE session_id = 'hostile' ORDER BY dispatch_id",
    )
    assert names == [hostile_name(i) for i in range(len(rows))]
    assert_untouched(lake_con, before, workdir)


def test_hostile_json_keys_and_kernel_names_are_kept(lake_con, workdir, tmp_path):
    """The TraceLens rocprofv3 JSON, cut to its first 300 dispatches, with hostile agent keys
    and values, a hostile key in the tool's entry, and hostile kernel names."""
    before = lake_state(lake_con)
    with gzip.open(JSON_GZ, "rt") as handle:
        document = json.load(handle)
    entry = document["rocprofiler-sdk-tool"][0]
    records = entry["buffer_records"]
    records["kernel_dispatch"] = records["kernel_dispatch"][:300]
    for i, symbol in enumerate(entry["kernel_symbols"]):
        symbol["formatted_kernel_name"] = hostile_name(i)
    for agent in entry["agents"]:
        agent.update({h: h for h in HOSTILE})
    entry.update({h: [h] for h in HOSTILE})
    trace = tmp_path / "908_results.json"
    trace.write_text(json.dumps(document))
    assert load(lake_con, trace)["kernel_events"] == 300
    symbols = {s["kernel_id"]: hostile_name(i) for i, s in enumerate(entry["kernel_symbols"])}
    expected = [symbols[d["dispatch_info"]["kernel_id"]] for d in records["kernel_dispatch"]]
    names = column(
        lake_con,
        "SELECT kernel_name FROM kernel_events WHERE session_id = 'hostile' ORDER BY dispatch_id",
    )
    assert names == expected and set(expected) & set(HOSTILE)
    details = [json.loads(d) for d in column(lake_con, "SELECT details_json FROM agents")]
    assert len(details) == len(entry["agents"])
    assert all(d[h] == h for d in details for h in HOSTILE)  # JSON keys are kept verbatim
    assert_untouched(lake_con, before, workdir)


def test_hostile_sqlite_names_in_a_rocpd_database_are_kept(lake_con, workdir, tmp_path):
    """A ROCm 7 rocpd database with hostile table and column names beside the documented
    views, a hostile key in an agent's extdata, and hostile kernel names."""
    before = lake_state(lake_con)
    trace = tmp_path / "4242_results.db"
    with sqlite3.connect(trace) as db:
        db.execute(
            "CREATE TABLE rocpd_info_agent (id INTEGER, type TEXT, absolute_index INTEGER, "
            "logical_index INTEGER, name TEXT, product_name TEXT, extdata TEXT)"
        )
        db.execute(
            "CREATE TABLE kernels (name TEXT, pid INTEGER, tid INTEGER, agent_log_index INTEGER, "
            'queue_id INTEGER, dispatch_id INTEGER, kernel_id INTEGER, start INTEGER, "end" INTEGER)'
        )
        for i, text in enumerate(HOSTILE):
            quoted = '"' + text.replace('"', '""') + '"'
            db.execute(f"CREATE TABLE {quoted} ({quoted} TEXT)")
            db.execute(f"INSERT INTO {quoted} VALUES (?)", [text])
            db.execute(f"ALTER TABLE kernels ADD COLUMN {quoted.replace(text, f'{text} {i}')} TEXT")
        db.execute(
            "INSERT INTO rocpd_info_agent VALUES (2, 'GPU', 2, 1, 'gfx942', ?, ?)",
            [HOSTILE[1], json.dumps({h: h for h in HOSTILE})],
        )
        db.executemany(
            "INSERT INTO kernels (name, pid, tid, agent_log_index, queue_id, dispatch_id, "
            'kernel_id, start, "end") VALUES (?, 10, 11, 1, 3, ?, 7, ?, ?)',
            [(text, i, 1000 * i, 1000 * i + 500) for i, text in enumerate(HOSTILE)],
        )
    assert load(lake_con, trace) == {"kernel_events": len(HOSTILE), "agents": 1}
    names = column(
        lake_con,
        "SELECT kernel_name FROM kernel_events WHERE session_id = 'hostile' ORDER BY dispatch_id",
    )
    assert names == list(HOSTILE)
    product, details = lake_con.execute("SELECT product_name, details_json FROM agents").fetchone()
    assert product == HOSTILE[1] and json.loads(details) == {h: h for h in HOSTILE}
    assert_untouched(lake_con, before, workdir)


def test_hostile_names_in_a_real_rpd_trace_are_kept(lake_con, workdir, tmp_path):
    """The vLLM RPD trace with its first kernel names made hostile and a hostile table and
    column added."""
    before = lake_state(lake_con)
    trace = tmp_path / "mytrace.rpd"
    with gzip.open(RPD_GZ, "rb") as src, open(trace, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(trace) as db:
        ids = [
            row[0]
            for row in db.execute(
                "SELECT DISTINCT description_id FROM rocpd_op o JOIN rocpd_string d "
                "ON d.id = o.description_id WHERE d.string <> '' ORDER BY 1 LIMIT ?",
                [len(HOSTILE)],
            )
        ]
        db.executemany(
            "UPDATE rocpd_string SET string = ? WHERE id = ?", list(zip(HOSTILE, ids, strict=True))
        )
        quoted = '"' + EXPLOIT.replace('"', '""') + '"'
        db.execute(f"CREATE TABLE {quoted} ({quoted} TEXT)")
        db.execute(f"ALTER TABLE rocpd_op ADD COLUMN {quoted} TEXT")
    assert load(lake_con, trace)["kernel_events"] == 8948
    names = set(
        column(lake_con, "SELECT kernel_name FROM kernel_events WHERE session_id = 'hostile'")
    )
    assert set(HOSTILE) <= names
    assert_untouched(lake_con, before, workdir)


# --- the trace's own path is data -----------------------------------------------------------------


def cut_csv(source: Path, target: Path, rows: int) -> Path:
    """The sample's header and its first `rows` rows."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, encoding="utf-8") as handle:
        target.write_text("".join(line for _, line in zip(range(rows + 1), handle, strict=False)))
    return target


def cut_json(target: Path, dispatches: int, _cache: dict = {}) -> Path:  # noqa: B006
    """The TraceLens JSON sample cut to its first `dispatches` kernel dispatches."""
    if not _cache:
        with gzip.open(JSON_GZ, "rt") as handle:
            _cache.update(json.load(handle))
    entry = dict(_cache["rocprofiler-sdk-tool"][0])
    records = dict(entry["buffer_records"])
    records["kernel_dispatch"] = records["kernel_dispatch"][:dispatches]
    entry["buffer_records"] = records
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"rocprofiler-sdk-tool": [entry]}))
    return target


@pytest.mark.parametrize(
    ("folder", "decoy"),
    [
        ('it\'s "quoted"; DROP TABLE sessions; --', None),
        ("back\\slash", None),
        ("runs*", "runs-decoy"),
        ("run?", "runx"),
        ("[run]", "r"),
    ],
    ids=["quotes", "backslash", "star", "question", "brackets"],
)
def test_a_trace_folder_name_names_exactly_that_folder(lake_con, workdir, tmp_path, folder, decoy):
    """Quotes in a folder's name are not SQL, and glob characters match nothing else: a sibling
    folder the name would match as a pattern is not read."""
    before = lake_state(lake_con)
    shutil.copy(KERNEL_CSV, _made(tmp_path / folder) / "1_kernel_trace.csv")
    if decoy:
        cut_csv(KERNEL_CSV, tmp_path / decoy / "1_kernel_trace.csv", rows=10)
    assert load(lake_con, tmp_path / folder) == {"kernel_events": 319}
    assert_untouched(lake_con, before, workdir)


def test_glob_characters_in_a_file_name_match_only_that_file(lake_con, workdir, tmp_path):
    before = lake_state(lake_con)
    csv_trace = cut_csv(KERNEL_CSV, tmp_path / "5*?[1]'_kernel_trace.csv", rows=20)
    cut_csv(KERNEL_CSV, tmp_path / "5xx1'_kernel_trace.csv", rows=10)
    json_trace = cut_json(tmp_path / "9*_results.json", dispatches=5)
    cut_json(tmp_path / "90_results.json", dispatches=7)
    assert load_trace(lake_con, csv_trace, "csv") == {"kernel_events": 20}
    assert load_trace(lake_con, json_trace, "json")["kernel_events"] == 5
    assert_untouched(lake_con, before, workdir)


def test_a_path_duckdb_cannot_name_exactly_is_refused(lake_con, tmp_path):
    """DuckDB reads a path with *, ? or [ as a pattern and cannot escape a backslash in one."""
    trace = cut_csv(KERNEL_CSV, tmp_path / "a\\b*" / "1_kernel_trace.csv", rows=5)
    with pytest.raises(AacoInputError, match="backslash") as err:
        load_trace(lake_con, trace, "s1")
    assert str(trace) in str(err.value)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_aaco_ingest_of_a_hostile_trace_keeps_every_session(aaco_paths, workdir, tmp_path, capsys):
    """End to end: a hostile rocprofv3 output, in a folder whose name is SQL, ingested after an
    ordinary trace; both sessions are there and the hostile text is data."""
    assert main(["ingest", str(V1_CSV), "--name", "ordinary"]) == 0
    folder = tmp_path / "x'; DROP TABLE session_records; --"
    hostile_rocprofv3_folder(folder, EXPLOIT)
    assert main(["ingest", str(folder), "--name", "hostile"]) == 0
    lake = TraceLake(aaco_paths.tracelake)
    sessions = lake.query("SELECT model_slug FROM sessions ORDER BY started_at")
    assert sessions["model_slug"].to_pylist() == ["ordinary", "hostile"]
    kernels = lake.query("SELECT count(*) AS n FROM kernel_events WHERE kernel_name = ?", [EXPLOIT])
    assert kernels["n"][0].as_py() == len(range(0, 319, len(HOSTILE)))
    details = lake.query("SELECT details_json FROM agents")["details_json"].to_pylist()
    assert len(details) == 4 and all(EXPLOIT.lower() in json.loads(d) for d in details)
    assert list(workdir.iterdir()) == []


# --- trace inputs that would hang, crash or leave their folder ------------------------------------


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _device(path: Path) -> Path:
    """A character device like /dev/zero (reading it never ends), made where the test owns it."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("cannot make a device file here (needs CAP_MKNOD)")
    return path


def _folder_with(tmp_path: Path, name: str, make) -> tuple[Path, Path]:
    """A real rocprofv3 kernel trace folder with one more entry `name` made by `make`; (the
    folder, the entry)."""
    folder = tmp_path / "trace"
    folder.mkdir()
    shutil.copy(KERNEL_CSV, folder / "1_kernel_trace.csv")
    return folder, make(folder / name)


def _link(target):
    def make(path: Path) -> Path:
        path.symlink_to(target(path) if callable(target) else target)
        return path

    return make


STUCK_TRACES = {
    # name: (how to make it, given tmp_path) → (the path to ingest, the path the error names)
    "fifo as the trace": lambda tmp: 2 * (_fifo(tmp / "1_kernel_trace.csv"),),
    "device as the trace": lambda tmp: 2 * (_device(tmp / "1_kernel_trace.csv"),),
    "fifo in the folder": lambda tmp: _folder_with(tmp, "1_hip_api_trace.csv", _fifo),
    "fifo by another name": lambda tmp: _folder_with(tmp, "notes", _fifo),
    "device in the folder": lambda tmp: _folder_with(tmp, "1_agent_info.csv", _device),
    "dangling link in the folder": lambda tmp: _folder_with(
        tmp, "1_agent_info.csv", _link("missing.csv")
    ),
    "link loop in the folder": lambda tmp: _folder_with(
        tmp, "1_agent_info.csv", _link(lambda p: p)
    ),
    "link out of the folder": lambda tmp: _folder_with(tmp, "1_agent_info.csv", _link(AGENT_CSV)),
    "link to a secret": lambda tmp: _folder_with(tmp, "passwd.csv", _link(Path("/etc/passwd"))),
    "folder link out of the folder": lambda tmp: _folder_with(tmp, "pmc_1", _link(SAMPLES)),
    "link loop as the trace": lambda tmp: 2 * (_link(lambda p: p)(tmp / "loop.csv"),),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("case", STUCK_TRACES)
def test_traces_that_hang_or_escape_are_refused_in_one_line(aaco_paths, tmp_path, capsys, case):
    trace, culprit = STUCK_TRACES[case](tmp_path)
    assert main(["ingest", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aaco: error: ") and err.count("\n") == 1, err
    assert str(culprit) in err and "Fix:" in err and "Traceback" not in err
    left = [p for p in aaco_paths.sessions.rglob("*") if not p.is_dir()]
    assert left == []
    if "link" in case:
        assert "link" in err  # says what is wrong with the path


def test_a_link_inside_the_folder_to_a_file_inside_it_is_fine(aaco_paths, tmp_path):
    folder, _ = _folder_with(tmp_path, "2_kernel_trace.csv", _link(Path("1_kernel_trace.csv")))
    assert main(["ingest", str(folder), "--name", "linked"]) == 0


@pytest.mark.timeout(20)
@pytest.mark.parametrize("model", ["missing", "folder", "fifo"])
def test_ingest_refuses_a_model_that_is_not_a_file_before_any_work(
    aaco_paths, tmp_path, capsys, model
):
    path = tmp_path / "model.onnx"
    if model == "folder":
        path.mkdir()
    elif model == "fifo":
        os.mkfifo(path)
    assert main(["ingest", str(KERNEL_CSV), "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aaco: error: ") and err.count("\n") == 1, err
    assert str(path) in err and "Fix:" in err
    assert not aaco_paths.sessions.exists() or not any(aaco_paths.sessions.rglob("*.json"))
    assert not aaco_paths.tracelake.exists()


@pytest.mark.timeout(20)
def test_load_trace_refuses_a_fifo_named_like_a_trace_without_opening_it(lake_con, tmp_path):
    fifo = _fifo(tmp_path / "1_kernel_trace.csv")
    with pytest.raises(AacoInputError, match="not a regular file") as err:
        load_trace(lake_con, fifo, "s1")
    assert str(fifo) in str(err.value)

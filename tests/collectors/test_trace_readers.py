"""Reading AMD profilers' traces (rocprofv3 CSV/JSON, rocpd, RPD, rocprof v1) into TraceLake files.

Real samples (read-only, ../shared/samples/profilers) wherever one exists; the older rocprofv3
CSV header generations, hip_api/memory_copy CSVs and the ROCm 7 rocpd database have no sample
here and are written in tmp with the documented column names.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from aaco_pipelines.collectors import rocprofv3_csv, rocprofv3_json
from aaco_pipelines.collectors.traces import collect_trace, detect_format, load_trace
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.schema import TABLES
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED

SAMPLES = SHARED / "samples" / "profilers"
KERNEL_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
COUNTER_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_counter_collection.csv"
AGENT_CSV = SAMPLES / "sllm_r9700_decode_attn_564735_agent_info.csv"
JSON_GZ = SAMPLES / "tracelens_mi350x_pytorch_train_908_results.json.gz"
RPD_GZ = SAMPLES / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"
V1_CSV = SAMPLES / "hpctraining_mi250_laplacian_rocprofv1_results.csv"


def collected(path: Path, out: Path) -> tuple[dict[str, int], dict]:
    """collect_trace's counts and every written table, each checked against its schema."""
    counts = collect_trace(path, "s1", out)
    tables = {name: pq.read_table(out / f"{name}.parquet") for name in counts}
    for name, table in tables.items():
        # Names and types exactly the TraceLake's (DuckDB marks constant columns NOT NULL).
        assert [(f.name, f.type) for f in table.schema] == [
            (f.name, f.type) for f in TABLES[name]
        ], name
        assert table.num_rows == counts[name]
        assert set(table["session_id"].to_pylist()) == {"s1"}
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.parquet" for n in counts)
    return counts, tables


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def sllm_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sllm") / "564735"
    folder.mkdir()
    for sample in (KERNEL_CSV, COUNTER_CSV, AGENT_CSV):
        shutil.copy(sample, folder / sample.name.removeprefix("sllm_r9700_decode_attn_"))
    return folder


# --- a ROCm 7 rocpd database: the documented views' columns (ROCm 7.0 data_views.sql) --------

ROCPD_SCHEMA = """
CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT);
CREATE TABLE rocpd_info_agent (id INTEGER, guid TEXT, nid INTEGER, pid INTEGER, type TEXT,
  absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, uuid INTEGER, name TEXT,
  model_name TEXT, vendor_name TEXT, product_name TEXT, user_name TEXT, extdata TEXT);
CREATE TABLE rocpd_info_kernel_symbol (id INTEGER, guid TEXT, nid INTEGER, pid INTEGER,
  code_object_id INTEGER, kernel_name TEXT, display_name TEXT, sgpr_count INTEGER,
  arch_vgpr_count INTEGER, accum_vgpr_count INTEGER, extdata TEXT);
CREATE TABLE kernels (id INTEGER, guid TEXT, tid INTEGER, category TEXT, region TEXT, name TEXT,
  nid INTEGER, pid INTEGER, agent_abs_index INTEGER, agent_log_index INTEGER,
  agent_type_index INTEGER, agent_type TEXT, code_object_id INTEGER, kernel_id INTEGER,
  dispatch_id INTEGER, stream_id INTEGER, queue_id INTEGER, queue TEXT, stream TEXT,
  start INTEGER, "end" INTEGER, duration INTEGER, grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
  workgroup_x INTEGER, workgroup_y INTEGER, workgroup_z INTEGER, lds_size INTEGER,
  scratch_size INTEGER, static_lds_size INTEGER, static_scratch_size INTEGER, stack_id INTEGER,
  parent_stack_id INTEGER, corr_id INTEGER);
CREATE TABLE regions (id INTEGER, guid TEXT, category TEXT, name TEXT, nid INTEGER, pid INTEGER,
  tid INTEGER, start INTEGER, "end" INTEGER, duration INTEGER, event_id INTEGER,
  stack_id INTEGER, parent_stack_id INTEGER, corr_id INTEGER, extdata TEXT, call_stack TEXT,
  line_info TEXT);
CREATE TABLE memory_copies (id INTEGER, guid TEXT, category TEXT, nid INTEGER, pid INTEGER,
  tid INTEGER, start INTEGER, "end" INTEGER, duration INTEGER, name TEXT, region_name TEXT,
  stream_id INTEGER, queue_id INTEGER, stream_name TEXT, queue_name TEXT, size INTEGER,
  dst_device TEXT, dst_agent_abs_index INTEGER, dst_agent_log_index INTEGER,
  dst_agent_type_index INTEGER, dst_agent_type TEXT, dst_address INTEGER, src_device TEXT,
  src_agent_abs_index INTEGER, src_agent_log_index INTEGER, src_agent_type_index INTEGER,
  src_agent_type TEXT, src_address INTEGER, stack_id INTEGER, parent_stack_id INTEGER,
  corr_id INTEGER);
CREATE TABLE counters_collection (id INTEGER, guid TEXT, dispatch_id INTEGER, kernel_id INTEGER,
  event_id INTEGER, correlation_id INTEGER, pid INTEGER, tid INTEGER, agent_id INTEGER,
  agent_abs_index INTEGER, agent_log_index INTEGER, agent_type TEXT, queue_id INTEGER,
  grid_size INTEGER, kernel_name TEXT, workgroup_size INTEGER, lds_block_size INTEGER,
  scratch_size INTEGER, vgpr_count INTEGER, sgpr_count INTEGER, counter_name TEXT,
  value REAL, start INTEGER, "end" INTEGER);
"""
GPU_EXTDATA = {"cu_count": 304, "wave_front_size": 64, "max_engine_clk_fcompute": 2100}


@pytest.fixture
def rocpd_db(tmp_path) -> Path:
    path = tmp_path / "4242_results.db"
    with sqlite3.connect(path) as db:
        db.executescript(ROCPD_SCHEMA)
        db.executemany(
            "INSERT INTO rocpd_info_agent (id, guid, type, absolute_index, logical_index, name, "
            "product_name, extdata) VALUES (?, 'g', ?, ?, ?, ?, ?, ?)",
            [
                (1, "CPU", 0, 0, "AMD EPYC 9654", "AMD EPYC 9654", "{}"),
                (2, "GPU", 2, 1, "gfx942", "AMD Instinct MI300X", json.dumps(GPU_EXTDATA)),
            ],
        )
        db.execute(
            "INSERT INTO rocpd_info_kernel_symbol (id, guid, kernel_name, display_name, "
            "sgpr_count, arch_vgpr_count, accum_vgpr_count) "
            "VALUES (7, 'g', 'gemm.kd', 'gemm', 96, 128, 64)"
        )
        db.executemany(
            "INSERT INTO kernels (guid, tid, name, pid, agent_abs_index, agent_log_index, "
            'kernel_id, dispatch_id, stream_id, queue_id, start, "end", grid_x, grid_y, grid_z, '
            "workgroup_x, workgroup_y, workgroup_z, lds_size, scratch_size, corr_id) "
            "VALUES ('g', 11, 'gemm', 10, 2, 1, 7, ?, 1, 3, ?, ?, 4096, 2, 1, 256, 1, 1, "
            "1024, 0, ?)",
            [(1, 1_000, 1_500, 21), (2, 2_000, 2_300, 22)],
        )
        db.executemany(
            'INSERT INTO regions (guid, category, name, pid, tid, start, "end", corr_id) '
            "VALUES ('g', 'HIP_RUNTIME_API_EXT', ?, 10, 11, ?, ?, ?)",
            [("hipLaunchKernel", 900, 950, 21), ("hipLaunchKernel", 1_900, 1_960, 22)],
        )
        db.execute(
            'INSERT INTO memory_copies (guid, start, "end", name, queue_id, size, '
            "src_agent_log_index, dst_agent_log_index, corr_id) "
            "VALUES ('g', 500, 800, 'MEMORY_COPY_HOST_TO_DEVICE', 2, 65536, 0, 1, 20)"
        )
        db.executemany(
            "INSERT INTO counters_collection (guid, dispatch_id, correlation_id, kernel_name, "
            "agent_log_index, counter_name, value) VALUES ('g', ?, ?, 'gemm', 1, ?, ?)",
            [(1, 21, "SQ_WAVES", 64.0), (1, 21, "GRBM_GUI_ACTIVE", 1234.0)],
        )
    return path


# --- detection ----------------------------------------------------------------------------


def test_detect_format_of_every_sample(rpd_file, sllm_folder, rocpd_db, tmp_path):
    assert detect_format(KERNEL_CSV) == "rocprofv3_csv"
    assert detect_format(COUNTER_CSV) == "rocprofv3_csv"
    assert detect_format(AGENT_CSV) == "rocprofv3_csv"
    assert detect_format(sllm_folder) == "rocprofv3_csv"
    assert detect_format(JSON_GZ) == "rocprofv3_json"
    assert detect_format(rpd_file) == "rpd"
    assert detect_format(RPD_GZ) == "rpd"
    assert detect_format(V1_CSV) == "rocprof_v1"
    assert detect_format(rocpd_db) == "rocpd"
    assert detect_format(rocpd_db.parent) == "rocpd"  # a folder holding one database
    ort = write(tmp_path / "profile.json", '[\n{"cat" : "Session","pid" :1,"ph" : "X"}\n]')
    assert detect_format(ort) == "ort_profile"


def test_detection_is_by_content_not_name(tmp_path):
    renamed = tmp_path / "trace.bin"
    shutil.copy(V1_CSV, renamed)
    assert detect_format(renamed) == "rocprof_v1"
    misnamed = tmp_path / "x_kernel_trace.csv"
    shutil.copy(COUNTER_CSV, misnamed)
    assert detect_format(misnamed) == "rocprofv3_csv"
    counts = collect_trace(misnamed, "s1", tmp_path / "out")
    assert counts == {"counters": 530}


def test_unreadable_inputs_raise_naming_the_file(tmp_path):
    truncated = tmp_path / "908_results.json.gz"
    truncated.write_bytes(JSON_GZ.read_bytes()[: JSON_GZ.stat().st_size // 2])
    empty = write(tmp_path / "empty_kernel_trace.csv", "")
    binary = tmp_path / "random.dat"
    binary.write_bytes(bytes(range(256)) * 64)
    unknown = write(tmp_path / "stats.csv", '"Name","Calls","TotalDurationNs"\n"k",1,2\n')
    for path in (truncated, empty, binary, unknown, tmp_path / "missing.db"):
        with pytest.raises(AacoInputError) as error:
            detect_format(path)
        assert str(path) in str(error.value)
    assert "rocprofv3 CSV" in str(pytest.raises(AacoInputError, detect_format, binary).value)


def test_ort_profile_alone_is_no_device_trace(tmp_path):
    ort = write(tmp_path / "profile.json", '[{"cat": "Session", "ph": "X", "name": "model_run"}]')
    with pytest.raises(AacoInputError, match="ONNX Runtime profile alone"):
        collect_trace(ort, "s1", tmp_path / "out")


# --- rocprofv3 CSV ------------------------------------------------------------------------


def test_rocprofv3_csv_sample(sllm_folder, tmp_path):
    counts, tables = collected(sllm_folder, tmp_path / "out")
    assert counts == {"kernel_events": 319, "counters": 530, "agents": 4}
    # Rows keep no file order (DuckDB reads in parallel): the first dispatch is correlation 1.
    first = tables["kernel_events"].sort_by("correlation_id").slice(0, 1).to_pylist()[0]
    assert (
        first
        | {
            "source": "rocprofv3_csv",
            "category": "Kernel",
            "event_name": "__amd_rocclr_copyBuffer",
            "kernel_name": "__amd_rocclr_copyBuffer",
            "device_id": 2,
            "queue_id": 1,
            "stream_id": 1,
            "thread_id": 564735,
            "dispatch_id": 1,
            "correlation_id": 1,
            "start_ns": 71767979888694,
            "duration_ns": 71767979909654 - 71767979888694,
            "grid_size": 512,
            "workgroup_size": 512,
            "lds_bytes": 0,
            "scratch_bytes": 0,
            "vgpr_count": 16,
            "accum_vgpr_count": 0,
            "sgpr_count": 128,
            "iteration": None,
            "node_name": None,
            "op_type": None,
            "provider": None,
        }
        == first
    )
    counters = tables["counters"]
    assert len(set(counters["counter"].to_pylist())) == 5
    assert set(counters["agent"].to_pylist()) == {"Agent 2"}
    gpus = [a for a in tables["agents"].to_pylist() if a["agent_type"] == "GPU"]
    v620 = [a for a in gpus if a["name"] == "gfx1030"][0]
    assert v620["product_name"] == "AMD Radeon Pro V620"
    assert v620["compute_units"] == 72
    assert v620["wave_front_size"] == 32
    assert v620["max_clock_mhz"] == 2570
    assert json.loads(v620["details_json"])["simd_count"] == 144
    assert {a["agent_id"] for a in gpus} == {"Agent 1", "Agent 2", "Agent 3"}


V62 = (
    '"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp",'
    '"End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X",'
    '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
    '"KERNEL_DISPATCH",1,139690710949888,15,"matrixTranspose(float*, float*, int)",0,'
    "671599758568,671599825328,16,1024,4,4,1,1024,1024,1\n"
)
# ROCm 6.3 header, lower-cased to prove names are matched case-insensitively.
V63 = (
    '"kind","agent_id","queue_id","thread_id","dispatch_id","kernel_id","kernel_name",'
    '"correlation_id","start_timestamp","end_timestamp","private_segment_size",'
    '"group_segment_size","workgroup_size_x","workgroup_size_y","workgroup_size_z",'
    '"grid_size_x","grid_size_y","grid_size_z"\n'
    '"KERNEL_DISPATCH",4,1,40021,1,11,"simple_add_kernel(float*, float const*, int)",1,'
    "2060159320877,2060159329157,0,0,1024,1,1,1048576,1,1\n"
)
# rocprofiler-sdk's documentation sample (source/docs/data/kernel_trace.csv): the 18 columns
# and Stream_Id, 19 in all.
STREAM = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id",'
    '"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","Private_Segment_Size",'
    '"Group_Segment_Size","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z",'
    '"Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
    '"KERNEL_DISPATCH",2,1,1,21228,1,11,"void addition_kernel<float>(float*, float const*, '
    'float const*, int, int)",1937,2414192765353337,2414192765369494,0,0,64,1,1,1024,1024,1\n'
)
GUID = (
    '"Guid","Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id",'
    '"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","Lds_Block_Size",'
    '"Scratch_Size","Vgpr_Count","Accum_Vgpr_Count","Sgpr_Count","Workgroup_Size_X",'
    '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
    '"00006409-00d1-70d1-a5cb-b5ab88214544","KERNEL_DISPATCH","Agent 4",1,0,714789,1,3,'
    '"__omp_offloading_30_57b9f__QMnorm_modPnorm_l23",1,1678314002982197,1678314003082277,'
    "8456,0,16,0,32,256,1,1,233472,1,1\n"
)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            V62,
            {
                "kernel_name": "matrixTranspose(float*, float*, int)",
                "device_id": 1,
                "queue_id": 139690710949888,
                "correlation_id": 0,
                "dispatch_id": None,
                "thread_id": None,
                "start_ns": 671599758568,
                "duration_ns": 66760,
                "grid_size": 1024 * 1024,
                "workgroup_size": 16,
                "lds_bytes": 1024,
                "scratch_bytes": 16,
                "vgpr_count": None,
                "accum_vgpr_count": None,
            },
        ),
        (
            V63,
            {
                "kernel_name": "simple_add_kernel(float*, float const*, int)",
                "device_id": 4,
                "thread_id": 40021,
                "dispatch_id": 1,
                "correlation_id": 1,
                "duration_ns": 8280,
                "grid_size": 1048576,
                "workgroup_size": 1024,
                "lds_bytes": 0,
            },
        ),
        (
            STREAM,
            {
                "kernel_name": "void addition_kernel<float>(float*, float const*, float const*, "
                "int, int)",
                "device_id": 2,
                "queue_id": 1,
                "stream_id": 1,
                "thread_id": 21228,
                "dispatch_id": 1,
                "correlation_id": 1937,
                "duration_ns": 2414192765369494 - 2414192765353337,
                "grid_size": 1024 * 1024,
                "workgroup_size": 64,
                "lds_bytes": 0,
                "scratch_bytes": 0,
            },
        ),
        (
            GUID,
            {
                "kernel_name": "__omp_offloading_30_57b9f__QMnorm_modPnorm_l23",
                "device_id": 4,
                "stream_id": 0,
                "thread_id": 714789,
                "dispatch_id": 1,
                "start_ns": 1678314002982197,
                "duration_ns": 100080,
                "grid_size": 233472,
                "workgroup_size": 256,
                "lds_bytes": 8456,
                "scratch_bytes": 0,
                "vgpr_count": 16,
                "accum_vgpr_count": 0,
                "sgpr_count": 32,
            },
        ),
    ],
    ids=["rocm6.2", "rocm6.3-lowercase", "docs-sample-stream-id", "rocpd-convert-guid"],
)
def test_older_kernel_trace_headers(tmp_path, header, expected):
    trace = write(tmp_path / "trace" / "199_kernel_trace.csv", header)
    _, tables = collected(trace, tmp_path / "out")
    row = tables["kernel_events"].to_pylist()[0]
    assert {key: row[key] for key in expected} == expected
    assert row["event_name"] == row["kernel_name"]


@pytest.mark.parametrize(
    ("agent", "number"),
    [("Agent 2", 2), ("Agent 12", 12), ("GPU 0", 0), ("3", 3), ("Agent x", None), ("CPU", None),
     ("Agent", None), (None, None)],
)  # fmt: skip
def test_agent_id_spellings_give_the_agent_number(agent, number):
    """rocprofv3 7's "Agent N", other spellings' trailing digits, nothing for none."""
    expression = rocprofv3_csv._agent_number('"agent_id"')
    found = duckdb.sql(
        f"SELECT {expression} FROM (SELECT $a::VARCHAR AS agent_id)", params={"a": agent}
    )
    assert found.fetchall() == [(number,)]


def test_api_and_copy_traces(tmp_path):
    folder = tmp_path / "trace"
    write(
        folder / "238_hip_api_trace.csv",
        '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp",'
        '"End_Timestamp"\n"HIP_RUNTIME_API","hipLaunchKernel",238,238,5,1191916547842972,'
        "1191916548408842\n",
    )
    write(
        folder / "238_memory_copy_trace.csv",
        '"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id",'
        '"Correlation_Id","Start_Timestamp","End_Timestamp"\n"MEMORY_COPY",'
        '"MEMORY_COPY_HOST_TO_DEVICE",1,0,2,952,2414192684609085,2414192684710679\n',
    )
    write(
        folder / "197_memory_copy_trace.csv",  # ROCm 6.2: no Stream_Id, short direction names
        '"Kind","Direction","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",'
        '"Start_Timestamp","End_Timestamp"\n"MEMORY_COPY","DEVICE_TO_HOST",1,0,0,'
        "14955952733485,14955953315285\n",
    )
    counts, tables = collected(folder, tmp_path / "out")
    assert counts == {"api_calls": 1, "memory_copies": 2}
    call = tables["api_calls"].to_pylist()[0]
    assert (call["domain"], call["api_name"], call["correlation_id"]) == (
        "HIP_RUNTIME_API",
        "hipLaunchKernel",
        5,
    )
    assert (call["process_id"], call["thread_id"], call["duration_ns"]) == (238, 238, 565870)
    copies = sorted(tables["memory_copies"].to_pylist(), key=lambda r: r["start_ns"])
    assert [c["direction"] for c in copies] == ["DEVICE_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE"]
    assert (copies[1]["src_agent"], copies[1]["dst_agent"], copies[1]["bytes"]) == ("0", "2", None)
    assert copies[1]["duration_ns"] == 2414192684710679 - 2414192684609085


def test_overlapping_kernels_on_one_queue_are_kept_as_they_are(tmp_path):
    header = V62.splitlines()[0]
    rows = [
        '"KERNEL_DISPATCH",1,1,15,"a",1,1000,5000,0,0,64,1,1,64,1,1',
        '"KERNEL_DISPATCH",1,1,16,"b",2,3000,4000,0,0,64,1,1,64,1,1',  # inside "a"
        '"KERNEL_DISPATCH",1,1,17,"c",3,4500,9000,0,0,64,1,1,64,1,1',  # overlaps "a"'s end
    ]
    trace = write(tmp_path / "1_kernel_trace.csv", "\n".join([header, *rows]) + "\n")
    _, tables = collected(trace, tmp_path / "out")
    events = tables["kernel_events"]
    assert events["start_ns"].to_pylist() == [1000, 3000, 4500]
    assert events["duration_ns"].to_pylist() == [4000, 1000, 4500]


def test_a_failure_midway_leaves_no_parquet_files(tmp_path):
    folder = tmp_path / "trace"
    folder.mkdir()
    shutil.copy(KERNEL_CSV, folder / "564735_kernel_trace.csv")
    header = AGENT_CSV.read_text().splitlines()[0]
    write(folder / "564735_agent_info.csv", header + '\n0,0,"CPU",128\n')  # a cut-off row
    out = tmp_path / "out"
    with pytest.raises(AacoInputError) as error:
        collect_trace(folder, "s1", out)
    assert str(folder) in str(error.value)
    assert "564735_agent_info.csv" in str(error.value)  # which file of the folder failed
    assert list(out.rglob("*")) == []


def test_a_named_rocprofv3_csv_with_a_foreign_header_is_an_error(tmp_path):
    folder = tmp_path / "trace"
    shutil.copy(KERNEL_CSV, write(folder / "1_kernel_trace.csv", ""))
    broken = write(folder / "1_agent_info.csv", "garbage\n")
    with pytest.raises(AacoInputError) as error:
        detect_format(folder)
    assert str(broken) in str(error.value)


# --- rocprofv3 JSON -----------------------------------------------------------------------


def test_a_json_document_larger_than_the_lakes_memory_limit_loads(tmp_path, monkeypatch):
    """DuckDB parses a rocprofv3 JSON whole, in about 9 times its size (37 MB inflated here):
    the lake's limit (128 MiB here) is raised for that read, and back after. The object size
    asked for is the document's: 4 GiB asked DuckDB for 8 GiB."""
    monkeypatch.setenv("AACO_DUCKDB_MEMORY_MB", "128")
    assert rocprofv3_json.document_bytes(JSON_GZ) == 37_455_763
    with TraceLake(tmp_path / "lake.duckdb").connect(write=True) as con:
        assert load_trace(con, JSON_GZ, "big")["kernel_events"] == 43915
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "128.0 MiB"


def test_rocprofv3_json_sample(tmp_path):
    counts, tables = collected(JSON_GZ, tmp_path / "out")
    assert counts == {"kernel_events": 43915, "agents": 10}
    events = tables["kernel_events"]
    assert events["kernel_name"].null_count == 0
    assert events["correlation_id"].null_count == 0
    assert events["device_id"].null_count == 0
    assert events["accum_vgpr_count"].null_count == 0  # every symbol says (0 on this gfx950)
    assert set(events["source"].to_pylist()) == {"rocprofv3_json"}
    assert pc.min(events["duration_ns"]).as_py() >= 0
    first = events.sort_by("correlation_id").slice(0, 1).to_pylist()[0]
    assert (first["kernel_name"], first["correlation_id"], first["start_ns"]) == (
        "__amd_rocclr_copyBuffer",
        1,
        63857982592000,
    )
    assert (first["device_id"], first["process_id"], first["grid_size"]) == (2, 908, 512)
    gpus = [a for a in tables["agents"].to_pylist() if a["agent_type"] == "GPU"]
    assert len(gpus) == 8
    assert {(a["name"], a["product_name"], a["compute_units"]) for a in gpus} == {
        ("gfx950", "AMD Instinct MI350X", 256)
    }
    assert set(events["device_id"].to_pylist()) <= {int(a["agent_id"].split()[1]) for a in gpus}


# --- RPD ----------------------------------------------------------------------------------


def test_rpd_sample(rpd_file, tmp_path):
    counts, tables = collected(rpd_file, tmp_path / "out")
    assert counts["kernel_events"] == 8948  # 1,228 launched kernels + 7,720 graph-launch tasks
    assert counts["memory_copies"] == 1176
    assert counts["telemetry"] == 81
    kernels, calls = tables["kernel_events"], tables["api_calls"]
    assert kernels["kernel_name"].null_count == 0
    launches = {r["correlation_id"]: r["api_name"] for r in calls.to_pylist()}
    linked = [launches.get(c) for c in kernels["correlation_id"].to_pylist()]
    assert None not in linked
    assert {"hipLaunchKernel", "hipExtModuleLaunchKernel", "hipGraphLaunch"} == set(linked)
    telemetry = tables["telemetry"].to_pylist()
    assert {(t["source"], t["metric"], t["unit"], t["pass"]) for t in telemetry} == {
        ("rpd_monitor", "gfx_clock", "MHz", "other")
    }
    # rocm-smi's GPUs 0-7, named in the kernels' numbering (gpuId 2 is GPU 0: rpd.py).
    assert {t["device"] for t in telemetry} == {f"gpu{i}" for i in range(2, 10)}


def test_rpd_gzipped_reads_like_the_plain_file(rpd_file, tmp_path):
    plain, _ = collected(rpd_file, tmp_path / "plain")
    zipped, _ = collected(RPD_GZ, tmp_path / "zipped")
    assert plain == zipped


# --- rocprof v1 ---------------------------------------------------------------------------


def test_rocprof_v1_sample(tmp_path):
    counts, tables = collected(V1_CSV, tmp_path / "out")
    assert counts == {"kernel_events": 1004}
    # Rows keep no file order (DuckDB reads CSVs in parallel): find them by dispatch index.
    rows = sorted(tables["kernel_events"].to_pylist(), key=lambda r: r["dispatch_id"])
    assert (
        rows[0]
        | {
            "source": "rocprof_v1",
            "category": "Kernel",
            "event_name": "test_function_kernel",
            "kernel_name": "test_function_kernel",
            "dispatch_id": 0,
            "device_id": 8,
            "queue_id": 0,
            "process_id": 1580852,
            "thread_id": 1580852,
            "grid_size": 134217728,
            "workgroup_size": 256,
            "lds_bytes": 0,
            "scratch_bytes": 0,
            "vgpr_count": 16,
            "accum_vgpr_count": 0,
            "sgpr_count": 32,
            "start_ns": 2001401019948822,
            "duration_ns": 1087688,
            "correlation_id": None,
        }
        == rows[0]
    )
    fill = rows[2]
    assert fill["event_name"] == "__amd_rocclr_fillBufferAligned.kd"
    assert fill["kernel_name"] == "__amd_rocclr_fillBufferAligned"
    accum = {r["kernel_name"]: r["accum_vgpr_count"] for r in rows}
    assert accum["check_kernel"] == 4  # the one kernel of the run with AGPRs (accum_vgpr)


def test_rocprof_v1_clone_suffix_is_cleaned(tmp_path):
    header = V1_CSV.read_text().splitlines()[0]
    row = (
        '0,"void k<float>(float*, int) [clone .kd]",8,0,0,1,1,64,64,0,0,8,0,16,64,"0x0","0x1",'
        "1,2,5,6,3"
    )
    trace = write(tmp_path / "results.csv", f"{header}\n{row}\n")
    _, tables = collected(trace, tmp_path / "out")
    event = tables["kernel_events"].to_pylist()[0]
    assert event["event_name"] == "void k<float>(float*, int) [clone .kd]"
    assert event["kernel_name"] == "void k<float>(float*, int)"
    assert (event["start_ns"], event["duration_ns"]) == (2, 3)


# --- rocpd (synthetic: no real ROCm 7 database in the samples) ----------------------------


def test_rocpd_database(rocpd_db, tmp_path):
    counts, tables = collected(rocpd_db, tmp_path / "out")
    assert counts == {
        "kernel_events": 2,
        "api_calls": 2,
        "memory_copies": 1,
        "counters": 2,
        "agents": 2,
    }
    kernel = tables["kernel_events"].to_pylist()[0]
    assert (
        kernel
        | {
            "source": "rocpd",
            "category": "Kernel",
            "kernel_name": "gemm",
            "device_id": 1,
            "queue_id": 3,
            "dispatch_id": 1,
            "correlation_id": 21,
            "process_id": 10,
            "thread_id": 11,
            "start_ns": 1000,
            "duration_ns": 500,
            "grid_size": 8192,
            "workgroup_size": 256,
            "lds_bytes": 1024,
            "sgpr_count": 96,
            "vgpr_count": 128,
            "accum_vgpr_count": 64,
        }
        == kernel
    )
    calls = tables["api_calls"].to_pylist()
    assert {c["correlation_id"] for c in calls} == {21, 22}
    assert calls[0]["domain"] == "HIP_RUNTIME_API_EXT"
    copy = tables["memory_copies"].to_pylist()[0]
    assert (copy["direction"], copy["bytes"], copy["src_agent"], copy["dst_agent"]) == (
        "MEMORY_COPY_HOST_TO_DEVICE",
        65536,
        "Agent 0",
        "Agent 1",
    )
    counters = tables["counters"].to_pylist()
    assert {(c["counter"], c["value"], c["agent"]) for c in counters} == {
        ("SQ_WAVES", 64.0, "Agent 1"),
        ("GRBM_GUI_ACTIVE", 1234.0, "Agent 1"),
    }
    gpu = [a for a in tables["agents"].to_pylist() if a["agent_type"] == "GPU"][0]
    assert (gpu["agent_id"], gpu["node_id"], gpu["name"], gpu["compute_units"]) == (
        "Agent 1",
        2,
        "gfx942",
        304,
    )
    assert gpu["max_clock_mhz"] == 2100.0


def test_a_kernels_view_carrying_its_registers_keeps_them(rocpd_db, tmp_path):
    """rocprofiler-sdk's later kernels view carries the registers itself, under its own names
    (`S.arch_vgpr_count AS vgpr_count, S.accum_vgpr_count, S.sgpr_count`): read, not dropped
    to "occupancy unknown" for a name."""
    with sqlite3.connect(rocpd_db) as db:
        for column in ("vgpr_count", "accum_vgpr_count", "sgpr_count"):
            db.execute(f"ALTER TABLE kernels ADD COLUMN {column} INTEGER")
        db.execute("UPDATE kernels SET vgpr_count = 96, accum_vgpr_count = 32, sgpr_count = 80")
        db.execute("DELETE FROM rocpd_info_kernel_symbol")  # the view alone must say them
    _, tables = collected(rocpd_db, tmp_path / "out")
    kernel = tables["kernel_events"].to_pylist()[0]
    assert (kernel["vgpr_count"], kernel["accum_vgpr_count"], kernel["sgpr_count"]) == (96, 32, 80)
    assert kernel["lds_bytes"] == 1024


def _counter_run(folder: Path, edit) -> Path:
    """The sLLM capture's three files, its counter file rewritten by `edit(rows)`."""
    folder.mkdir()
    for sample in (KERNEL_CSV, COUNTER_CSV, AGENT_CSV):
        shutil.copy(sample, folder / sample.name.removeprefix("sllm_r9700_decode_attn_"))
    counters = folder / COUNTER_CSV.name.removeprefix("sllm_r9700_decode_attn_")
    rows = list(csv.reader(counters.read_text().splitlines()))
    with open(counters, "w", newline="") as handle:
        csv.writer(handle).writerows(edit(rows))
    return folder


def _value(value: str):
    def edit(rows):
        column = rows[0].index("Counter_Value")
        for row in rows[1:3]:
            row[column] = value
        return rows

    return edit


def _renamed(rows):
    rows[0][rows[0].index("Counter_Name")] = "Counter"
    return rows


def _twice(rows):
    return [rows[0] + ["Counter_Name"], *(row + ["X"] for row in rows[1:])]


@pytest.mark.parametrize(
    "edit, said",
    [
        (_renamed, "named a counter_collection CSV, but its header has no counter_name"),
        (_twice, "the CSV header names 'counter_name' twice"),
        (_value("nan"), "2 counter value(s) are not finite, non-negative counts"),
        (_value("inf"), "2 counter value(s) are not finite, non-negative counts"),
        (_value("-5"), "2 counter value(s) are not finite, non-negative counts"),
    ],
    ids=["renamed column", "column twice", "nan", "inf", "negative"],
)
def test_an_unusable_counter_file_is_refused_in_one_line(tmp_path, edit, said):
    """Never counter rows loaded as kernels (a renamed Counter_Name made the file read as a
    kernel trace), never a DuckDB binder message, never NaN stored as a count."""
    run = _counter_run(tmp_path / "run", edit)
    with pytest.raises(AacoInputError) as error:
        collect_trace(run, "s1", tmp_path / "out")
    message = str(error.value)
    assert said in message and "\n" not in message, message
    assert "Binder Error" not in message and "Fix:" in message
    assert not list((tmp_path / "out").glob("*.parquet"))  # nothing half-written

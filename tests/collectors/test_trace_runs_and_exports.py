"""What a trace file is, said before any work, and what one file of a run brings with it.

- rocmProfileData's rpd2tracing export (a Chrome trace) and an ONNX Runtime profile alone are
  refused for what they are, before the copy and load stages, with a fix a user can follow.
- RPD's FillBuffer blit is a kernel, as the same blit is in rocprof v1 and rocpd traces, and
  RPD telemetry is named after the device its kernels carry.
- One rocprofv3 `*_kernel_trace.csv` brings its run's agent info and API trace beside it, or
  says what their absence costs.

Real samples (../shared/samples/profilers) throughout; what no sample holds (an rpd2tracing
export, a FillBuffer op, this run's HIP API trace) is built in tmp from the real sample's rows,
in the format its tool writes.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aaco_pipelines.analysis.envelope.choice import session_envelope
from aaco_pipelines.collectors.kernel_families import kernel_family
from aaco_pipelines.collectors.traces import collect_trace, detect_format
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED

SAMPLES = SHARED / "samples" / "profilers"
RUN = "sllm_r9700_decode_attn_564735_"
KERNEL_CSV = SAMPLES / f"{RUN}kernel_trace.csv"
AGENT_CSV = SAMPLES / f"{RUN}agent_info.csv"
COUNTER_CSV = SAMPLES / f"{RUN}counter_collection.csv"
V1_CSV = SAMPLES / "hpctraining_mi250_laplacian_rocprofv1_results.csv"
INTERNAL_NAMES = ("collectors.", "read_ort_profile", "ort_profile.", "aaco_pipelines")


def collected(trace: Path, out: Path) -> tuple[dict, dict]:
    counts = collect_trace(trace, "s1", out)
    return counts, {name: pq.read_table(out / f"{name}.parquet") for name in counts}


def nothing_was_done(paths) -> bool:
    """No TraceLake, no session folder, no staged copy: the refusal came before any work."""
    return not paths.tracelake.exists() and not [
        p for p in paths.sessions.rglob("*") if p.is_file()
    ]


# --- rpd2tracing's export, written as tools/rpd2tracing.py writes it --------------------------


# rpd2tracing's lines, character for character (its %-formats as str.format templates).
_PROCESS = ',{{"name": "process_name", "ph": "M", "pid":"{0}","args":{{"name":"GPU{0}"}}}}'
_PROCESS_ORDER = (
    ',{{"name": "process_sort_index", "ph": "M", "pid":"{0}","args":{{"sort_index":"{1}"}}}}'
)
_THREAD = ',{{"name":"thread_name","ph":"M","pid":"{0}","tid":"{1}","args":{{"name":"Hip {1}"}}}}'
_OP = (
    ',{{"pid":"{0}","tid":"{1}","name":"{2}","ts":"{3}","dur":"{4}","ph":"X",'
    '"args":{{"desc":"{5}"}}}}'
)


def rpd2tracing_export(rpd: Path, target: Path, *, form: str = "array", ops: int = 200) -> Path:
    """The Chrome trace rpd2tracing writes from an RPD database (rocmProfileData
    tools/rpd2tracing.py: `[ {}` or, with --format object, `{"traceEvents": [ {}`, then a
    process per GPU, a thread per host thread, and one "X" event per op), from the first `ops`
    ops of `rpd`."""
    with sqlite3.connect(rpd) as db:
        gpus = db.execute("SELECT DISTINCT gpuId FROM rocpd_op").fetchall()
        threads = db.execute("SELECT DISTINCT pid, tid FROM rocpd_api LIMIT 4").fetchall()
        rows = db.execute(
            "SELECT A.string, B.string, gpuId, queueId, rocpd_op.start/1000, "
            "(rocpd_op.end-rocpd_op.start)/1000 FROM rocpd_op "
            "JOIN rocpd_string A ON A.id = rocpd_op.opType_id "
            "JOIN rocpd_string B ON B.id = rocpd_op.description_id LIMIT ?",
            [ops],
        ).fetchall()
    lines = ['{"traceEvents": [ {}' if form == "object" else "[ {}"]
    for (gpu,) in gpus:
        lines += [_PROCESS.format(gpu), _PROCESS_ORDER.format(gpu, gpu + 1000000)]
    lines += [_THREAD.format(pid, tid) for pid, tid in threads]
    for op_type, description, gpu, queue, start, duration in rows:
        lines.append(_OP.format(gpu, queue, description or op_type, start, duration, op_type))
    lines.append("]")
    if form == "object":
        lines.append("} ")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # what the tool writes is valid JSON
    if target.name.endswith(".gz"):
        target.write_bytes(gzip.compress(text.encode()))
    else:
        target.write_text(text)
    return target


@pytest.mark.parametrize("name", ["mytrace.json", "mytrace_object.json", "mytrace.json.gz"])
def test_an_rpd2tracing_export_is_named_and_sent_back_to_its_database(rpd_file, tmp_path, name):
    form = "object" if "object" in name else "array"
    export = rpd2tracing_export(rpd_file, tmp_path / name, form=form)
    with pytest.raises(AacoInputError) as error:
        detect_format(export)
    assert "Chrome trace exported by rpd2tracing" in error.value.problem
    assert ".rpd database it came from" in error.value.fix
    assert not any(internal in str(error.value) for internal in INTERNAL_NAMES)


def test_an_rpd2tracing_export_is_refused_before_any_work(rpd_file, aaco_paths, tmp_path):
    export = rpd2tracing_export(rpd_file, tmp_path / "mytrace.json")
    with pytest.raises(AacoInputError, match="rpd2tracing") as error:
        ingest_trace(export, aaco_paths)
    assert error.value.path == str(export)
    assert nothing_was_done(aaco_paths)


def test_an_rpd_beside_its_export_is_read_as_the_rpd(rpd_file, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(rpd_file, folder / "mytrace.rpd")
    rpd2tracing_export(rpd_file, folder / "mytrace.json")
    assert detect_format(folder) == "rpd"


def test_an_onnx_runtime_profile_alone_is_refused_before_any_work(aaco_paths, tmp_path):
    profile = tmp_path / "onnxruntime_profile__2024.json"
    profile.write_text('[\n{"cat" : "Session","pid" :1,"ph" : "X","name" : "model_run"}\n]')
    with pytest.raises(AacoInputError) as error:
        ingest_trace(profile, aaco_paths)
    assert "ONNX Runtime profile alone" in error.value.problem
    assert "aaco run" in error.value.fix and "folder" in error.value.fix
    assert not any(internal in str(error.value) for internal in INTERNAL_NAMES)
    assert nothing_was_done(aaco_paths)


def test_refusals_say_what_ingest_really_accepts(tmp_path):
    unknown = tmp_path / "random.dat"
    unknown.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(AacoInputError) as error:
        detect_format(unknown)
    assert "an ONNX Runtime profile JSON" not in error.value.fix  # not a trace of its own
    assert "ONNX Runtime profile (*onnxruntime_profile*.json) only beside" in error.value.fix


def test_another_tools_chrome_trace_is_not_taken_for_an_onnx_runtime_profile(tmp_path):
    kineto = tmp_path / "trace.json"  # a PyTorch profiler trace in Chrome's array form
    kineto.write_text('[{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1, "dur": 2}]')
    with pytest.raises(AacoInputError, match="not a trace format this reader knows"):
        detect_format(kineto)


# --- RPD: FillBuffer and device names -----------------------------------------------------------


@pytest.fixture(scope="module")
def rpd_with_a_fill(rpd_file, tmp_path_factory) -> Path:
    """The real vLLM trace with one hipMemsetAsync and the FillBuffer op it caused, written as
    rpd_tracer writes one (rocmProfileData's matmul example, matmul_result.rpd, op 19:
    opType 'FillBuffer', description '', on the kernels' gpuId and queue 0)."""
    path = tmp_path_factory.mktemp("fill") / "mytrace.rpd"
    shutil.copy(rpd_file, path)
    with sqlite3.connect(path) as db:

        def string(text: str) -> int:
            found = db.execute("SELECT id FROM rocpd_string WHERE string = ?", [text]).fetchone()
            if found:
                return found[0]
            return db.execute("INSERT INTO rocpd_string (string) VALUES (?)", [text]).lastrowid

        pid, tid, start = db.execute("SELECT pid, tid, max(end) FROM rocpd_api").fetchone()
        api = db.execute(
            "INSERT INTO rocpd_api (pid, tid, start, end, apiName_id, args_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [pid, tid, start + 1_000, start + 15_000, string("hipMemsetAsync"), string("")],
        ).lastrowid
        gpu = db.execute("SELECT min(gpuId) FROM rocpd_op").fetchone()[0]
        op = db.execute(
            "INSERT INTO rocpd_op (gpuId, queueId, sequenceId, completionSignal, start, end, "
            "description_id, opType_id) VALUES (?, 0, 0, '', ?, ?, ?, ?)",
            [gpu, start + 20_000, start + 25_440, string(""), string("FillBuffer")],
        ).lastrowid
        db.execute("INSERT INTO rocpd_api_ops (api_id, op_id) VALUES (?, ?)", [api, op])
    return path


def test_rpd_fill_buffer_is_a_kernel_like_the_same_blit_elsewhere(rpd_with_a_fill, tmp_path):
    counts, tables = collected(rpd_with_a_fill, tmp_path / "out")
    assert counts["kernel_events"] == 8948 + 1  # the sample's kernels and the fill
    assert counts["memory_copies"] == 1176  # not a copy either
    kernels = tables["kernel_events"].to_pylist()
    fills = [k for k in kernels if k["kernel_name"] == "FillBuffer"]
    assert len(fills) == 1
    fill = fills[0]
    assert (fill["category"], fill["duration_ns"], fill["device_id"]) == ("Kernel", 5440, 2)
    calls = {c["correlation_id"]: c["api_name"] for c in tables["api_calls"].to_pylist()}
    assert calls[fill["correlation_id"]] == "hipMemsetAsync"
    # rocprof v1 (and rocpd) name the same blit __amd_rocclr_fillBufferAligned: one family.
    v1_fill = "__amd_rocclr_fillBufferAligned"
    assert v1_fill in V1_CSV.read_text()
    assert fill["kernel_family"] == kernel_family(v1_fill) == "copy"


def test_rpd_telemetry_is_named_after_the_device_its_kernels_carry(rpd_file, tmp_path):
    """The sample's kernels carry gpuId 2; of the eight GPUs rocm-smi sampled, only its GPU 0
    left the idle clock while they ran: that GPU's telemetry is the kernels' device's."""
    _, tables = collected(rpd_file, tmp_path / "out")
    devices = set(tables["kernel_events"]["device_id"].to_pylist())
    assert devices == {2}
    peak: dict[str, float] = {}
    for sample in tables["telemetry"].to_pylist():
        peak[sample["device"]] = max(peak.get(sample["device"], 0.0), sample["value"])
    assert len(peak) == 8
    kernels_gpu = peak.pop(f"gpu{devices.pop()}")
    assert kernels_gpu > 1000  # MHz: the GPU that worked
    assert max(peak.values()) < 200  # every other GPU stayed idle


# --- one rocprofv3 CSV file and its run beside it ----------------------------------------------


def hip_api_trace(kernel_trace: Path, target: Path, launches: int = 20) -> Path:
    """A HIP API trace of the run (rocprofv3's hip_api_trace.csv columns), one hipLaunchKernel
    per kernel of the first `launches` dispatches of the real kernel trace, sharing each
    dispatch's correlation id and ending 2 µs before it starts."""
    with open(kernel_trace, newline="") as handle:
        dispatches = list(csv.DictReader(handle))[:launches]
    with open(target, "w", newline="") as handle:
        out = csv.writer(handle, quoting=csv.QUOTE_NONNUMERIC)
        out.writerow(
            ["Domain", "Function", "Process_Id", "Thread_Id", "Correlation_Id",
             "Start_Timestamp", "End_Timestamp"]
        )  # fmt: skip
        for d in dispatches:
            start = int(d["Start_Timestamp"])
            out.writerow(
                ["HIP_RUNTIME_API", "hipLaunchKernel", 564735, int(d["Thread_Id"]),
                 int(d["Correlation_Id"]), start - 7_000, start - 2_000]
            )  # fmt: skip
    return target


@pytest.fixture
def run_folder(tmp_path) -> Path:
    """The real run's kernel trace, agent info and counters, and its HIP API trace, as
    rocprofv3 names them, with a copy of another run beside them."""
    folder = tmp_path / "rocprof"
    folder.mkdir()
    for sample in (KERNEL_CSV, AGENT_CSV, COUNTER_CSV):
        shutil.copy(sample, folder / sample.name.removeprefix("sllm_r9700_decode_attn_"))
    hip_api_trace(KERNEL_CSV, folder / "564735_hip_api_trace.csv")
    shutil.copy(AGENT_CSV, folder / "999_agent_info.csv")  # another run's: not read
    return folder


def test_one_kernel_trace_brings_its_runs_files(run_folder, tmp_path):
    counts, tables = collected(run_folder / "564735_kernel_trace.csv", tmp_path / "out")
    assert counts == {"kernel_events": 319, "api_calls": 20, "counters": 530, "agents": 4}
    gpus = {a["agent_id"]: a["name"] for a in tables["agents"].to_pylist()}
    assert gpus["Agent 2"] == "gfx1201"  # the R9700, where every kernel ran


def test_an_ingested_kernel_trace_names_its_gpu_and_keeps_its_run(run_folder, aaco_paths):
    said: list[str] = []
    bundle = ingest_trace(
        run_folder / "564735_kernel_trace.csv", aaco_paths, complete=True, on_progress=said.append
    )
    assert not [line for line in said if "agent_info" in line]  # nothing missing to say
    lake = TraceLake(aaco_paths.tracelake)
    choice = session_envelope(lake, bundle.session_id)
    assert choice.source == "datasheet" and choice.agent.arch == "gfx1201"
    raw = sorted(p.name for p in (bundle.path / "raw").iterdir())
    assert raw == [
        "564735_agent_info.csv",
        "564735_counter_collection.csv",
        "564735_hip_api_trace.csv",
        "564735_kernel_trace.csv",
    ]
    counts = load_session(lake, bundle)  # reloaded from the bundle's raw copy alone
    assert (counts["agents"], counts["api_calls"], counts["kernel_events"]) == (4, 20, 320)


def test_a_kernel_trace_alone_says_what_is_missing_and_what_it_costs(aaco_paths, tmp_path):
    trace = tmp_path / "alone" / "564735_kernel_trace.csv"
    trace.parent.mkdir()
    shutil.copy(KERNEL_CSV, trace)
    said: list[str] = []
    ingest_trace(trace, aaco_paths, on_progress=said.append)
    missing = [line for line in said if "564735_agent_info.csv" in line]
    assert len(missing) == 1
    line = missing[0]
    assert "564735_hip_api_trace.csv" in line
    assert "datasheet envelope" in line and "launched" in line
    assert "\n" not in line


def test_a_link_out_of_the_folder_among_a_runs_files_is_refused(run_folder, tmp_path):
    outside = tmp_path / "elsewhere.csv"
    shutil.copy(AGENT_CSV, outside)
    link = run_folder / "564735_agent_info.csv"
    link.unlink()
    os.symlink(outside, link)
    with pytest.raises(AacoInputError, match="link out of the trace's folder") as error:
        collect_trace(run_folder / "564735_kernel_trace.csv", "s1", tmp_path / "out")
    assert error.value.path == str(link)

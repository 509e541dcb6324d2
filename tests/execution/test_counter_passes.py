"""`aaco run --counters`: hardware counters in passes that fit the GPU's counter blocks, each a
run of its own under `rocprofv3 --pmc`, never in the latency figures.

No AMD GPU here: the command lines are checked against rocprofv3's documented syntax, and the
end-to-end run uses tests/fake_rocprofv3/rocprofv3 (first on PATH), which parses that syntax,
runs the measuring process and writes the real recorded sLLM rocprofv3 output (gfx1201) of the
counters each pass asked for.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.collectors.traces import collect_trace
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution import counter_passes, environment, runner
from aaco_pipelines.execution.amd_gpus import gfx_name
from aaco_pipelines.execution.counter_passes import (
    BLOCK_REGISTERS,
    counter_block,
    gpu_architecture,
    split_into_passes,
    trace_output_format,
)
from aaco_pipelines.execution.gpu_counters import counters_for
from aaco_pipelines.execution.runner import measuring_plan
from aaco_pipelines.registry.sidecar import parse_sidecar
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.collectors.test_trace_readers import ROCPD_SCHEMA
from tests.helpers import SHARED, TESTS, add_model

ARCHITECTURES = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")
SAMPLES = SHARED / "samples" / "profilers"
SAMPLE_COUNTERS = SAMPLES / "sllm_r9700_decode_attn_564735_counter_collection.csv"
FAKE_ROCPROFV3 = TESTS / "fake_rocprofv3"


def fits(passes, gfx: str) -> bool:
    """Every pass needs no more registers of a block than `gfx` has."""
    registers = BLOCK_REGISTERS[gfx]
    return all(
        count <= registers.get(block, 1)
        for one in passes
        for block, count in Counter(counter_block(c, gfx) for c in one).items()
    )


# --- the split ------------------------------------------------------------------------------


@pytest.mark.parametrize("gfx", ARCHITECTURES)
def test_each_architectures_counter_set_splits_into_passes_that_fit(gfx):
    wanted = counters_for(gfx)
    assert wanted, f"no counter set for {gfx}"
    unknown = {c for c in wanted if counter_block(c, gfx) not in BLOCK_REGISTERS[gfx]}
    assert not unknown, f"counters of blocks the {gfx} table lacks: {unknown}"
    passes = split_into_passes(wanted, gfx)
    assert fits(passes, gfx)
    flat = [c for one in passes for c in one]
    assert sorted(flat) == sorted(set(wanted))  # every counter once
    per_block = Counter(counter_block(c, gfx) for c in set(wanted))
    fewest = max(math.ceil(n / BLOCK_REGISTERS[gfx][b]) for b, n in per_block.items())
    assert len(passes) == fewest


@pytest.mark.parametrize("gfx", ARCHITECTURES)
def test_a_large_set_takes_the_fewest_passes_its_busiest_block_allows(gfx):
    l2 = "TCC" if gfx.startswith("gfx9") else "GL2C"
    sq = [f"SQ_C{i}" for i in range(19)]  # 8 registers: 3 passes
    caches = [f"{l2}_C{i}" for i in range(5)]  # 4 registers: 2 passes
    wanted = [*sq, *caches, "GRBM_COUNT", "GRBM_GUI_ACTIVE", "SQ_C0"]  # a repeat counts once
    passes = split_into_passes(wanted, gfx)
    assert len(passes) == 3 and fits(passes, gfx)
    assert passes[0] == (*sq[:8], *caches[:4], "GRBM_COUNT", "GRBM_GUI_ACTIVE")
    assert passes[2] == tuple(sq[16:])
    assert split_into_passes(wanted, gfx) == passes  # deterministic


def test_blocks_are_the_name_prefix_and_unknown_ones_get_a_pass_of_their_own():
    assert counter_block("TCC_EA0_RDREQ_sum", "gfx942") == "TCC"
    assert counter_block("TCC_HIT[3]", "gfx90a") == "TCC"
    assert counter_block("SQC_ICACHE_HITS", "gfx942") == "SQ"  # gfx9 reads SQC through SQ
    assert counter_block("SQC_ICACHE_HITS", "gfx1201") == "SQC"  # gfx12 has an SQC block
    passes = split_into_passes(["SQ_WAVES", "MeanOccupancy", "GPUBusy"], "gfx942")
    assert passes == (("SQ_WAVES",), ("MeanOccupancy",), ("GPUBusy",))


# --- the command lines ----------------------------------------------------------------------


def test_counter_passes_follow_the_profiled_pass_with_documented_pmc_command_lines(tmp_path):
    request = tmp_path / "request.json"
    measuring = [sys.executable, "-m", "aaco_pipelines.execution.measuring_process"]
    calls = measuring_plan(
        request,
        "/opt/rocm/bin/rocprofv3",
        tmp_path / "rocprof",
        "rocpd",
        (("SQ_WAVES", "SQ_INSTS_VALU"), ("GL2C_EA_RDREQ_32B",)),
    )
    assert [c.passes for c in calls] == ["measured", "profiled", "counters_1", "counters_2"]
    assert calls[1].command[4:6] == ["--output-format", "rocpd"]  # the same format for all
    assert calls[2].command == [
        "/opt/rocm/bin/rocprofv3",
        "--pmc",
        "SQ_WAVES",
        "SQ_INSTS_VALU",
        "--output-format",
        "rocpd",
        "--output-directory",
        str(tmp_path / "rocprof" / "pmc_1"),
        "--output-file",
        "counters",
        "--",
        *measuring,
        str(request),
        "counters_1",
    ]
    assert calls[3].command[1:3] == ["--pmc", "GL2C_EA_RDREQ_32B"]
    assert calls[3].command[6] == str(tmp_path / "rocprof" / "pmc_2")
    untraced = measuring_plan(request, None, tmp_path, "csv", ((("SQ_WAVES",),)))
    assert [c.passes for c in untraced] == ["all"]  # no rocprofv3: no counter passes either


@pytest.mark.parametrize(
    ("version", "expected"),
    [("7.0.2", "rocpd"), ("7.1.0-38", "rocpd"), ("6.4.1", "csv"), ("6.2.0", "csv"), (None, "csv")],
)
def test_rocpd_from_rocm_7_on_and_csv_before(monkeypatch, version, expected):
    monkeypatch.setattr(environment, "rocm_version", lambda: (version, "the test"))
    output_format, why = trace_output_format()
    assert output_format == expected and (version or "unknown") in why


def test_the_gpu_architecture_is_read_from_the_kfd_topology(tmp_path):
    for node, simds, version in (("0", 0, 0), ("1", 416, 90010), ("2", 128, 120001)):
        (tmp_path / node).mkdir()  # node 0 is the CPU: no SIMDs
        (tmp_path / node / "properties").write_text(
            f"cpu_cores_count 8\nsimd_count {simds}\ngfx_target_version {version}\n"
        )
    assert gpu_architecture(tmp_path) == ("gfx90a", "KFD topology node 1")
    assert [gfx_name(v) for v in (90402, 90500, 110000, 120001, 100300)] == [
        "gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1030",
    ]  # fmt: skip
    gfx, why = gpu_architecture(tmp_path / "absent")
    assert gfx is None and "no KFD topology" in why


def test_the_sidecar_can_ask_for_counters(tmp_path):
    path = tmp_path / "m.yaml"
    assert parse_sidecar({"counters": True}, path).counters is True
    assert parse_sidecar({}, path).counters is False
    with pytest.raises(AacoInputError) as err:
        parse_sidecar({"counters": "yes"}, path)
    assert "counters must be true or false" in str(err.value)


# --- rocpd: every pass's database is read ---------------------------------------------------


def rocpd_database(path: Path, counters: list[tuple[str, float]]) -> None:
    """A rocpd database of the documented views: two kernels, and these counters of the first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.executescript(ROCPD_SCHEMA)
        db.executemany(
            'INSERT INTO kernels (guid, name, pid, agent_log_index, dispatch_id, start, "end") '
            "VALUES ('g', 'gemm', 10, 1, ?, ?, ?)",
            [(1, 1_000, 1_500), (2, 2_000, 2_300)],
        )
        db.executemany(
            "INSERT INTO counters_collection (guid, dispatch_id, correlation_id, kernel_name, "
            "agent_log_index, counter_name, value) VALUES ('g', 1, 21, 'gemm', 1, ?, ?)",
            counters,
        )


def test_the_counters_of_every_rocpd_pass_are_read_and_the_kernels_once(tmp_path):
    trace = tmp_path / "rocprof"
    rocpd_database(trace / "trace_results.db", [])
    rocpd_database(trace / "pmc_1" / "counters_results.db", [("SQ_WAVES", 64.0)])
    rocpd_database(trace / "pmc_2" / "counters_results.db", [("GL2C_EA_RDREQ_32B", 7.0)])
    counts = collect_trace(trace, "s1", tmp_path / "out")
    assert counts["kernel_events"] == 2  # the traced pass's; a counter pass's are not added
    assert counts["counters"] == 2
    rows = pq.read_table(tmp_path / "out" / "counters.parquet").to_pylist()
    assert {(r["counter"], r["value"]) for r in rows} == {
        ("SQ_WAVES", 64.0),
        ("GL2C_EA_RDREQ_32B", 7.0),
    }


# --- end to end -----------------------------------------------------------------------------


def session_folder(paths) -> Path:
    (folder,) = paths.sessions.glob("2*/*")
    return folder


def test_aaco_run_counters_runs_each_pass_under_the_fake_rocprofv3(
    aaco_paths, monkeypatch, tmp_path, capsys
):
    log = tmp_path / "rocprofv3.jsonl"
    monkeypatch.setenv("PATH", f"{FAKE_ROCPROFV3}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ROCPROFV3_SAMPLES", str(SAMPLES))
    monkeypatch.setenv("FAKE_ROCPROFV3_LOG", str(log))
    monkeypatch.setattr(runner, "amd_gpu_visible", lambda: True)
    monkeypatch.setattr(counter_passes, "gpu_architecture", lambda: ("gfx1201", "the test"))
    monkeypatch.setattr(environment, "rocm_version", lambda: ("6.4.1", "the test"))
    model = add_model(aaco_paths, "tiny", models.tiny_mlp())

    assert main(["run", "--model", str(model), "--counters", "--no-profile"]) == 0

    planned = split_into_passes(counters_for("gfx1201"), "gfx1201")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["pmc"] for c in calls] == [None, *([list(p)] for p in planned)]  # one per pass
    folder = session_folder(aaco_paths)
    session = json.loads((folder / "session.json").read_text())
    request = json.loads((folder / "request.json").read_text())
    assert request["counters"]["gfx"] == session["counters"]["gfx"] == "gfx1201"
    assert [p["counters"] for p in session["counters"]["passes"]] == [list(p) for p in planned]
    commands = request["counters"]["commands"]
    assert commands == session["counters"]["commands"]
    assert [command[1:] for command in commands] == [c["argv"] for c in calls[1:]]  # as run
    folders = [Path(c[c.index("--output-directory") + 1]).name for c in commands]
    assert folders == [f"pmc_{k}" for k in range(1, len(planned) + 1)]
    assert session["device_trace"]["output_format"] == "csv"
    assert "6.4.1" in session["device_trace"]["output_format_reason"]
    assert all(p["iterations"] >= 1 for p in session["counters"]["passes"])
    # The latency figures come from the measured pass only.
    latencies = json.loads((folder / "latencies.json").read_text())
    assert set(latencies) == {"warmup", "measured", "profiled"}
    assert (folder / "latencies.counters_1.json").is_file()
    lake = TraceLake(aaco_paths.tracelake)
    passes = lake.query("SELECT DISTINCT pass FROM iterations")["pass"].to_pylist()
    assert set(passes) == {"warmup", "measured", "profiled"}
    # The counters of every pass are in the TraceLake, as the sample recorded them.
    asked = {c for p in planned for c in p}
    rows = lake.query("SELECT counter, count(*) AS n FROM counters GROUP BY counter").to_pylist()
    recorded = Counter(
        line.split(",")[15].strip('"') for line in SAMPLE_COUNTERS.read_text().splitlines()[1:]
    )
    expected = {name: n for name, n in recorded.items() if name in asked}
    assert expected and {r["counter"]: r["n"] for r in rows} == expected


def test_counters_on_a_host_without_rocprofv3_are_skipped_with_the_reason(aaco_paths, capsys):
    if shutil.which("rocprofv3"):
        pytest.skip("this host has rocprofv3")
    model = add_model(aaco_paths, "tiny", models.tiny_mlp())
    assert main(["run", "--model", str(model), "--counters", "--no-profile"]) == 0
    said = [
        line for line in capsys.readouterr().err.splitlines() if "counters not collected" in line
    ]
    assert len(said) == 1 and "rocprofv3 not on PATH" in said[0]
    session = json.loads((session_folder(aaco_paths) / "session.json").read_text())
    assert session["counters"]["asked"] is True and session["counters"]["passes"] == []
    assert "rocprofv3 not on PATH" in session["counters"]["reason"]


def test_a_rocprofv3_that_writes_nothing_is_a_failed_measurement_saying_so(
    aaco_paths, monkeypatch, capsys
):
    """rocprofv3 exits 0 and leaves no trace (too old for the options, a GPU it cannot see):
    one line naming the pass and the folder, the run's evidence kept in failed/, no
    FileNotFoundError traceback when the session is collected."""
    monkeypatch.setenv("PATH", f"{FAKE_ROCPROFV3}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ROCPROFV3_SAMPLES", str(SAMPLES))
    monkeypatch.setenv("FAKE_ROCPROFV3_WRITE_NOTHING", "1")
    monkeypatch.setattr(runner, "amd_gpu_visible", lambda: True)
    monkeypatch.setattr(environment, "rocm_version", lambda: ("6.4.1", "the test"))
    model = add_model(aaco_paths, "tiny", models.tiny_mlp())
    assert main(["run", "--model", str(model), "--no-profile"]) == 2
    said = capsys.readouterr().err
    assert "rocprofv3 ran the profiled pass and wrote no trace under rocprof/" in said
    assert "Traceback" not in said and "FileNotFoundError" not in said
    assert list(aaco_paths.failed_sessions.glob("*/*")) and not list(
        aaco_paths.sessions.glob("2*/*")
    )

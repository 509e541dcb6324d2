"""Per-kernel hardware metrics from real counter captures, each figure checked by hand.

Real captures (tests/data/counters/README.md, ../shared/samples/profilers/SOURCES.md):
- gfx1201 (RDNA 4, Radeon AI PRO R9700): sLLM's rocprofv3 `--pmc` run with its kernel trace
  and agent info, ingested whole (`aaco ingest`'s path).
- gfx950 (CDNA 4, MI350X): HipKittens' rocprofv3 `--pmc SQ_INSTS_LDS SQ_LDS_BANK_CONFLICT`
  run (counter_collection.csv + agent_info.csv, no kernel trace), loaded by the trace reader.
- gfx90a (MI200) and gfx942 (MI300X): rocprofiler-compute's own test captures of `vcopy`
  (1 Mi doubles copied: 8 MiB read, 8 MiB written). Their merged pmc_perf.csv is a format aaco
  does not ingest, so the test puts its per-dispatch `_sum` counters into `counters` rows of a
  real TraceLake itself (what a rocprofv3 counter_collection.csv row would carry).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from aaco_pipelines.analysis.kernels import counter_metrics
from aaco_pipelines.analysis.kernels.counter_metrics import (
    kernel_hardware_metrics,
    kernel_hardware_summary,
)
from aaco_pipelines.collectors.traces import load_trace
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.execution import gpu_counters
from aaco_pipelines.execution.gpu_counters import (
    FAMILIES,
    SUM_SUFFIX,
    all_counters,
    counters_for,
    formulas_for,
    no_formulas_reason,
)
from aaco_pipelines.stages.ingest_trace import ingest_trace
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import DATA, SHARED

SAMPLES = SHARED / "samples" / "profilers"
SLLM = "sllm_r9700_decode_attn_564735_"
COUNTERS = DATA / "counters"


def metrics_of(lake: TraceLake, session_id: str) -> dict[int, dict]:
    with lake.connect() as con:
        table = kernel_hardware_metrics(con, session_id)
    return {row["dispatch_id"]: row for row in table.to_pylist()}


@pytest.fixture(scope="module")
def sllm_lake(tmp_path_factory) -> tuple[TraceLake, str]:
    """The gfx1201 counter run through `aaco ingest`'s own path."""
    root = tmp_path_factory.mktemp("sllm")
    folder = root / "564735"
    folder.mkdir()
    for kind in ("kernel_trace", "counter_collection", "agent_info"):
        shutil.copy(SAMPLES / f"{SLLM}{kind}.csv", folder / f"564735_{kind}.csv")
    paths = AacoPaths.from_env({"AACO_HOME": str(root / "aaco")})
    paths.registry.mkdir(parents=True)
    bundle = ingest_trace(folder, paths, name="sllm", complete=True)
    return TraceLake(paths.tracelake), bundle.session_id


def test_gfx1201_read_bytes_by_hand_and_flops_said_not_counted(sllm_lake):
    lake, session = sllm_lake
    rows = metrics_of(lake, session)
    assert len(rows) == 106  # 530 counter rows / 5 counters; dispatches 2..109 of 319 traced
    first = rows[2]
    assert (first["kernel_name"], first["device"], first["gfx"]) == (
        "ullm_paged_decode_attn_f32_kernel",
        2,
        "gfx1201",
    )
    # Dispatch 2: GL2C_EA_RDREQ_32B = 64B = 128B = 0.0 (every read counter of this run reads 0,
    # the rocprofv3-on-RDNA zero-counter problem the README names), so
    # read bytes = 32 x 0 + 64 x 0 + 128 x 0 = 0.
    assert first["hbm_read_bytes"] == 0.0
    # Duration from the kernel trace's row of dispatch 2: 71768464571743 - 71768463645053 ns.
    assert first["duration_ns"] == 926_690
    # No write, L2 or LDS counters were collected: those metrics are null and named.
    assert first["hbm_write_bytes"] is None and first["bytes_per_s"] is None
    assert "hbm_write_bytes (GL2C_EA_WRREQ, GL2C_EA_WRREQ_64B)" in first["missing"]
    assert "l2_hit_rate (GL2C_HIT, GL2C_MISS)" in first["missing"]
    # RDNA has no FLOP counters by data type: absent, said once in the note, never guessed.
    assert first["total_flops"] is None and first["fp32_flops"] is None
    assert not any("flops" in entry for entry in first["missing"])
    assert "FLOPs are not counted" in first["note"]
    assert {row["gfx"] for row in rows.values()} == {"gfx1201"}
    # Every counted dispatch found its kernel trace row (same name and start in both files).
    assert all(row["duration_ns"] > 0 for row in rows.values())


def test_gfx950_lds_bank_conflicts_by_hand_from_a_counter_only_run(tmp_path):
    """A counter run without a kernel trace: counts are there, rates need a duration."""
    lake = TraceLake(tmp_path / "lake.duckdb")
    with lake.connect(write=True) as con:
        load_trace(con, COUNTERS / "hipkittens_mi350x_ds_read_b64", "s1")
    rows = metrics_of(lake, "s1")
    assert len(rows) == 71
    micro = rows[71]  # micro_tk: SQ_LDS_BANK_CONFLICT = 1.0, SQ_INSTS_LDS = 1.0
    assert (micro["kernel_name"], micro["gfx"], micro["device"]) == (
        "micro_tk(micro_globals)",
        "gfx950",
        2,
    )
    assert micro["lds_bank_conflict_cycles"] == 1.0  # 1 x SQ_LDS_BANK_CONFLICT
    assert micro["lds_bank_conflict_rate"] is None  # SQ_LDS_IDX_ACTIVE was not collected
    assert "lds_bank_conflict_rate (SQ_LDS_IDX_ACTIVE)" in micro["missing"]
    assert "duration_ns (no kernel trace row)" in micro["missing"]
    assert micro["note"] is None  # CDNA 4 counts every metric; only counters are missing
    assert rows[1]["lds_bank_conflict_cycles"] == 0.0


def pmc_perf_lake(tmp_path: Path, capture: str) -> TraceLake:
    """A TraceLake holding a rocprofiler-compute pmc_perf.csv as counters rows (its `_sum`
    and plain SQ columns that a formula names), its dispatches as kernels, its GPU as agent 0."""
    folder = COUNTERS / capture
    lake = TraceLake(tmp_path / "lake.duckdb")
    names = set(all_counters())
    with lake.connect(write=True) as con:
        con.execute(
            "CREATE TEMP TABLE pmc AS SELECT * FROM read_csv(?, all_varchar = true)",
            [str(folder / "pmc_perf.csv")],
        )
        columns = [
            c for (c,) in con.execute("SELECT name FROM pragma_table_info('pmc')").fetchall()
        ]
        counted = [c for c in columns if c.removesuffix(SUM_SUFFIX) in names]
        for column in counted:
            con.execute(
                "INSERT INTO counters (session_id, source, dispatch_id, correlation_id, "
                "kernel_name, agent, counter, value) SELECT 's1', 'rocprof_compute', "
                f'"Dispatch_ID"::BIGINT, NULL, "Kernel_Name", \'Agent 0\', ?, "{column}"::DOUBLE '
                "FROM pmc",
                [column],
            )
        con.execute(
            "INSERT INTO kernel_events_trace (session_id, source, kernel_name, start_ns, "
            "duration_ns, device_id, dispatch_id) SELECT 's1', 'rocprof_compute', "
            '"Kernel_Name", "Start_Timestamp"::BIGINT, '
            '"End_Timestamp"::BIGINT - "Start_Timestamp"::BIGINT, 0, "Dispatch_ID"::BIGINT FROM pmc'
        )
        con.execute(
            "INSERT INTO agents (session_id, source, agent_id, agent_type, name) "
            "SELECT 's1', 'rocprof_compute', 'Agent 0', 'GPU', gpu_arch FROM read_csv(?)",
            [str(folder / "sysinfo.csv")],
        )
    return lake


def test_gfx90a_bytes_l2_and_rates_by_hand(tmp_path):
    row = metrics_of(pmc_perf_lake(tmp_path, "rocprof_compute_mi200_vcopy"), "s1")[0]
    assert row["gfx"] == "gfx90a" and row["missing"] == []
    # TCC_EA_RDREQ_sum = 131080, TCC_EA_RDREQ_32B_sum = 0:
    #   read = 32 x 0 + 64 x (131080 - 0) = 8,389,120 B (the 8 MiB vcopy reads, + 512 B)
    assert row["hbm_read_bytes"] == 8_389_120
    # TCC_EA_WRREQ_sum = 131072 = TCC_EA_WRREQ_64B_sum:
    #   write = 32 x (131072 - 131072) + 64 x 131072 = 8,388,608 B (8 MiB written)
    assert row["hbm_write_bytes"] == 8_388_608
    # End - Start = 1411987252082105 - 1411987252061945 = 20,160 ns
    assert row["duration_ns"] == 20_160
    # (8,389,120 + 8,388,608) B / 20,160e-9 s = 8.3223e11 B/s (832 GB/s of MI210's 1638)
    assert row["bytes_per_s"] == pytest.approx(16_777_728 / 20_160e-9)
    # TCC_HIT_sum = 73037, TCC_MISS_sum = 131079: 73037 / 204116 = 0.3578
    assert row["l2_hit_rate"] == pytest.approx(73_037 / 204_116)
    # A copy does no arithmetic: every VALU and MFMA counter of the capture is 0.
    assert row["total_flops"] == 0 and row["flops_per_s"] == 0
    assert row["arithmetic_intensity"] == 0
    # SQ_LDS_BANK_CONFLICT = SQ_LDS_IDX_ACTIVE = 0: no LDS use, so no rate (not 0 / 0).
    assert row["lds_bank_conflict_cycles"] == 0 and row["lds_bank_conflict_rate"] is None


def test_gfx942_reads_count_128_byte_requests_by_hand(tmp_path):
    rows = metrics_of(pmc_perf_lake(tmp_path, "rocprof_compute_mi300x_vcopy"), "s1")
    assert sorted(rows) == [0, 1, 2]
    row = rows[0]
    assert row["gfx"] == "gfx942"
    # TCC_BUBBLE_sum = 65536 128-byte reads, TCC_EA0_RDREQ_sum = 65767, _32B_sum = 0:
    #   read = 128 x 65536 + 64 x (65767 - 65536 - 0) + 32 x 0 = 8,403,392 B (8 MiB + 14 KB);
    #   counted as 64-byte requests, as on gfx90a, it would be half that
    assert row["hbm_read_bytes"] == 8_403_392
    # TCC_EA0_WRREQ_sum = TCC_EA0_WRREQ_64B_sum = 131072: 64 x 131072 = 8,388,608 B
    assert row["hbm_write_bytes"] == 8_388_608
    # TCC_HIT_sum = 66160, TCC_MISS_sum = 131309
    assert row["l2_hit_rate"] == pytest.approx(66_160 / 197_469)
    # End - Start = 716272603621412 - 716272603605252 = 16,160 ns
    assert row["duration_ns"] == 16_160
    # 16,792,000 B / 16,160e-9 s = 1.039e12 B/s (of MI300X's 5.3 TB/s)
    assert row["bytes_per_s"] == pytest.approx((8_403_392 + 8_388_608) / 16_160e-9)
    # Every VALU and MFMA counter but SQ_INSTS_VALU_MFMA_MOPS_F8 is in the capture (all 0 for
    # a copy): the fp8 and FLOP totals are null and fp8's counter named, the rest computed.
    assert row["fp32_flops"] == 0 and row["fp16_flops"] == 0 and row["vector_flops"] == 0
    assert row["missing"] == ["fp8_flops (SQ_INSTS_VALU_MFMA_MOPS_F8)"]
    assert row["fp8_flops"] is None and row["total_flops"] is None


@pytest.mark.parametrize(
    ("capture", "reads", "duration_ns"),
    [
        # gfx90a: TCP_TCC_READ_REQ_sum = TCP_TCC_WRITE_REQ_sum = 131072, atomics 0:
        #   64 x (131072 + 131072) = 16,777,216 B (the 8 MiB read + 8 MiB written) in 20,160 ns
        ("rocprof_compute_mi200_vcopy", 131_072, 20_160),
        # gfx942: TCP_TCC_READ_REQ_sum = 65536, TCP_TCC_WRITE_REQ_sum = 131072, atomics 0:
        #   64 x (65536 + 131072) = 12,582,912 B in 16,160 ns; the 8 MiB of reads went as 65,536
        #   128-byte requests, which rocprofiler-compute's 64-byte line counts as 4 MiB
        ("rocprof_compute_mi300x_vcopy", 65_536, 16_160),
    ],
)
def test_l2_and_lds_bytes_of_the_real_vcopy_captures_by_hand(tmp_path, capture, reads, duration_ns):
    lake = pmc_perf_lake(tmp_path, capture)
    row = metrics_of(lake, "s1")[0]
    assert row["l2_bytes"] == 64 * (reads + 131_072)
    assert row["l2_bytes_per_s"] == pytest.approx(64 * (reads + 131_072) / (duration_ns * 1e-9))
    # SQ_LDS_IDX_ACTIVE = SQ_LDS_BANK_CONFLICT = 0: a copy moves nothing through the LDS
    assert row["lds_bytes"] == 0 and row["lds_bytes_per_s"] == 0
    assert not any(m.startswith(("l2_bytes", "lds_bytes")) for m in row["missing"])
    with lake.connect() as con:
        summary = kernel_hardware_summary(kernel_hardware_metrics(con, "s1")).to_pylist()[0]
    assert summary["l2_bytes"] == 64 * (reads + 131_072) * summary["dispatches"]


def test_lds_bytes_are_conflict_free_cycles_times_128_and_missing_counters_named(tmp_path):
    # (1000 active - 200 conflict cycles) x 4 B x 32 banks = 102,400 B
    lake = lake_with(
        tmp_path, [(7, "SQ_LDS_IDX_ACTIVE", 1000.0), (7, "SQ_LDS_BANK_CONFLICT", 200.0)]
    )
    row = metrics_of(lake, "s1")[7]
    assert row["lds_bytes"] == 102_400
    assert row["l2_bytes"] is None
    assert (
        "l2_bytes (TCP_TCC_READ_REQ, TCP_TCC_WRITE_REQ, TCP_TCC_ATOMIC_WITH_RET_REQ, "
        "TCP_TCC_ATOMIC_WITHOUT_RET_REQ)" in row["missing"]
    )


def test_roll_up_per_kernel_weights_rates_by_time(tmp_path):
    dispatches = kernel_hardware_metrics_of(tmp_path, "rocprof_compute_mi300x_vcopy")
    summary = kernel_hardware_summary(dispatches).to_pylist()
    assert len(summary) == 1 and summary[0]["dispatches"] == dispatches.num_rows
    durations = dispatches["duration_ns"].to_pylist()
    byte_counts = dispatches["hbm_bytes"].to_pylist()
    assert summary[0]["duration_ns"] == sum(durations)
    assert summary[0]["bytes_per_s"] == pytest.approx(sum(byte_counts) / (sum(durations) * 1e-9))
    rates = dispatches["l2_hit_rate"].to_pylist()
    weighted = sum(r * d for r, d in zip(rates, durations, strict=True)) / sum(durations)
    assert summary[0]["l2_hit_rate"] == pytest.approx(weighted)


def kernel_hardware_metrics_of(tmp_path: Path, capture: str):
    with pmc_perf_lake(tmp_path, capture).connect() as con:
        return kernel_hardware_metrics(con, "s1")


# --- the rules, on hostile or incomplete rows built here -------------------------------------


def lake_with(tmp_path: Path, counters: list[tuple], gfx: str | None = "gfx942") -> TraceLake:
    """A TraceLake with `counters` rows (dispatch, counter, value) of one kernel on agent 1."""
    lake = TraceLake(tmp_path / "lake.duckdb")
    with lake.connect(write=True) as con:
        for dispatch, counter, value in counters:
            con.execute(
                "INSERT INTO counters (session_id, dispatch_id, correlation_id, kernel_name, "
                "agent, counter, value) VALUES ('s1', ?, ?, 'gemm', 'Agent 1', ?, ?)",
                [dispatch, dispatch + 100, counter, value],
            )
        con.execute(
            "INSERT INTO kernel_events_trace (session_id, kernel_name, start_ns, duration_ns, "
            "device_id, dispatch_id, correlation_id) VALUES ('s1', 'gemm', 0, 2000, 1, 7, 107)"
        )
        if gfx is not None:
            con.execute(
                "INSERT INTO agents (session_id, agent_id, agent_type, name) "
                "VALUES ('s1', 'Agent 1', 'GPU', ?)",
                [gfx],
            )
    return lake


MFMA_F16 = [(7, "SQ_INSTS_VALU_MFMA_MOPS_F16", 1000.0)]


def test_a_missing_counter_nulls_its_metric_and_is_named(tmp_path):
    # Everything for FLOPs but SQ_INSTS_VALU_MUL_F32; reads complete; no writes.
    full = {c: 0.0 for formula in formulas_for("gfx942").formulas for c in formula.counters}
    rows = [(7, c, v) for c, v in full.items() if c != "SQ_INSTS_VALU_MUL_F32"]
    rows = [r for r in rows if not r[1].startswith("TCC_EA0_WRREQ")]
    row = metrics_of(lake_with(tmp_path, rows), "s1")[7]
    assert row["fp32_flops"] is None and row["total_flops"] is None
    assert row["fp16_flops"] == 0 and row["hbm_read_bytes"] == 0
    assert "fp32_flops (SQ_INSTS_VALU_MUL_F32)" in row["missing"]
    assert "hbm_write_bytes (TCC_EA0_WRREQ, TCC_EA0_WRREQ_64B)" in row["missing"]
    assert row["bytes_per_s"] is None


def test_mfma_flops_are_512_per_mops_and_rate_over_the_kernel_duration(tmp_path):
    row = metrics_of(lake_with(tmp_path, MFMA_F16), "s1")[7]
    # 512 x 1000 MOPS = 512,000 FLOPs of fp16 matrix work; over 2000 ns = 2.56e11 FLOP/s. The
    # fp16 total also needs the VALU F16 counters, absent here, so it is null and named.
    assert row["fp16_flops"] is None
    assert "fp16_flops (SQ_INSTS_VALU_ADD_F16, SQ_INSTS_VALU_MUL_F16, " in " ".join(row["missing"])
    vector_f16 = [(7, f"SQ_INSTS_VALU_{op}_F16", 0.0) for op in ("ADD", "MUL", "TRANS", "FMA")]
    (tmp_path / "b").mkdir()
    row = metrics_of(lake_with(tmp_path / "b", MFMA_F16 + vector_f16), "s1")[7]
    assert row["fp16_flops"] == 512_000


def test_derived_sum_spelling_and_repeated_passes_combine(tmp_path):
    """`X_sum` is X; a counter collected in two passes of one dispatch is averaged, and
    counters of different passes (same dispatch id) make one row."""
    rows = [
        (7, "TCC_HIT_sum", 30.0),  # pass 1
        (7, "TCC_MISS", 10.0),  # pass 2
        (7, "TCC_HIT", 50.0),  # pass 2 again
    ]
    result = metrics_of(lake_with(tmp_path, rows), "s1")
    assert list(result) == [7]
    assert result[7]["l2_hit_rate"] == pytest.approx(40 / 50)


def test_counters_join_by_correlation_id_when_the_dispatch_id_is_missing(tmp_path):
    lake = lake_with(tmp_path, [])
    with lake.connect(write=True) as con:
        con.execute(
            "INSERT INTO counters (session_id, dispatch_id, correlation_id, agent, counter, "
            "value) VALUES ('s1', NULL, 107, 'Agent 1', 'TCC_HIT', 1), "
            "('s1', NULL, 107, 'Agent 1', 'TCC_MISS', 3)"
        )
    with lake.connect() as con:
        (row,) = kernel_hardware_metrics(con, "s1").to_pylist()
    assert (row["kernel_name"], row["duration_ns"], row["l2_hit_rate"]) == ("gemm", 2000, 0.25)


def test_valu_lanes_in_use_by_hand(tmp_path):
    """rocprofiler-sdk's VALUUtilization: 3200 thread-cycles over 100 VALU cycles x 64 lanes is
    half the lanes; a counter missing names it."""
    row = metrics_of(
        lake_with(
            tmp_path, [(7, "SQ_THREAD_CYCLES_VALU", 3200.0), (7, "SQ_ACTIVE_INST_VALU", 100.0)]
        ),
        "s1",
    )[7]
    assert row["valu_thread_utilization"] == pytest.approx(3200 / (100 * 64))
    (tmp_path / "b").mkdir()
    row = metrics_of(lake_with(tmp_path / "b", [(7, "SQ_THREAD_CYCLES_VALU", 3200.0)]), "s1")[7]
    assert row["valu_thread_utilization"] is None
    assert "valu_thread_utilization (SQ_ACTIVE_INST_VALU)" in row["missing"]


def test_a_counter_pass_of_its_own_run_takes_its_kernels_median_time(tmp_path):
    """`aaco run --counters` collects each pass in a run of its own: the traced pass's dispatch 7
    is another kernel (softmax), so the counters' dispatch 7 (gemm) must not take its time but
    the median of gemm's traced dispatches: [1000, 2000, 3000] ns -> 2000 ns."""
    vector_f16 = [(7, f"SQ_INSTS_VALU_{op}_F16", 0.0) for op in ("ADD", "MUL", "TRANS", "FMA")]
    lake = lake_with(tmp_path, MFMA_F16 + vector_f16)
    with lake.connect(write=True) as con:
        con.execute("DELETE FROM kernel_events_trace")
        con.execute(
            "INSERT INTO kernel_events_trace (session_id, kernel_name, start_ns, duration_ns, "
            "device_id, dispatch_id, correlation_id) VALUES "
            "('s1', 'softmax', 0, 500, 1, 7, 1), ('s1', 'gemm', 0, 1000, 1, 3, 2), "
            "('s1', 'gemm', 0, 3000, 1, 9, 3), ('s1', 'gemm', 0, 2000, 1, 11, 4)"
        )
    row = metrics_of(lake, "s1")[7]
    assert (row["kernel_name"], row["duration_ns"]) == ("gemm", 2000)
    assert row["duration_source"] == "kernel_median"
    # 512 x 1000 MOPS = 512,000 fp16 FLOPs, over 2000 ns (not softmax's 500 ns)
    assert row["fp16_flops"] == 512_000


@pytest.mark.parametrize("gfx", ["gfx1030", None])
def test_an_unknown_or_unnamed_gpu_gets_nulls_and_a_reason(tmp_path, gfx):
    row = metrics_of(lake_with(tmp_path, MFMA_F16, gfx=gfx), "s1")[7]
    assert row["total_flops"] is None and row["hbm_read_bytes"] is None
    assert row["note"].startswith("no hardware-counter formulas for ")
    assert ("gfx1030" in row["note"]) == (gfx is not None)
    assert counters_for(gfx) == () and no_formulas_reason(gfx) is not None


def test_counters_for_lists_every_counter_each_formula_names():
    for family in FAMILIES:
        for target in family.targets:
            listed = counters_for(target)
            assert len(listed) == len(set(listed))
            for formula in family.formulas:
                assert set(formula.counters) <= set(listed), (target, formula.quantity)
                assert formula.source in gpu_counters.SOURCES
    assert counters_for("gfx942:sramecc+:xnack-") == counters_for("gfx942")
    assert "TCC_BUBBLE" in counters_for("gfx950") and "TCC_BUBBLE" not in counters_for("gfx90a")
    assert "GL2C_EA_RDREQ_96B" in counters_for("gfx1100")
    assert "GL2C_EA_RDREQ_96B" not in counters_for("gfx1201")
    assert not any(c.endswith(SUM_SUFFIX) for f in FAMILIES for c in counters_for(f.targets[0]))


def test_the_reader_pivots_every_counter_a_formula_names():
    """A formula counter the SQL does not pivot would silently read as missing."""
    pivot = counter_metrics._pivot_columns()
    for counter in all_counters():
        assert f'AS "{counter}"' in pivot


def test_counter_names_from_files_stay_data(tmp_path):
    hostile = "TCC_HIT'); DROP TABLE counters; --"
    lake = lake_with(tmp_path, [(7, hostile, 1.0), (7, "TCC_MISS", 1.0)])
    row = metrics_of(lake, "s1")[7]
    assert row["l2_hit_rate"] is None and "l2_hit_rate (TCC_HIT)" in row["missing"]
    with duckdb.connect(str(tmp_path / "lake.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM counters").fetchone()[0] == 2

"""A physically consistent roofline: each op judged against the ceiling of the memory level its
bytes fit, and no op ever above its roof (a roof an op beat is lifted to it, and said so)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from aaco_pipelines.analysis.bottleneck.roofline import judge_roofline, roofline_utilization
from aaco_pipelines.analysis.envelope.choice import save_envelope
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import FAST_SIDECAR, synthetic_envelope

GFLOP, GB, MIB = 1e9, 1e9, 1 << 20


def _envelope(gemm: float, dram: float, l2: float | None = None) -> HardwareEnvelope:
    return synthetic_envelope(gemm, dram, {"L2": (l2, MIB)} if l2 else None)


def _nodes(rows: list[tuple[str, float, float, float]]) -> pa.Table:
    """(name, flops, bytes moved, seconds) per op, all fp32."""
    return pa.table(
        {
            "onnx_node": [r[0] for r in rows],
            "op_type": ["Op"] * len(rows),
            "flops": pa.array([int(r[1]) for r in rows], pa.int64()),
            "bytes_moved": pa.array([int(r[2]) for r in rows], pa.int64()),
            "time_ns": pa.array([r[3] * 1e9 for r in rows], pa.float64()),
            "dtype": ["fp32"] * len(rows),
        }
    )


def test_an_op_whose_bytes_fit_a_cache_is_judged_against_that_cache():
    """A 0.5 MiB elementwise op at 50 GB/s is at half of a 100 GB/s L2, not five times a
    10 GB/s DRAM; the same op at 5 MiB is judged against DRAM."""
    envelope = _envelope(100 * GFLOP, 10 * GB, l2=100 * GB)
    small, large = 0.5 * MIB, 5 * MIB
    judged = judge_roofline(
        _nodes([("small_add", small / 8, small, small / (50 * GB)), ("large_add", 0, large, 1.0)]),
        envelope,
    )
    rows = {r["onnx_node"]: r for r in judged.points.to_pylist()}
    assert rows["small_add"]["roof_level"] == "L2" and rows["small_add"]["bound"] == "memory"
    assert rows["small_add"]["utilization"] == pytest.approx(0.5)
    assert rows["large_add"]["roof_level"] == "DRAM"
    assert not judged.lifts and judged.note() is None
    assert not any(r["roof_lifted"] for r in rows.values())


def test_no_op_is_left_above_its_roof_and_every_lift_is_said():
    """A GEMM at 110 % of the measured peak and a DRAM-sized copy at twice the measured
    bandwidth: both roofs are lifted to what the ops did, the points under them are marked,
    nothing is judged above 100 %, and the note names each lift and the op behind it."""
    envelope = _envelope(100 * GFLOP, 10 * GB, l2=100 * GB)
    judged = judge_roofline(
        _nodes(
            [
                ("gemm", 110 * GFLOP, 1 * MIB * 4, 1.0),  # AI ~26: compute-bound
                ("copy", 0, 20 * GB, 1.0),  # 20 GB/s from DRAM
                ("small", 0, 0.5 * MIB, 1.0),  # a slow copy, under its L2 ceiling
            ]
        ),
        envelope,
    )
    rows = {r["onnx_node"]: r for r in judged.points.to_pylist()}
    assert all(r["utilization"] <= 1.0 + 1e-12 for r in rows.values())
    assert rows["gemm"]["roof_lifted"] and rows["gemm"]["utilization"] == pytest.approx(1.0)
    assert rows["copy"]["roof_lifted"] and rows["copy"]["roof_level"] == "DRAM"
    assert not rows["small"]["roof_lifted"]
    assert {(lift.roof, lift.node) for lift in judged.lifts} == {
        ("fp32 GEMM", "gemm"),
        ("DRAM", "copy"),
    }
    assert judged.envelope.gemm.peak == pytest.approx(110 * GFLOP)
    assert judged.envelope.bandwidth.peak == pytest.approx(20 * GB)
    assert envelope.gemm.peak == 100 * GFLOP  # the measured envelope itself is untouched
    note = judged.note()
    assert "fp32 GEMM roof lifted from 1e+11 to 1.1e+11 FLOP/s (gemm ran at 110%" in note
    assert "DRAM roof lifted" in note


def test_a_measured_session_never_shows_an_op_above_its_roof(tmp_path):
    """A conv block measured for real against an envelope far too low for this CPU (1 GFLOP/s,
    0.1 GB/s): every op beats it, so the roofs are lifted to the ops, the stored points and the
    session's utilization stay at or under 100 %, and the bottleneck report says why."""
    paths = AacoPaths(home=tmp_path, registry=tmp_path / "registry", tracelake=tmp_path / "l.db")
    path = models.save(models.conv_block_model(), paths.registry / "conv.onnx")
    FAST_SIDECAR.save(paths.registry / "conv.yaml")
    lake = TraceLake(paths.tracelake)
    save_envelope(lake, _envelope(1 * GFLOP, 0.1 * GB))
    session_id = measure_model(registered_model(path), paths, analyze=True).session_id
    points = lake.query(
        "SELECT * FROM roofline_points WHERE session_id = ? AND utilization IS NOT NULL",
        [session_id],
    ).to_pylist()
    assert points and all(p["utilization"] <= 1.0 + 1e-9 for p in points)
    assert any(p["roof_lifted"] for p in points)
    assert {p["roof_level"] for p in points} <= {"GEMM", "DRAM"}
    [report] = lake.query(
        "SELECT * FROM bottleneck_reports WHERE session_id = ?", [session_id]
    ).to_pylist()
    assert report["hardware_envelope_utilization"] <= 1.0 + 1e-9
    assert "roof lifted from 1e+09 to" in report["envelope_note"]


def test_the_sessions_utilization_judges_each_ops_bytes_at_their_own_level():
    """A copy within a 100 GB/s L2 at 50 GB/s and one from a 10 GB/s DRAM at 5 GB/s: each at
    half its own ceiling, so the session is at half, though its bytes moved at up to five times
    DRAM's bandwidth."""
    envelope = _envelope(100 * GFLOP, 10 * GB, l2=100 * GB)
    half = 0.5 * MIB
    judged = judge_roofline(
        _nodes(
            [
                ("in_l2", 1.0, half, half / (50 * GB)),
                ("from_dram", 1.0, 5 * GB, 1.0),
            ]
        ),
        envelope,
    )
    utilization = roofline_utilization(judged.points, judged.envelope)
    assert utilization.dominant_resource == "memory"
    assert utilization.memory_utilization == pytest.approx(0.5)
    assert utilization.hardware_envelope_utilization == pytest.approx(0.5)

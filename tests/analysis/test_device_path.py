"""The device critical path: hand-built chains worked by hand, what-ifs against a brute-force
re-simulation of the host and its queues, a simulated trace through `aaco ingest`, and a real
trace with its HIP API calls."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from aaco_pipelines.analysis.attribution.session import session_kernels
from aaco_pipelines.analysis.critical_path.device_path import (
    PER_ITERATION,
    PER_NODE,
    device_critical_path,
)
from aaco_pipelines.analysis.critical_path.device_whatif import (
    predict_device_spans,
    predict_device_spans_many,
)
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import SHARED, simulated_gpu_trace

SAMPLES = SHARED / "samples" / "profilers"
RPD = SAMPLES / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"  # has its HIP API calls
US = 1_000
EPOCH = 1_700_000_000_000_000_000  # real traces' timestamps are this large


# --- The oracle: a host thread launching onto in-order queues, simulated step by step ------


@dataclass(frozen=True)
class Launch:
    node: str
    queue: int
    duration_ns: int
    host_gap_ns: int = 0  # the host's own work before the call
    call_ns: int = 1 * US  # the launch call; the kernel may start when it returns


@dataclass(frozen=True)
class Sync:
    host_gap_ns: int = 0
    return_ns: int = 5 * US  # after the device drained (or the call began, if later)
    api_name: str = "hipDeviceSynchronize"


def simulate(iterations, dispatch_gap_ns: dict[int, int], speedup: dict[str, float] | None = None):
    """The truth, one host op and one kernel at a time: kernel rows, API call rows, and each
    iteration's span (first launch call to last kernel end). A kernel starts at
    max(its queue's previous end + the queue's dispatch gap, its launch call's end); a sync
    returns `return_ns` after the later of its call and the end of every queue's work. Times
    are kept from the iteration's start (floats stay exact), written from `start`."""
    speedup = speedup or {}
    kernels, calls, spans = [], [], []
    correlation = 1
    for iteration, (start, ops) in enumerate(iterations):
        host, queue_end, ends = 0, {}, []
        for op in ops:
            host += op.host_gap_ns
            if isinstance(op, Sync):
                drained = max(queue_end.values(), default=host)
                end = max(host, drained) + op.return_ns
                calls.append(_call(op.api_name, start + host, end - host, None))
                host = end
                continue
            call_start, host = host, host + op.call_ns
            duration = op.duration_ns / speedup[op.node] if op.node in speedup else op.duration_ns
            previous = queue_end.get(op.queue)
            kernel_start = (
                host if previous is None else max(previous + dispatch_gap_ns[op.queue], host)
            )
            queue_end[op.queue] = kernel_start + duration
            ends.append(kernel_start + duration)
            kernels.append(
                {
                    "iteration": iteration,
                    "node_name": op.node,
                    "kernel_name": f"kernel_of_{op.node}",
                    "start_ns": start + kernel_start,
                    "duration_ns": duration,
                    "queue_id": op.queue,
                    "stream_id": op.queue,
                    "correlation_id": correlation,
                }
            )
            calls.append(_call("hipLaunchKernel", start + call_start, op.call_ns, correlation))
            correlation += 1
        spans.append(max(ends) - ops[0].host_gap_ns)
    return kernels, calls, spans


def _call(name, start, duration, correlation):
    return {"api_name": name, "start_ns": start, "duration_ns": duration,
            "correlation_id": correlation, "thread_id": 7}  # fmt: skip


def lake_of(tmp_path, iterations, dispatch_gap_ns, session="s") -> tuple[TraceLake, list]:
    """A TraceLake holding the simulated trace as a profiler would record it (integer ns)."""
    kernels, calls, spans = simulate(iterations, dispatch_gap_ns)
    lake = TraceLake(tmp_path / "lake.duckdb")
    kernel_rows = pa.Table.from_pylist(
        [{**k, "session_id": session, "source": "rocprofv3", "category": "Kernel"} for k in kernels]
    )
    call_rows = pa.Table.from_pylist([{**c, "session_id": session} for c in calls])
    lake.append_rows("kernel_events", kernel_rows)
    lake.append_rows("api_calls", call_rows)
    return lake, spans


def speedups(**factors: float) -> pa.Table:
    return pa.table({"node_name": list(factors), "speedup": list(factors.values())})


def pairs(table: pa.Table, a: str, b: str):
    return zip(table[a].to_pylist(), table[b].to_pylist(), strict=True)


def rows_by_node(path) -> dict[str, dict]:
    return {r["node_name"]: r for r in path.per_node.to_pylist()}


# --- Hand-built chains ----------------------------------------------------------------------


def test_a_device_bound_chain_is_all_on_the_path(tmp_path):
    """Five 100 µs kernels launched 1 µs apart: the queue never drains, every kernel is on the
    path with no slack, and the host only holds the path for the first launch call (1 µs of
    the 509 µs: the first kernel, then four 2 µs dispatch gaps and four kernels)."""
    ops = [Launch(f"n{i}", 0, 100 * US) for i in range(5)]
    lake, spans = lake_of(tmp_path, [(EPOCH, ops)], {0: 2 * US})
    path = device_critical_path(lake, "s")
    (iteration,) = path.per_iteration.to_pylist()
    assert iteration == {"iteration": 0, "span_ns": 509 * US, "path_ns": 509 * US,
                         "host_ns": 1 * US, "device_ns": 508 * US}  # fmt: skip
    assert spans == [509 * US]
    assert path.host_share == pytest.approx(1 / 509)
    for row in path.per_node.to_pylist():
        assert row["slack_ns"] == 0
        assert row["kernel_ns"] == row["critical_ns"] == 100 * US
        assert row["dispatches_per_iteration"] == 1
    assert path.per_node.schema == PER_NODE and path.per_iteration.schema == PER_ITERATION
    assert path.caveats == [
        "kernels are keyed by their stored node or kernel name and iteration, without the "
        "launch attribution (a trace without ONNX Runtime's profile is one iteration)"
    ]


def test_a_launch_bound_chain_puts_the_host_on_the_path(tmp_path):
    """2 µs kernels launched every 10 µs (9 µs of host work + a 1 µs call): each kernel waits
    for its launch, the queue idles 8 µs after each, and only the last kernel is device time.
    A kernel's slack is the idle time after it: 8 µs per kernel still to come."""
    ops = [Launch(f"n{i}", 0, 2 * US, host_gap_ns=9 * US if i else 0) for i in range(5)]
    lake, spans = lake_of(tmp_path, [(EPOCH, ops)], {0: 0})
    path = device_critical_path(lake, "s")
    (iteration,) = path.per_iteration.to_pylist()
    # launches end at 1, 11, 21, 31, 41 µs; the last kernel ends at 43 µs
    assert (iteration["span_ns"], iteration["host_ns"], iteration["device_ns"]) == (
        43 * US, 41 * US, 2 * US,
    )  # fmt: skip
    assert path.host_share == pytest.approx(41 / 43)
    nodes = rows_by_node(path)
    assert {n: r["slack_ns"] for n, r in nodes.items()} == {
        f"n{i}": (4 - i) * 8 * US for i in range(5)
    }
    assert {n: r["critical_ns"] for n, r in nodes.items()} == {
        **{f"n{i}": 0 for i in range(4)}, "n4": 2 * US,
    }  # fmt: skip

    # Off the path, a kernel may take up to its slack longer; beyond it the end moves.
    def predicted(**factors):
        (row,) = predict_device_spans(lake, "s", speedups(**factors), "node_name").to_pylist()
        return row["predicted_span_ns"]

    assert predicted(n0=2.0, n2=0.2) == pytest.approx(43 * US)  # n2: 2 -> 10 µs, slack 16 µs
    assert predicted(n3=0.1) == pytest.approx(53 * US)  # n3: 2 -> 20 µs, 10 µs over its slack
    assert predicted(n4=2.0) == pytest.approx(42 * US)  # on the path: 1 µs saved


# --- Random chains against the oracle -------------------------------------------------------


def random_iterations(seed: int, iterations: int = 3, ops: int = 40, syncs: bool = True):
    """Two queues, tiny and long kernels, host gaps, and syncs (whose return, at least the
    largest dispatch gap, lets the next launch find its queue drained, as a real sync does)."""
    rng = random.Random(seed)
    result = []
    for it in range(iterations):
        # a long kernel on each queue with a launch right behind it: the queues' dispatch gaps
        # are seen (a launch before the queue drained) in every iteration
        steps = [Launch("n0", q, 50 * US + q, call_ns=2 * US) for q in (0, 1)]
        steps += [Launch("n1", q, 3 * US, call_ns=2 * US) for q in (0, 1)]
        for i in range(ops):
            if syncs and i and rng.random() < 0.12:
                steps.append(Sync(rng.randrange(0, 20 * US), rng.randrange(3 * US, 12 * US),
                                  rng.choice(["hipDeviceSynchronize", "hipMemcpyDtoH",
                                              "hipStreamSynchronize"])))  # fmt: skip
                continue
            long = rng.random() < 0.5
            steps.append(
                Launch(
                    node=f"n{rng.randrange(12)}",
                    queue=rng.randrange(2),
                    duration_ns=rng.randrange(30 * US, 200 * US)
                    if long
                    else rng.randrange(US, 5 * US),
                    host_gap_ns=rng.choice([0, 0, rng.randrange(0, 60 * US)]),
                    call_ns=rng.randrange(US, 8 * US),
                )
            )
        result.append((EPOCH + it * 10**9, steps))
    return result


GAPS = {0: 2 * US, 1: 3 * US}


@pytest.mark.parametrize("seed", range(6))
def test_what_if_equals_a_brute_force_re_simulation(tmp_path, seed):
    """Speed-ups and slowdowns of random nodes on random two-queue chains with syncs: the
    prediction re-times chains, blocks and syncs exactly as the step-by-step simulation does."""
    iterations = random_iterations(seed)
    lake, spans = lake_of(tmp_path, iterations, GAPS)
    unchanged = predict_device_spans(lake, "s", speedups(n0=1.0), "node_name")
    assert unchanged["span_ns"].to_pylist() == spans
    assert unchanged["predicted_span_ns"].to_pylist() == spans  # the model replays the trace
    rng = random.Random(seed)
    scenarios = [
        {f"n{i}": rng.choice([0.25, 0.5, 1.5, 2.0, 4.0]) for i in rng.sample(range(12), 3)}
        for _ in range(4)
    ]
    many = predict_device_spans_many(
        lake, "s", [speedups(**factors) for factors in scenarios], "node_name"
    )
    for factors, predicted in zip(scenarios, many, strict=True):
        _, _, truth = simulate(iterations, GAPS, factors)
        assert predicted["predicted_span_ns"].to_pylist() == pytest.approx(truth, rel=1e-12)
    alone = predict_device_spans(lake, "s", speedups(**scenarios[-1]), "node_name")
    assert alone.equals(many[-1])


@pytest.mark.parametrize("seed", range(3))
def test_slack_is_how_much_longer_a_kernel_may_run(tmp_path, seed):
    """Every dispatch its own node: growing it by its slack leaves the iteration's end where it
    was, growing it 1 µs more moves the end by 1 µs (checked by the brute-force simulation);
    the critical kernels are those with no slack, and their time is the device part."""
    rng = random.Random(seed)
    (start, steps), = random_iterations(seed, iterations=1, ops=30)  # fmt: skip
    unique, n = [], 0
    for op in steps:
        if isinstance(op, Launch):
            op, n = Launch(f"k{n}", op.queue, op.duration_ns, op.host_gap_ns, op.call_ns), n + 1
        unique.append(op)
    iterations = [(start, unique)]
    lake, (span,) = lake_of(tmp_path, iterations, GAPS)
    path = device_critical_path(lake, "s")
    durations = {op.node: op.duration_ns for op in unique if isinstance(op, Launch)}
    for node in rng.sample(sorted(durations), 10):
        slack = rows_by_node(path)[node]["slack_ns"]
        assert slack >= 0
        grown = durations[node] + slack
        _, _, (at_slack,) = simulate(iterations, GAPS, {node: durations[node] / grown})
        _, _, (beyond,) = simulate(iterations, GAPS, {node: durations[node] / (grown + US)})
        assert at_slack == pytest.approx(span)
        assert beyond == pytest.approx(span + US)
    (row,) = path.per_iteration.to_pylist()
    critical = sum(r["critical_ns"] for r in path.per_node.to_pylist())
    assert 0 < critical <= row["device_ns"] <= row["path_ns"] == span
    assert row["host_ns"] + row["device_ns"] == row["path_ns"]


def test_kernels_without_launch_calls_are_device_bound(tmp_path):
    """A trace without its HIP API calls: nothing says when the host let a kernel go, so each
    is taken as device-bound after the first (the host is never on the path, and the idle
    gaps count as device time), and the caveats say so."""
    ops = [Launch(f"n{i}", 0, 2 * US, host_gap_ns=9 * US if i else 0) for i in range(3)]
    kernels, _, _ = simulate([(EPOCH, ops)], {0: 0})
    lake = TraceLake(tmp_path / "lake.duckdb")
    lake.append_rows(
        "kernel_events",
        pa.Table.from_pylist([{**k, "session_id": "s", "category": "Kernel"} for k in kernels]),
    )
    path = device_critical_path(lake, "s")
    (row,) = path.per_iteration.to_pylist()
    # kernels run at 1, 11 and 21 µs: the span starts at the first kernel
    assert row == {"iteration": 0, "span_ns": 22 * US, "path_ns": 22 * US, "host_ns": 0,
                   "device_ns": 22 * US}  # fmt: skip
    assert path.host_share == 0
    assert path.caveats[0].startswith("3 of 3 kernels have no launch call")
    assert {r["node_name"]: r["slack_ns"] for r in path.per_node.to_pylist()} == {
        "n0": 0, "n1": 0, "n2": 0,
    }  # fmt: skip


def test_launch_calls_sharing_a_correlation_id_take_the_first(tmp_path):
    """Two processes' traces merged: each correlation id may name two calls. Each kernel goes
    with the first call of its id (the same answer as the one-process trace), never twice."""
    iterations = random_iterations(7, iterations=1)
    lake, spans = lake_of(tmp_path, iterations, GAPS)
    calls = lake.query("SELECT * FROM api_calls WHERE session_id = 's'")
    later = calls.set_column(
        calls.schema.get_field_index("start_ns"),
        "start_ns",
        pc.add(calls["start_ns"], 10**9),  # the other process, a second later
    )
    lake.append_rows("api_calls", later.drop_columns(["session_id"]).append_column(
        "session_id", pa.array(["s"] * later.num_rows)))  # fmt: skip
    path = device_critical_path(lake, "s")
    assert path.per_iteration["span_ns"].to_pylist() == spans
    assert sum(r["dispatches_per_iteration"] for r in path.per_node.to_pylist()) == sum(
        isinstance(op, Launch) for op in iterations[0][1]
    )


def test_what_ifs_that_cannot_mean_anything_are_refused_in_one_line(tmp_path):
    lake, _ = lake_of(tmp_path, [(EPOCH, [Launch("n0", 0, 10 * US)])], {0: 0})
    # an infinitely fast node divided by zero, 1e-300 overflowed int64 into a faster p50
    for factor in (0.0, -2.0, float("nan"), float("inf"), 1e-300, 1e12):
        with pytest.raises(AacoInputError, match=r"is not a number from 0.001 to 1e\+06"):
            predict_device_spans(lake, "s", speedups(n0=factor), "node_name")
    with pytest.raises(AacoInputError, match="ran no kernel with node_name 'conv9'.*'n0'"):
        predict_device_spans(lake, "s", speedups(conv9=2.0), "node_name")
    with pytest.raises(AacoInputError, match="cannot re-time by 'op_type'"):
        predict_device_spans(lake, "s", speedups(n0=2.0), "op_type")
    by_name = pa.table({"kernel_name": ["kernel_of_n0"], "speedup": [2.0]})
    assert predict_device_spans(lake, "s", by_name, "kernel_name")[
        "predicted_span_ns"
    ].to_pylist() == [
        6 * US  # 1 µs call + 5 µs
    ]
    assert device_critical_path(lake, "no such session") is None


# --- Real pipelines -------------------------------------------------------------------------


def test_a_simulated_gpu_trace_through_aaco_ingest(aaco_paths, tmp_path):
    """A rocprofv3 trace simulated from a real ONNX Runtime profile, ingested with the profile
    and the model: every node the attribution found has its row, with finite times, and the
    re-timing with nothing changed gives the spans back."""
    import math

    from aaco_pipelines.stages.pipeline import ingest_and_analyze

    model, trace = simulated_gpu_trace(tmp_path)
    bundle, _ = ingest_and_analyze(trace, aaco_paths, model=model)
    lake = TraceLake(aaco_paths.tracelake)

    kernels = session_kernels(lake, bundle.session_id)
    assert isinstance(kernels, pa.Table)  # attributed through the launch calls
    path = device_critical_path(lake, bundle.session_id, kernels)
    attributed = {n for n in kernels["node_name"].to_pylist() if n is not None}
    nodes = rows_by_node(path)
    assert attributed <= set(nodes)
    for row in nodes.values():
        for column in ("kernel_ns", "critical_ns", "slack_ns", "dispatches_per_iteration"):
            assert math.isfinite(row[column]) and row[column] >= 0, row
        assert row["critical_ns"] <= row["kernel_ns"]
    assert 0 <= path.host_share <= 1
    assert path.per_iteration.num_rows >= 8  # the profiled runs the launches fell in
    for row in path.per_iteration.to_pylist():
        assert row["host_ns"] + row["device_ns"] == row["path_ns"] <= row["span_ns"]
    top = path.per_node["node_name"][0].as_py()
    same = predict_device_spans(
        lake, bundle.session_id, speedups(**{top: 1.0}), "node_name", kernels
    )
    assert same["predicted_span_ns"].to_pylist() == pytest.approx(same["span_ns"].to_pylist())
    faster = predict_device_spans(
        lake, bundle.session_id, speedups(**{top: 2.0}), "node_name", kernels
    )
    assert all(a <= b for a, b in pairs(faster, "predicted_span_ns", "span_ns"))
    family = kernels["kernel_family"][0].as_py()
    by_family = pa.table({"kernel_family": [family], "speedup": [0.5]})
    slower = predict_device_spans(lake, bundle.session_id, by_family, "kernel_family", kernels)
    assert all(a >= b for a, b in pairs(slower, "predicted_span_ns", "span_ns"))
    assert any(a > b for a, b in pairs(slower, "predicted_span_ns", "span_ns"))


def test_a_real_trace_with_its_hip_api_calls(aaco_paths):
    """vLLM FP8 inference on an MI300-class GPU (RPD: kernels, their hipLaunchKernel /
    hipGraphLaunch calls, hipMemcpyWithStream and hipDeviceSynchronize): the critical path is
    no longer than the span and no shorter than its largest kernel; halving the top kernel's
    time saves at most half its time."""
    from aaco_pipelines.stages.ingest_trace import ingest_trace

    bundle = ingest_trace(RPD, aaco_paths, name="vllm")
    lake = TraceLake(aaco_paths.tracelake)
    kernels = session_kernels(lake, bundle.session_id)  # SQL over the lake: no ORT profile
    path = device_critical_path(lake, bundle.session_id, kernels)
    (row,) = path.per_iteration.to_pylist()
    largest = lake.query(
        "SELECT max(duration_ns) AS d FROM kernel_events WHERE session_id = ? AND category = 'Kernel'",
        [bundle.session_id],
    )["d"][0].as_py()
    assert largest <= row["path_ns"] <= row["span_ns"]
    assert 0 <= path.host_share <= 1
    assert any("host synchronisations" in c for c in path.caveats)
    top = path.per_node.to_pylist()[0]
    assert top["critical_ns"] > 0 and top["slack_ns"] == 0
    predicted = predict_device_spans(
        lake, bundle.session_id, speedups(**{top["node_name"]: 2.0}), "node_name", kernels
    ).to_pylist()[0]
    saved = predicted["span_ns"] - predicted["predicted_span_ns"]
    assert 0 < saved <= top["kernel_ns"] / 2 + 1

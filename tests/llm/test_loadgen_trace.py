"""Arrivals from LoadGen's trace: each request's scheduled time, put on the engine's clock.

Traces here are written as LoadGen 6.0's ChromeTracer writes them (one event a line, times in
microseconds with three decimals from the trace's origin), with the events around the samples
that a real trace has, its doubled quotes that make the whole file invalid JSON included;
tests/llm/test_generation.py checks real runs against LoadGen's summary.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.llm.loadgen_trace import TRACE_FILE, read_samples, scheduled_arrivals

OFFSET_NS = 1_764_000_000_123_456_789  # LoadGen's origin on the engine's clock


def _write_trace(folder: Path, samples: list[tuple[int, int, int, int]]) -> Path:
    """A trace of (sequence number, sample index, scheduled ns, answered ns) samples."""
    lines = ['{"traceEvents":[', '{"name":"GenerateQueries","ph":"X","pid":1,"tid":2,'
             '"ts":12.500,"dur":40.250,"args":{}},']  # fmt: skip
    for seq, index, scheduled, answered in samples:
        lines += [
            f'{{"name":"Scheduling","ph":"X","pid":1,"tid":2,"ts":{scheduled / 1e3:.3f},'
            f'"dur":1.000,"args":{{}}}},',
            f'{{"name":"Latency","ph": "C","pid":1,"ts":{scheduled / 1e3:.3f},"args":{{ '
            f'"issue_delay":2000,"issue_to_done":{answered - scheduled - 2000}}}}},',
            f'{{"name":"Sample","cat":"default","ph":"b","pid":1,"id":{seq},'
            f'"ts":{scheduled / 1e3:.3f},"args":{{"sample_seq":{seq},"query_seq":{seq},'
            f'"sample_idx":{index},"issue_start_ns":2000,"complete_ns":{answered - scheduled}}}}},',
            f'{{"name":"Sample","cat":"default","ph":"e", "pid":1,"id":{seq},'
            f'"ts":{answered / 1e3:.3f}}},',
        ]
    lines += ['{"name":"LogDetail","ph":"X","pid":1,"tid":3,"ts":15593.661,"dur":16.144,'
              '"args":{"key":""loadgen_version""}},']  # fmt: skip
    lines += ['{"name":"LastTrace"}', "],", '"displayTimeUnit":"ns",',
              '"otherData":{', '"ts":1764000000123456.789,', '"version":"MLPerf LoadGen v1.0"',
              "}", "}"]  # fmt: skip
    path = folder / TRACE_FILE
    path.write_text("\n".join(lines) + "\n")
    return path


# (sequence number, sample index, scheduled, answered): ns from the origin, issued in this order
SAMPLES = [
    (7, 3, 1_000_001, 9_000_017),
    (8, 0, 1_250_003, 9_000_017),
    (9, 3, 4_000_000, 12_500_999),
]


def test_each_sample_is_read_with_its_scheduled_and_answered_time_to_the_nanosecond(tmp_path):
    samples = read_samples(_write_trace(tmp_path, SAMPLES))
    assert samples.to_pydict() == {
        "sample_seq": [7, 8, 9],
        "sample_index": [3, 0, 3],
        "scheduled_ns": [1_000_001, 1_250_003, 4_000_000],
        "answered_ns": [9_000_017, 9_000_017, 12_500_999],
    }


def test_arrivals_are_the_scheduled_times_on_our_clock_whatever_order_the_rows_are_in(tmp_path):
    """The rows come in any order; the issue callback's stamps give LoadGen's issue order. The
    clocks meet at the answers: the fastest hand-over from our stamp of an answer to LoadGen's
    (here 4 us, others 30 us and 2 ms) is taken as the offset's error."""
    trace = _write_trace(tmp_path, SAMPLES)
    handover = np.array([30_000, 4_000, 2_000_000])
    answered = np.array([s[3] for s in SAMPLES])
    ours = answered + OFFSET_NS - handover
    issued_ns = np.array([5, 5, 900])  # one callback for the first two, as offline issues
    rows = np.array([2, 0, 1])  # the log's order
    arrivals = scheduled_arrivals(
        trace, issued_ns[rows], np.array([s[1] for s in SAMPLES])[rows], ours[rows]
    )
    scheduled = np.array([s[2] for s in SAMPLES])
    assert arrivals.tolist() == (scheduled + OFFSET_NS - 4_000)[rows].tolist()


def test_a_trace_of_other_samples_is_refused_naming_it(tmp_path):
    trace = _write_trace(tmp_path, SAMPLES)
    issued, answered = np.array([1, 2, 3]), np.array([9_000_017, 9_000_017, 12_500_999])
    with pytest.raises(AacoInputError, match="not the run's 3 requests") as refused:
        scheduled_arrivals(trace, issued, np.array([3, 1, 3]), answered)
    assert str(trace) in str(refused.value)
    with pytest.raises(AacoInputError, match="not the run's 2 requests"):
        scheduled_arrivals(trace, issued[:2], np.array([3, 0]), answered[:2])


def test_a_missing_trace_says_to_turn_loadgens_trace_on(tmp_path):
    with pytest.raises(AacoInputError, match="enable_trace"):
        read_samples(tmp_path / TRACE_FILE)

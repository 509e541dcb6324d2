"""When LoadGen scheduled each query, read from its trace and put on the engine's clock.

LoadGen times every query from its *scheduled* issue: server, the Poisson schedule it drew
before the run; single stream, when it issued it; offline, the test's start. The Python issue
callback runs later, once LoadGen's issuing thread gets the GIL, which the serving thread holds
between ONNX Runtime calls: arrivals stamped there were late by that wait (server TTFT p50
12-53 % under LoadGen's own) and bunched behind it (above capacity 34 % of gaps under 50 us,
1.2 % expected of Poisson arrivals).

A QuerySample carries only its response id and sample index, but LoadGen's trace
(mlperf_log_trace.json, LogSettings.enable_trace) records each sample as an async event
"Sample" whose id is the sample's sequence number: it begins at its query's scheduled time and
ends when QuerySamplesComplete was entered for it, `sample_idx` in its args. Times are
microseconds with three decimals (so nanoseconds) from the trace's origin, on LoadGen's
PerfClock (this build's: the wall clock, not our monotonic one).

The clocks meet where the serving thread answers: it stamps its clock and calls
QuerySamplesComplete, which LoadGen stamps on entry. Each sample's (LoadGen's stamp - ours) is
the clocks' offset plus that hand-over (microseconds: the call's arguments cross into C++);
the smallest over the run is the offset. LoadGen's first-token stamp follows ours by a hand-over
of the same kind, so the two TTFTs differ by microseconds, not by a GIL wait.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.foundation.sql import sql_path
from aaco_pipelines.tracelake import engine

TRACE_FILE = "mlperf_log_trace.json"  # LoadGen's name for it in the log folder

# One event a line; the file as a whole is not JSON (LogDetail events double their quotes), so
# the lines are read as one text column, and only the samples' lines are parsed.
_SAMPLES_SQL = """
WITH events AS (
    SELECT rtrim(line, ',')::JSON AS event
    FROM read_csv({path}, columns = {{'line': 'VARCHAR'}}, header = false, delim = '\x1f',
                  quote = '', escape = '', auto_detect = false)
    WHERE starts_with(line, '{{"name":"Sample",')
),
samples AS (
    SELECT (event->>'id')::UBIGINT AS sample_seq, event->>'ph' AS ph,
           (event->'args'->>'sample_idx')::BIGINT AS sample_index,
           ((event->>'ts')::DECIMAL(18, 3) * 1000)::BIGINT AS ts_ns
    FROM events
)
SELECT sample_seq,
       any_value(sample_index) FILTER (WHERE ph = 'b') AS sample_index,
       min(ts_ns) FILTER (WHERE ph = 'b') AS scheduled_ns,
       min(ts_ns) FILTER (WHERE ph = 'e') AS answered_ns
FROM samples GROUP BY sample_seq ORDER BY sample_seq
"""


def read_samples(trace: Path) -> pa.Table:
    """Every sample of a LoadGen trace in issue order (sequence number): its index, when its
    query was scheduled and when it was answered, ns from the trace's origin."""
    if not trace.is_file():
        raise AacoInputError(
            "LoadGen wrote no trace of the run",
            path=trace,
            fix="run LoadGen with LogSettings.enable_trace = True",
        )
    with engine.connect() as con:
        return con.sql(_SAMPLES_SQL.format(path=sql_path(trace))).to_arrow_table()


def scheduled_arrivals(
    trace: Path, issued_ns: np.ndarray, sample_index: np.ndarray, answered_ns: np.ndarray
) -> np.ndarray:
    """Each request's scheduled arrival on the engine's clock, for requests given by when the
    issue callback saw them (`issued_ns`: its order is LoadGen's issue order), their sample
    index (checked against LoadGen's) and when we answered them (where the clocks meet)."""
    samples = read_samples(trace)
    order = np.argsort(issued_ns, kind="stable")
    if samples.num_rows != len(order) or not np.array_equal(
        samples["sample_index"].to_numpy(), np.asarray(sample_index)[order]
    ):
        raise AacoInputError(
            f"LoadGen's trace has {samples.num_rows} samples that are not the run's "
            f"{len(order)} requests in issue order",
            path=trace,
            fix="run one LoadGen test per log folder, and answer every query it issues",
        )
    answered = samples["answered_ns"].to_numpy()
    offset = np.min(answered - np.asarray(answered_ns)[order])
    arrivals = np.empty(len(order), np.int64)
    arrivals[order] = samples["scheduled_ns"].to_numpy() - offset
    return arrivals

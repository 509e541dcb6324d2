"""The Arrow column types every table of the TraceLake is written with.

Times are integer nanoseconds in I64 columns (Unix epoch for timestamps, plain ns for durations);
TS is for the moments a session, baseline or alert is stamped with (started_at, created_at, ...).
"""

from __future__ import annotations

import pyarrow as pa

STR, I32, I64, F64, BOOL = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")

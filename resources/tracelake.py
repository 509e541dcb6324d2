"""The DuckDB TraceLake as a Dagster resource.

It is a `DuckDBResource` (so any asset can `get_connection()` for ad-hoc SQL the Dagster way) whose
writes go through the domain `TraceLake`, which serializes writers across processes, bounds every
wait for a busy lake and logs that wait to the run's event log.
"""

from dagster import get_dagster_logger
from dagster_duckdb import DuckDBResource
from pydantic import Field

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.tracelake.store import TraceLake


class TraceLakeResource(DuckDBResource):
    database: str = Field(
        default_factory=lambda: str(AacoPaths.from_env().tracelake),
        description="Path of the TraceLake DuckDB file (AACO_TRACELAKE, default AACO_HOME/tracelake.duckdb).",
    )
    lock_timeout_s: float | None = Field(
        default=None,
        description="Longest wait, in seconds, for a TraceLake another process holds before the "
        "step fails naming that process (default AACO_LOCK_TIMEOUT_S, else 60).",
    )

    @property
    def lake(self) -> TraceLake:
        return TraceLake(
            self.database,
            lock_timeout_s=self.lock_timeout_s,
            on_wait=get_dagster_logger("aaco.tracelake").warning,
        )

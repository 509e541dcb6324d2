"""The DuckDB TraceLake as a Dagster resource.

It is a `DuckDBResource` (so any asset can `get_connection()` for ad-hoc SQL the Dagster way) whose
writes go through the domain `TraceLake`, which serializes writers across processes.
"""

from dagster_duckdb import DuckDBResource
from pydantic import Field

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.tracelake.store import TraceLake


class TraceLakeResource(DuckDBResource):
    database: str = Field(
        default_factory=lambda: str(AacoPaths.from_env().tracelake),
        description="Path of the TraceLake DuckDB file (AACO_TRACELAKE, default AACO_HOME/tracelake.duckdb).",
    )

    @property
    def lake(self) -> TraceLake:
        return TraceLake(self.database)

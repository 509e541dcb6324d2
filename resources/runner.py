"""How benchmarks are run: target, limits, laboratory mode."""

import os

import dagster as dg
from pydantic import Field

from aaco_pipelines.config import default_target
from aaco_pipelines.execution.runner import RunnerLimits
from aaco_pipelines.stages.measure import MeasureOptions

__all__ = ["BenchmarkRunnerResource", "default_target"]


class BenchmarkRunnerResource(dg.ConfigurableResource):
    target: str = Field(
        default_factory=default_target, description="Execution target name (cpu, gpu0, ...)."
    )
    timeout_s: float = Field(
        default=600.0, description="Kill the measuring process after this long."
    )
    memory_limit_mb: int | None = Field(
        default=None,
        description="Kill the measuring process above this RSS (MiB). Default: derived per "
        "model, 3 x (weights + inputs) + 4 GiB, at most 80% of the host's memory.",
    )
    sample_interval_s: float = Field(
        default=0.05, description="Host telemetry period (0.05 s = 20 Hz)."
    )
    laboratory: bool = Field(
        default_factory=lambda: os.environ.get("AACO_LABORATORY", "0") == "1",
        description="Pin cores, fix thread counts, place in a cgroup when possible (AACO_LABORATORY=1).",
    )
    laboratory_cores: list[int] | None = Field(
        default=None, description="Cores to pin to in laboratory mode."
    )

    def options(self) -> MeasureOptions:
        return MeasureOptions(
            target=self.target,
            laboratory=self.laboratory,
            laboratory_cores=tuple(self.laboratory_cores) if self.laboratory_cores else None,
            limits=RunnerLimits(
                timeout_s=self.timeout_s,
                memory_limit_mb=self.memory_limit_mb,
                sample_interval_s=self.sample_interval_s,
            ),
        )

"""Dagster resources (surfaces): thin configurable handles on the domain library, read from
AACO_* env. They may import any layer of aaco_pipelines; nothing there imports them."""

from resources.records import RecordIOManager
from resources.registry import ModelRegistryResource
from resources.runner import BenchmarkRunnerResource
from resources.tracelake import TraceLakeResource

__all__ = [
    "BenchmarkRunnerResource",
    "ModelRegistryResource",
    "RecordIOManager",
    "TraceLakeResource",
]

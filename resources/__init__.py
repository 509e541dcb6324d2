"""Dagster resources (surfaces): thin configurable handles on the domain library, read from
AACO_* env. They may import any layer of aaco_pipelines; nothing there imports them."""

from aaco_pipelines.resources.alert_webhook import AlertWebhookResource
from aaco_pipelines.resources.records import RecordIOManager
from aaco_pipelines.resources.registry import ModelRegistryResource
from aaco_pipelines.resources.runner import BenchmarkRunnerResource
from aaco_pipelines.resources.tracelake import TraceLakeResource

__all__ = [
    "AlertWebhookResource",
    "BenchmarkRunnerResource",
    "ModelRegistryResource",
    "RecordIOManager",
    "TraceLakeResource",
]

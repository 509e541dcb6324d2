"""The model registry and the AACO home folder, as a Dagster resource."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import RegisteredModel, find_model, scan_registry


class ModelRegistryResource(dg.ConfigurableResource):
    """Where models are registered (AACO_REGISTRY) and where evidence is kept (AACO_HOME)."""

    home: str = Field(
        default_factory=lambda: str(AacoPaths.from_env().home),
        description="AACO_HOME: session bundles, graph store and (by default) registry and TraceLake.",
    )
    registry: str = Field(
        default_factory=lambda: str(AacoPaths.from_env().registry),
        description="AACO_REGISTRY: the folder of *.onnx files with optional sidecars.",
    )
    tracelake: str = Field(
        default_factory=lambda: str(AacoPaths.from_env().tracelake),
        description="AACO_TRACELAKE: the DuckDB file.",
    )

    @property
    def paths(self) -> AacoPaths:
        return AacoPaths(
            home=Path(self.home), registry=Path(self.registry), tracelake=Path(self.tracelake)
        )

    def models(self) -> list[RegisteredModel]:
        return scan_registry(self.paths.registry)

    def model(self, slug: str) -> RegisteredModel:
        return find_model(self.paths.registry, slug)

"""Fixtures of the governance tests: one history of real measured sessions, shared."""

from __future__ import annotations

import pytest

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.pipeline import measure_model
from tests import models
from tests.helpers import SLOWER_LAYERS, STEADY_SIDECAR, add_model, trust_every_measurement


@pytest.fixture(scope="session")
def mlp_swap_template(tmp_path_factory) -> tuple[AacoPaths, list[str]]:
    """Three sessions of the tiny MLP, then one after its file was swapped for a slower one
    (STEADY_SIDECAR), measured once for the run: (paths, session ids). Read only: a module
    works on its own copy (tests.helpers.copy_home)."""
    home = tmp_path_factory.mktemp("mlp_swap")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    ids = []
    for model in (
        models.tiny_mlp(),
        models.tiny_mlp(),
        models.tiny_mlp(),
        models.slower_mlp(SLOWER_LAYERS),
    ):
        path = add_model(paths, "mlp", model, STEADY_SIDECAR)
        ids.append(measure_model(registered_model(path), paths).session_id)
    trust_every_measurement(paths.tracelake)  # these tests are about windows, not this host
    return paths, ids

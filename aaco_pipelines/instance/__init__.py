"""The Dagster instance AACO runs on: DAGSTER_HOME under AACO_HOME, with its dagster.yaml."""

from __future__ import annotations

import shutil
from pathlib import Path

TEMPLATE = Path(__file__).with_name("dagster.yaml")


def prepare_dagster_home(dagster_home: Path) -> Path:
    """Create DAGSTER_HOME with AACO's dagster.yaml unless the user already has one there.

    A persistent DAGSTER_HOME keeps runs, dynamic partitions and sensor cursors across restarts:
    the history that drift detection reads.
    """
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        shutil.copyfile(TEMPLATE, config)
    return dagster_home

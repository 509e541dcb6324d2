"""AACO's Dagster instance config: persistent home and one run per device."""

from __future__ import annotations

import dagster as dg

from aaco_pipelines.instance import prepare_dagster_home


def test_instance_limits_runs_to_one_per_device_and_pools_to_one(tmp_path):
    home = prepare_dagster_home(tmp_path / "dagster")
    (home / "dagster.yaml").write_text((home / "dagster.yaml").read_text())  # user edits survive:
    custom = (home / "dagster.yaml").read_text() + "\n# edited\n"
    (home / "dagster.yaml").write_text(custom)
    prepare_dagster_home(home)
    assert (home / "dagster.yaml").read_text() == custom

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        queue = instance.get_concurrency_config().run_queue_config
        limits = [
            (limit["key"], limit["limit"], limit["value"]) for limit in queue.tag_concurrency_limits
        ]
        per_value = {"applyLimitPerUniqueValue": True}  # a run from the UI has only the second
        assert limits == [("aaco/device", 1, per_value), ("dagster/partition/target", 1, per_value)]
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    finally:
        instance.dispose()

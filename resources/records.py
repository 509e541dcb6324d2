"""The IO manager of the small records AACO's assets hand each other (a session id, the bundle's
path, the metrics): pickled files where Dagster's `fs_io_manager` keeps them, without its log.

`fs_io_manager` writes three debug lines a step ("Writing file at", "Loading 1 partitions",
"Loading partition ... from"). Each is an event in the run's event log, and on the embedded
SQLite instance every event is its own connection and commit: 20 of a per-model run's ~107
events. This one stores the same bytes at the same paths (`<base_dir>/<asset key>/<model>/<target>`
for a model x target partition), so it reads what `fs_io_manager` wrote before and the other
way round, writes through a temporary file (a killed step leaves no half-written record), and
still puts the record's `path` on the materialization.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field


class RecordIOManager(dg.ConfigurableIOManager):
    base_dir: str | None = Field(
        default=None,
        description="Where the records are kept (default: the instance's storage folder, "
        "DAGSTER_HOME/storage, as for fs_io_manager).",
    )

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        base = self._base(context.step_context.instance)
        if context.has_asset_key and context.has_asset_partitions:
            path = _partition_path(base, context.asset_key, context.asset_partition_key)
        else:
            path = self._unpartitioned_path(base, context)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        with open(partial, "wb") as file:
            pickle.dump(obj, file, pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
        if obj is not None:  # as fs_io_manager: no path for an asset that returned nothing
            context.add_output_metadata({"path": dg.MetadataValue.path(str(path))})

    def load_input(self, context: dg.InputContext) -> Any:
        base = self._base(context.instance)
        if not (context.has_asset_key and context.has_asset_partitions):
            return _load(self._unpartitioned_path(base, context))
        keys = context.asset_partition_keys
        if len(keys) == 1:
            return _load(_partition_path(base, context.asset_key, keys[0]))
        return {key: _load(_partition_path(base, context.asset_key, key)) for key in keys}

    def _base(self, instance: dg.DagsterInstance) -> Path:
        return Path(self.base_dir) if self.base_dir else Path(instance.storage_directory())

    @staticmethod
    def _unpartitioned_path(base: Path, context: dg.InputContext | dg.OutputContext) -> Path:
        if context.has_asset_key:
            return base.joinpath(*context.asset_key.path)
        return base.joinpath(*context.get_identifier())  # an op's output, as fs_io_manager


def _partition_path(base: Path, asset_key: dg.AssetKey, partition_key: str) -> Path:
    """fs_io_manager's path: a multi-partition key's values in the order of their dimensions'
    names (model, then target), one folder each."""
    if isinstance(partition_key, dg.MultiPartitionKey):
        parts = [value for _, value in sorted(partition_key.keys_by_dimension.items())]
    else:
        parts = [partition_key]
    if any(part in ("", ".", "..") or "/" in part for part in parts):
        raise ValueError(f"partition key {partition_key!r} cannot name a file")
    return base.joinpath(*asset_key.path, *parts)


def _load(path: Path) -> Any:
    with open(path, "rb") as file:
        return pickle.load(file)

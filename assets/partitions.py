"""Partitions: one dynamic partition per registered model, keyed by its safe slug."""

import dagster as dg

models_partitions = dg.DynamicPartitionsDefinition(name="models")

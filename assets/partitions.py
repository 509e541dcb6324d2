"""Partitions: the per-model assets by model x target (the model's safe slug, and the device that
measures it: cpu, gpu0, ...), both dynamic; and one per night, keyed by the date of the nightly
sweep, for the review of the whole night.

A target exists once a host measures on it: the sensors and `aaco sweep` add this deployment's
own target (AACO_TARGET), `aaco worker --target gpu3` adds its device. A run for a target is
measured on that target's host: its device worker when runs are routed (see README, "Scaling
out"), else this host, which refuses a target that is not its own.
"""

import os

import dagster as dg

models_partitions = dg.DynamicPartitionsDefinition(name="models")
targets_partitions = dg.DynamicPartitionsDefinition(name="targets")
model_target_partitions = dg.MultiPartitionsDefinition(
    {"model": models_partitions, "target": targets_partitions}
)


def model_target_key(slug: str, target: str) -> dg.MultiPartitionKey:
    """The partition of one model on one target (shown as `slug|target`)."""
    return dg.MultiPartitionKey({"model": slug, "target": target})


def model_and_target(partition_key: str) -> tuple[str, str]:
    """(slug, target) of a model x target partition key."""
    keys = model_target_partitions.get_partition_key_from_str(partition_key).keys_by_dimension
    return keys["model"], keys["target"]


# The nightly schedule's time zone, so a night's date is the same for the sweep and its review.
NIGHT_TIMEZONE = os.environ.get("AACO_TIMEZONE", "UTC")
# The nights a sweep ran, added by the nightly schedule as it starts one (and by the review
# sensor for a night it reviews): a fresh install has none, not one "missing" per day since a
# fixed date, and every night listed is one that can be reviewed.
nights_partitions = dg.DynamicPartitionsDefinition(name="nights")
# The run tag the nightly schedule puts on each of a night's measurement runs.
NIGHT_TAG = "aaco/night"

"""Partitions: one dynamic partition per registered model, keyed by its safe slug; and one per
night, keyed by the date of the nightly sweep, for the review of the whole night."""

import os

import dagster as dg

models_partitions = dg.DynamicPartitionsDefinition(name="models")

# The nightly schedule's time zone, so a night's date is the same for the sweep and its review.
NIGHT_TIMEZONE = os.environ.get("AACO_TIMEZONE", "UTC")
# end_offset=1: tonight's partition exists as soon as tonight's sweep starts.
nights_partitions = dg.DailyPartitionsDefinition(
    start_date="2024-01-01", timezone=NIGHT_TIMEZONE, end_offset=1
)
# The run tag the nightly schedule puts on each of a night's measurement runs.
NIGHT_TAG = "aaco/night"

"""AACO Pipelines: a performance observatory for AI inference (domain library, no Dagster here)."""

__version__ = "0.1.0"

"""The environment variables that put the Dagster instance on services (README "Scaling out"):
their names only, so the storages Dagster loads by name can quote them without importing the
instance package's setup."""

POSTGRES_ENV = "AACO_DAGSTER_POSTGRES_URL"
BROKER_ENV = "AACO_CELERY_BROKER"

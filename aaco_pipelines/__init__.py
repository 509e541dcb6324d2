"""AACO Pipelines: a performance observatory for AI inference (the domain library).

Layers, bottom to top; a module imports its own layer and those below, never above, never in a
circle (tests/test_architecture.py checks it):

    foundation  config, errors, sql, stopping, address_space, bundle (the session bundle format)
    storage     tracelake/        the DuckDB TraceLake: schema, writer, named queries
    producers   registry/ graph/ execution/ collectors/ llm/ session_folders
    readers     analysis/ governance/
    stages      stages/           the pipeline, one module per asset, and its runner
    surfaces    report/ cli/ doctor, instance/ and definitions (with assets/ resources/ sensors/)

The Dagster project's folders sit at the top of the repository and install inside this package
(assets/ as aaco_pipelines.assets, likewise resources/ and sensors/; pyproject.toml), so a user's
own `assets` module in the same environment is left alone. No Dagster here but in definitions.py,
instance/ and those three.
"""

__version__ = "0.1.0"

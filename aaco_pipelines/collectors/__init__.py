"""One reader per trace or telemetry source, each returning Arrow tables in the TraceLake schema."""

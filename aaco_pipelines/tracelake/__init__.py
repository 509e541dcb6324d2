"""The TraceLake: one DuckDB file holding every measured session, built from session bundles."""

"""The TraceLake (storage): one DuckDB file, or a shared DuckLake, holding every session.

store.py opens it (short connections, one serialized writer, one transaction per write),
schema.py registers its tables (each defined with its group in tables/), queries.py holds the
named reads the surfaces use. Storage imports only the foundation: it loads no bundle and reads
no trace (stages.load does).
"""

"""One reader per trace or telemetry source (producers), each returning Arrow tables in the
TraceLake schema: ORT profiles, rocprofv3 CSV/JSON/rocpd, rocprof v1, RPD, host and GPU
telemetry, LLM generation records; and the kernel-name families they label kernels with.

Readers parse (with an in-memory DuckDB where SQL is the better parser) and return Arrow, or
insert into a connection they are given; they never open the TraceLake. May import the
foundation, storage (its schema) and the other producers.
"""

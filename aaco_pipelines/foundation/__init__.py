"""What every layer leans on, with no knowledge of sessions or traces: SQL quoting (`sql`),
stop signals (`stopping`), memory limits (`address_space`), files written whole or not at all
(`atomic_file`), passwords masked in emitted text (`redaction`), a PostgreSQL server's failures
as one line (`service_errors`), trying again while a service is away (`patience`), and the
optional parts of the installation (`extras`).
"""

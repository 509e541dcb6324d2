"""What every layer leans on, with no knowledge of sessions or traces: SQL quoting (`sql`),
stop signals (`stopping`), memory limits (`address_space`), files written whole or not at all
(`atomic_file`), passwords masked in emitted text (`redaction`), a PostgreSQL server's failures
as one line (`service_errors`), trying again while a service is away (`patience`), the
optional parts of the installation (`extras`), text quoted back short and harmless
(`quoting`), YAML refused when its aliases explode (`bounded_yaml`), one bounded HTTP POST to
a stranger's endpoint (`bounded_http`), and every environment variable aaco reads
(`environment_variables`).
"""

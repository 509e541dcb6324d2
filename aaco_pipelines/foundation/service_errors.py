"""A PostgreSQL server aaco could not use, as the one-line AacoInputError: which server (host:port,
database, user; never the password), what went wrong and the fix.

The Dagster instance (AACO_DAGSTER_POSTGRES_URL) and the shared TraceLake's catalog
(AACO_DUCKLAKE_CATALOG) meet the same failures, told in libpq's words whether psycopg2 or DuckDB's
postgres extension connected; left alone they end in minutes of retries and a traceback.
"""

from __future__ import annotations

import os
import re

from aaco_pipelines.errors import AacoInputError

UNREACHABLE_FIX = (
    "start PostgreSQL there, or correct host and port in {variable}; then run the command again"
)
# libpq's words for each failure, what it means ({reason}: the words found) and the fix
# ({variable}: where the setting is).
FAILURES = (
    (
        r"password authentication failed|no password supplied|fe_sendauth",
        "refused the password",
        "set the right password in PGPASSWORD or ~/.pgpass (safer than in {variable})",
    ),
    (
        r"database \"[^\"]*\" does not exist",
        "has no database {database}",
        "create it (createdb -h {host} -p {port} -U {user} {database}) or name an existing one "
        "in {variable}",
    ),
    (
        r"role \"[^\"]*\" does not exist",
        "has no user {user}",
        "create the user on the server or name an existing one in {variable}",
    ),
    (
        r"connection refused|timeout expired|could not translate host name|no route to host|"
        r"network is unreachable|server closed the connection unexpectedly|"
        r"the database system is (?:starting up|shutting down|in recovery mode)|"
        r"terminating connection due to administrator command|no connection to the server",
        "is unreachable ({reason})",
        UNREACHABLE_FIX,
    ),
    (  # the same, in words of no particular reason (last: the specific ones come first)
        r"could not connect to server|unable to connect to postgres|connection to server .*failed",
        "is unreachable ({reason})",
        UNREACHABLE_FIX,
    ),
)


def postgres_failure(
    message: str, connection: str, *, service: str, variable: str
) -> AacoInputError | None:
    """The one-line error for `message`, a failure to connect to (or stay connected to) the
    PostgreSQL server of `connection` (a URL or libpq key/value string); None for any other
    error. `service` names what the server is for, `variable` where it is configured."""
    for pattern, problem, fix in FAILURES:
        found = re.search(pattern, message, re.I)
        if found:
            server = server_parts(connection)
            said = problem.format(reason=found.group(0).lower(), **server)
            return AacoInputError(
                f"{service} ({describe(server)}) {said}",
                fix=fix.format(variable=variable, **server),
            )
    return None


def unreachable(message: str) -> bool:
    """Whether libpq's `message` says the server is away, which may heal by itself (a restart,
    a failover), rather than that it refused us (a password, a database), which will not."""
    for pattern, problem, _ in FAILURES:
        if re.search(pattern, message, re.I):
            return problem.startswith("is unreachable")
    return False


def cannot_connect(message: str, connection: str, *, service: str, variable: str) -> AacoInputError:
    """`postgres_failure`, or for a failure libpq told in other words, its first line."""
    known = postgres_failure(message, connection, service=service, variable=variable)
    if known is not None:
        return known
    first = message.strip().splitlines()[0] if message.strip() else "no reason given"
    return AacoInputError(
        f"{service} ({describe(server_parts(connection))}) could not be used: {first}",
        fix=f"check {variable} and the server",
    )


def describe(server: dict[str, str]) -> str:
    """The server as people name it: never its password."""
    where = f"{server['host']}:{server['port']}"
    return f"PostgreSQL at {where}, database {server['database']}, user {server['user']}"


def server_parts(connection: str) -> dict[str, str]:
    """host, port, database and user of a connection string, with libpq's defaults."""
    from psycopg2.extensions import parse_dsn

    dsn = re.sub(r"^([A-Za-z]+)\+[A-Za-z0-9_]+://", r"\1://", connection)  # SQLAlchemy's driver
    try:
        given = parse_dsn(dsn)
    except Exception:  # noqa: BLE001 - an unparsable string still gets its error
        given = {}
    user = given.get("user") or os.environ.get("PGUSER") or _login()
    return {
        "host": given.get("host") or os.environ.get("PGHOST") or "localhost",
        "port": given.get("port") or os.environ.get("PGPORT") or "5432",
        "database": given.get("dbname") or os.environ.get("PGDATABASE") or user,
        "user": user,
    }


def _login() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name: say so
        return "?"


def refuse_unencoded_at(url: str, variable: str) -> None:
    """A URL whose user information holds an unencoded '@' (`postgresql://u:p@ss@host/db`):
    libpq and redis split it at the first '@', take `ss@host` for the host and print it in
    their errors, the password's tail with it, where no mask can see it. Refused naming the
    variable, never the URL."""

    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    if sep and authority.count("@") > 1:
        raise AacoInputError(
            f"the password in {variable} holds an unencoded '@'",
            fix="URL-encode it: '@' is %40 (python3 -c \"import urllib.parse; "
            "print(urllib.parse.quote(input(), safe=''))\")",
        )

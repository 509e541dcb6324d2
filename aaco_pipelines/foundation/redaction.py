"""Connection-string passwords masked in any text aaco emits: errors, doctor rows, bundle files.

Other programs' messages quote connection strings whole (DuckDB's "Unable to connect to Postgres
at ..." carries the DuckLake catalog's), so every text that leaves aaco passes through `redact`.
Two forms are masked: a URL's user information (`postgresql+psycopg2://aaco:SECRET@db/x`,
`redis://:SECRET@broker`) and libpq's key/value form (`password=SECRET`, `password='a b'`, the
key in any case, `PGPASSWORD=` too). It errs towards masking too much: `http://h:80/x@y` loses
`80/x`.
"""

from __future__ import annotations

import re
from pathlib import Path

MASK = "***"

# scheme://user:SECRET@ : the secret runs to the token's last `@`, so an `@` written into a
# password unencoded is masked too; the user part may be empty (redis://:SECRET@host).
_URL = re.compile(r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s]*@")
# password=SECRET or password='SECRET' (libpq quoting: backslash escapes; a quote cut off by a
# truncated message runs to the end).
_KEY_VALUE = re.compile(r"(?P<keep>\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|$)|\S+)", re.I)


def redact(text: str) -> str:
    """`text` with every connection-string password replaced by ***; the rest as it was."""
    text = _URL.sub(lambda m: f"{m['keep']}{MASK}@", text)
    return _KEY_VALUE.sub(lambda m: f"{m['keep']}{MASK}", text)


def redact_values(data):
    """Every string in JSON-like data (dicts, lists) redacted; for files written from it."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {key: redact_values(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [redact_values(value) for value in data]
    return data


def redact_file(path: Path) -> None:
    """A log another program wrote (the measuring process's output), redacted in place."""
    text = path.read_text(errors="replace")
    redacted = redact(text)
    if redacted != text:
        path.write_text(redacted)

"""One redaction of connection-string passwords (URL and libpq key/value forms) for every text
aaco emits, and the one-line PostgreSQL errors that name a server without its password."""

from __future__ import annotations

import json

import pytest

from aaco_pipelines import cli
from aaco_pipelines.bundle.session_bundle import write_json
from aaco_pipelines.cli import main
from aaco_pipelines.cli.doctor_checks import Check
from aaco_pipelines.errors import AacoInputError, MeasuringFailure
from aaco_pipelines.foundation.redaction import redact
from aaco_pipelines.foundation.service_errors import postgres_failure, server_parts

SECRET = "S3ntinel-pw-91"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"postgresql+psycopg2://aaco:{SECRET}@db.example:5432/dagster",
            "postgresql+psycopg2://aaco:***@db.example:5432/dagster",
        ),
        (f"redis://:{SECRET}@broker:6379/0", "redis://:***@broker:6379/0"),
        ("postgresql://p%40ss%3Aword@h/d", "postgresql://p%40ss%3Aword@h/d"),  # a user, no password
        ("postgresql://aaco:p%40ss@h/d", "postgresql://aaco:***@h/d"),  # `@` percent-encoded
        ("postgresql://aaco:p@ss@h/d", "postgresql://aaco:***@h/d"),  # `@` written as is
        (f"amqp://guest:{SECRET}@rabbit//", "amqp://guest:***@rabbit//"),
        (
            f"dbname=lake host=db password={SECRET} user=aaco",
            "dbname=lake host=db password=*** user=aaco",
        ),
        (
            f"dbname=lake password='{SECRET} with spaces' user=aaco",
            "dbname=lake password=*** user=aaco",
        ),
        ("password='it\\'s' port=5", "password=*** port=5"),
        (f"PASSWORD = {SECRET}", "PASSWORD = ***"),
        (f"PGPASSWORD={SECRET} aaco sweep", "PGPASSWORD=*** aaco sweep"),
        (f'at "dbname=x password={SECRET}": refused', 'at "dbname=x password=*** refused'),
        (f"truncated password='{SECRET} and more", "truncated password=***"),
    ],
)
def test_passwords_are_masked_in_both_forms(text, expected):
    assert redact(text) == expected
    assert redact(expected) == expected  # masking twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "postgresql+psycopg2://aaco@127.0.0.1:5432/dagster",  # no password
        "dbname=lake host=db.example user=aaco",
        "http://127.0.0.1:3000/runs/abc",
        'password authentication failed for user "aaco"',  # libpq's words, no secret
        "a user@example.com wrote 3 kernels in 12.5 ms",
    ],
)
def test_text_without_a_password_is_left_as_it_was(text):
    assert redact(text) == text


def test_every_url_of_a_text_is_masked():
    text = (
        f"storage postgresql://aaco:{SECRET}@db/dagster, broker redis://:{SECRET}2@b:6379/0 "
        f"and catalog 'dbname=lake password={SECRET}3'"
    )
    masked = redact(text)
    assert SECRET not in masked
    assert masked.count("***") == 3
    assert "db/dagster" in masked and "b:6379/0" in masked and "dbname=lake" in masked


def test_errors_the_project_raises_carry_no_password():
    error = AacoInputError(
        f"cannot open postgresql://aaco:{SECRET}@db/x",
        path=f"dbname=x password={SECRET}",
        fix=f"not password={SECRET}",
    )
    assert SECRET not in str(error) + error.problem + error.path + error.fix
    assert SECRET not in str(MeasuringFailure(f"measuring process saw redis://:{SECRET}@b/0"))
    row = Check("TraceLake", "problem", f"password={SECRET}", f"see x://u:{SECRET}@h")
    assert SECRET not in row.detail + row.meaning


def test_bundle_files_carry_no_password_and_keep_their_values(tmp_path):
    path = tmp_path / "failure.json"
    data = {"message": f"catalog dbname=x password={SECRET} down", "codes": [1, 2.5, None]}
    write_json(path, {**data, "nested": [{"url": f"redis://:{SECRET}@b/0"}]})
    written = json.loads(path.read_text())
    assert SECRET not in path.read_text()
    assert written["codes"] == [1, 2.5, None] and written["nested"][0]["url"] == "redis://:***@b/0"


def test_a_bugs_traceback_is_printed_redacted(monkeypatch, capsys):
    def crash(args, paths):
        raise RuntimeError(f"library said: dbname=lake password={SECRET} refused")

    monkeypatch.setattr(cli.doctor, "cmd_doctor", crash)
    assert main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError" in err and SECRET not in err


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (
            'connection to server at "127.0.0.1", port 5433 failed: FATAL:  password '
            'authentication failed for user "aaco"',
            ["refused the password", "PGPASSWORD or ~/.pgpass"],
        ),
        (
            'IO Error: Unable to connect to Postgres at "dbname=lake host=127.0.0.1 port=5433 '
            f'password={SECRET}": connection to server at "127.0.0.1", port 5433 failed: '
            "Connection refused\n\tIs the server running on that host?",
            ["is unreachable (connection refused)", "start PostgreSQL there"],
        ),
        (
            'connection to server at "127.0.0.1", port 5433 failed: FATAL:  database "lake" '
            "does not exist",
            ["has no database lake", "createdb -h 127.0.0.1 -p 5433 -U aaco lake"],
        ),
        ('FATAL:  role "aaco" does not exist', ["has no user aaco"]),
    ],
)
def test_a_postgres_failure_is_one_line_naming_the_server(message, words):
    connection = f"dbname=lake host=127.0.0.1 port=5433 user=aaco password={SECRET}"
    error = postgres_failure(message, connection, service="the catalog", variable="AACO_X")
    text = str(error)
    assert "\n" not in text and SECRET not in text
    assert "the catalog (PostgreSQL at 127.0.0.1:5433, database lake, user aaco)" in text
    assert all(word in text for word in words) and "AACO_X" in text


def test_other_errors_are_no_postgres_failure():
    failure = postgres_failure(
        "Catalog Error: Table with name kernels does not exist!",
        "dbname=x",
        service="s",
        variable="v",
    )
    assert failure is None


@pytest.mark.parametrize(
    "connection",
    [
        f"postgresql+psycopg2://aaco:{SECRET}@db.example:6543/dagster",
        f"host=db.example port=6543 dbname=dagster user=aaco password={SECRET}",
    ],
)
def test_a_server_is_described_by_host_port_database_and_user(connection):
    assert server_parts(connection) == {
        "host": "db.example",
        "port": "6543",
        "database": "dagster",
        "user": "aaco",
    }


def test_a_log_another_program_wrote_is_redacted_in_place(tmp_path):
    from aaco_pipelines.foundation.redaction import redact_file

    log = tmp_path / "worker.log"
    log.write_text("loading\nerror: could not connect to postgresql://aaco:Sentinel-77@db/x\n")
    redact_file(log)
    assert log.read_text() == "loading\nerror: could not connect to postgresql://aaco:***@db/x\n"


@pytest.mark.parametrize(
    "variable, url",
    [
        ("AACO_DAGSTER_POSTGRES_URL", "postgresql://aaco:hunt@er2@db.example:5432/dagster"),
        ("AACO_CELERY_BROKER", "redis://:hunt@er2@broker:6379/0"),
    ],
)
def test_an_unencoded_at_in_a_password_is_refused_before_any_service_sees_it(
    tmp_path, monkeypatch, variable, url
):
    """libpq and redis split `user:hunt@er2@host` at the first '@' and print `er2@host` as the
    host they could not reach: the password's tail, where no mask sees it. Refused first,
    naming the variable and never the URL."""
    from aaco_pipelines.instance import prepare_dagster_home

    monkeypatch.setenv("AACO_DAGSTER_POSTGRES_URL", "postgresql://aaco@db.example:5432/dagster")
    monkeypatch.setenv(variable, url)
    with pytest.raises(AacoInputError) as error:
        prepare_dagster_home(tmp_path / "dagster")
    said = str(error.value)
    assert f"the password in {variable} holds an unencoded '@'" in said and "%40" in said
    assert "er2" not in said and "hunt" not in said

"""The Dagster instance on a real PostgreSQL server: one environment variable moves runs, event
logs and dynamic partitions off SQLite, and `aaco sweep` records into it. Its storages wait for a
server that restarts (bounded), and then say in one line which server is away."""

from __future__ import annotations

import threading
import time

import dagster as dg
import psycopg2
import pytest
import sqlalchemy
import yaml

from aaco_pipelines.cli import main
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.instance import POSTGRES_ENV, postgres_url, prepare_dagster_home
from aaco_pipelines.instance.patient_postgres import PatientRunStorage, connect_patiently
from tests import models
from tests.helpers import add_model
from tests.services import away, postgres_server


@pytest.fixture(scope="module")
def postgres():
    with postgres_server() as url:
        yield url


def _rows(url: str, sql: str) -> list[tuple]:
    with psycopg2.connect(url.replace("postgresql+psycopg2", "postgresql")) as con:
        with con.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall()


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("postgresql://u:p@h:5432/d", "postgresql+psycopg2://u:p@h:5432/d"),
        ("postgres://u@h/d", "postgresql+psycopg2://u@h/d"),
        ("postgresql+psycopg2://u@h/d", "postgresql+psycopg2://u@h/d"),
    ],
)
def test_the_driver_is_made_explicit(raw, normalized):
    assert postgres_url(raw) == normalized


@pytest.mark.parametrize("raw", ["postgresql+psycopg://u@h/d", "sqlite:///x.db", "h:5432"])
def test_another_url_is_one_line_naming_the_variable(raw):
    with pytest.raises(AacoInputError, match=POSTGRES_ENV):
        postgres_url(raw)


def test_an_sqlite_home_is_refused_when_postgres_is_asked_for(tmp_path, monkeypatch):
    monkeypatch.delenv(POSTGRES_ENV, raising=False)
    home = prepare_dagster_home(tmp_path / "dagster")  # embedded first
    monkeypatch.setenv(POSTGRES_ENV, "postgresql://u@127.0.0.1/d")
    with pytest.raises(AacoInputError, match="stores on SQLite") as info:
        prepare_dagster_home(home)
    assert "dagster.yaml" in str(info.value)


def test_sweep_records_its_runs_and_partitions_in_postgres(
    aaco_paths, postgres, monkeypatch, capsys
):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv(POSTGRES_ENV, postgres.replace("postgresql+psycopg2", "postgresql"))
    add_model(aaco_paths, "tiny", models.tiny_mlp())

    assert main(["sweep"]) == 0
    capsys.readouterr()

    config = yaml.safe_load((aaco_paths.dagster_home / "dagster.yaml").read_text())
    assert config["run_storage"] == {
        "module": "aaco_pipelines.instance.patient_postgres",
        "class": "PatientRunStorage",
        "config": {"postgres_url": {"env": POSTGRES_ENV}},
    }  # the URL (and its password) is read from the environment, never written down
    assert "aaco/device" in str(config["concurrency"])  # the template's limits are kept
    # Nothing of the instance went to SQLite files in DAGSTER_HOME.
    assert not list(aaco_paths.dagster_home.rglob("*.db"))
    # The server holds the run, its events and the model partition.
    runs = _rows(postgres, "SELECT status FROM runs")
    assert runs == [("SUCCESS",)]
    materialized = _rows(
        postgres,
        "SELECT DISTINCT asset_key FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'",
    )
    assert {key for (key,) in materialized} >= {'["benchmark_run"]', '["tracelake_session"]'}
    assert sorted(
        _rows(postgres, "SELECT partitions_def_name, partition FROM dynamic_partitions")
    ) == [
        ("models", "tiny"),
        ("targets", "cpu"),
    ]
    # ... and a second process on another host reads the same history through the instance.
    with dg.DagsterInstance.from_config(str(aaco_paths.dagster_home)) as instance:
        assert type(instance.run_storage).__name__ == "PatientRunStorage"
        (run,) = instance.get_runs()
        assert run.tags["dagster/partition"] == "tiny|cpu" and run.tags["aaco/trigger"] == "sweep"


def test_a_connection_waits_for_a_server_that_restarts(postgres):
    """Down for 3 s (a restart): the connection is made once it is back, and works."""
    engine = sqlalchemy.create_engine(postgres, poolclass=sqlalchemy.pool.NullPool)
    got: dict = {}

    def connect() -> None:
        started = time.monotonic()
        with connect_patiently(engine, patience_s=60) as connection:
            got["one"] = connection.execute(sqlalchemy.text("SELECT 1")).scalar()
        got["waited_s"] = time.monotonic() - started

    with away(postgres):
        waiting = threading.Thread(target=connect)
        waiting.start()
        time.sleep(3)
        assert waiting.is_alive()  # still waiting: the server is down
    waiting.join(timeout=60)
    assert got["one"] == 1 and got["waited_s"] >= 3, got


def test_a_server_away_past_the_patience_is_one_line_naming_it():
    secret = "S3ntinel-pw-33"
    with postgres_server(password=secret) as url:
        engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        with away(url):
            started = time.monotonic()
            with pytest.raises(AacoInputError) as info:
                connect_patiently(engine, patience_s=2)
            waited = time.monotonic() - started
        wrong = sqlalchemy.create_engine(url.replace(secret, "wrong"))
        started = time.monotonic()
        with pytest.raises(sqlalchemy.exc.OperationalError):
            connect_patiently(wrong, patience_s=60)  # a refusal will not heal: not waited for
        refused_in = time.monotonic() - started
    line = str(info.value)
    assert "the Dagster instance's database" in line and "is unreachable" in line, line
    assert "for over 2 s" in line and POSTGRES_ENV in line and "Fix:" in line, line
    assert secret not in line and "\n" not in line
    assert 1.5 < waited < 10 and refused_in < 10, (waited, refused_in)


def test_the_webservers_held_connection_is_replaced_after_a_restart(postgres):
    """In the webserver dagster-postgres holds one connection open (optimize_for_webserver):
    after PostgreSQL restarted, the next page load failed on it. Pinged at checkout, a dead
    one is replaced and the read works."""
    storage = PatientRunStorage(postgres_url=postgres)
    storage.optimize_for_webserver(statement_timeout=5000, pool_recycle=3600, max_overflow=20)
    runs = len(storage.get_runs())
    assert storage._engine.pool.checkedin() == 1  # held
    with away(postgres):
        pass  # a restart: the held connection is dead
    assert len(storage.get_runs()) == runs

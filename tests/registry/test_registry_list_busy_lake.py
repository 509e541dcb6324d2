"""`aaco registry list` while another process holds the TraceLake (issue 26, item 6): it used
to print every model with 0 versions and exit 0, as if none had ever been measured. The
registry is still listed (it does not depend on the lake), every history cell is "?", and a
note says the lake is busy, who holds it and the fix."""

from __future__ import annotations

import datetime as dt

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import store_sessions
from tests.tracelake.test_lake_locks import holding


@pytest.mark.timeout(60)
def test_a_busy_lake_marks_the_history_unknown_and_says_why(aaco_paths, capsys, monkeypatch):
    monkeypatch.setenv("AACO_LOCK_TIMEOUT_S", "1")
    models.save(models.tiny_mlp(), aaco_paths.registry / "mlp.onnx")
    lake = TraceLake(aaco_paths.tracelake)
    started = dt.datetime.now(dt.timezone.utc)
    session = {"session_id": "s1", "model_slug": "mlp", "model_sha256": "a", "started_at": started}
    store_sessions(lake, [session])
    assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    assert next(line.split() for line in out.splitlines() if line.split()[:1] == ["mlp"])[3] == "1"

    with holding(lake.path, "read_write") as shell:  # e.g. `duckdb tracelake.duckdb`
        assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["mlp"])
    assert row[3:] == ["?", "?", "?", "?"]  # never "0": the history is unknown, not empty
    [note] = [line for line in out.splitlines() if line.startswith("versions and history")]
    assert note.startswith("versions and history unknown (?): the TraceLake is busy: ")
    assert f"pid {shell.pid}" in note and "Fix: " in note and str(lake.path) in note

"""`aaco diff --structure A B`: two analysed sessions of one model aligned node by node, as
text (a headline, then tables) or JSON; bad input is one line and exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages.attribute import attribute
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import FAST_SIDECAR, add_model

NO_GELU_FUSION = ("GeluFusion", "GeluFusionL1", "GeluFusionL2")


@pytest.fixture(scope="module")
def block_home(tmp_path_factory):
    """The transformer block analysed twice: every fusion, then without the GELU fusion (the
    newer session)."""
    home = tmp_path_factory.mktemp("cli_structure")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    lake, ids = TraceLake(paths.tracelake), []
    for disabled in ((), NO_GELU_FUSION):
        sidecar = dataclasses.replace(FAST_SIDECAR, disabled_optimizers=disabled)
        path = add_model(paths, "block", models.transformer_block(), sidecar)
        bundle = measure_model(registered_model(path), paths)
        attribute(lake, bundle)
        ids.append(bundle.session_id)
    return paths, ids


@pytest.fixture
def block_ids(block_home, monkeypatch):
    paths, ids = block_home
    monkeypatch.setenv("AACO_HOME", str(paths.home))
    monkeypatch.setenv("AACO_TRACELAKE", str(paths.tracelake))
    return ids


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_structure_prints_the_lost_fusion_first_then_its_tables(block_ids, capsys):
    fused, apart = block_ids
    code, out, err = _run(capsys, "diff", "--structure", fused, "latest")
    assert code == 0 and not err
    headline, sessions = out.splitlines()[:2]
    assert headline.startswith("1 fusion lost, 0 gained; 0 nodes changed kernel count; ")
    assert " ms at gelu (Gelu fusion lost; 95% CI " in headline
    assert f"A {fused} -> B {apart}" in sessions
    table = out[out.index("fusion changes (1)") :].splitlines()
    assert table[1].split()[:4] == ["change", "A", "B", "at"]
    assert table[2].split()[:6] == ["lost", "Gelu", "apart", "gelu", "5", "1"]
    assert "kernels only one side ran" in out and "time per node" in out


def test_structure_as_json(block_ids, capsys):
    fused, apart = block_ids
    code, out, _ = _run(capsys, "diff", "--structure", fused, apart, "--json")
    diff = json.loads(out)
    assert code == 0 and (diff["session_a"], diff["session_b"]) == (fused, apart)
    [lost] = diff["fusions"]
    assert (lost["change"], lost["label"], lost["where"]) == ("lost", "Gelu", "gelu")
    assert lost["ci_low_ms"] <= lost["ci_high_ms"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--baseline", "x"), "--baseline belong to the gate"),
        (("--paired",), "--paired belong to the gate"),
    ],
)
def test_structure_refuses_the_gates_options(block_ids, capsys, extra, message):
    code, out, err = _run(capsys, "diff", "--structure", *block_ids, *extra)
    assert code == 2 and not out and message in err and len(err.splitlines()) == 1


def test_structure_of_an_unknown_session_is_one_line(block_ids, capsys):
    code, out, err = _run(capsys, "diff", "--structure", block_ids[0], "ghost")
    assert code == 2 and not out
    assert err.startswith("aaco: error: ") and "no session 'ghost'" in err
    assert len(err.splitlines()) == 1


def test_structure_takes_exactly_two_sessions(block_ids, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["diff", "--structure", block_ids[0]])
    assert exit_.value.code == 2 and "expected 2 arguments" in capsys.readouterr().err

"""The `aaco` command line: zoo, registry, one measured run, and one-line errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from aaco_pipelines.cli import main
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SHARED, add_model


def test_zoo_build_if_empty_and_registry_list(aaco_paths, capsys):
    assert main(["zoo", "build", "--if-empty"]) == 0
    written = sorted(p.name for p in aaco_paths.registry.glob("*.onnx"))
    assert len(written) == 7 and "llama_decoder.onnx" in written
    mtimes = {p: p.stat().st_mtime_ns for p in aaco_paths.registry.iterdir()}
    assert main(["zoo", "build", "--if-empty"]) == 0
    assert {p: p.stat().st_mtime_ns for p in aaco_paths.registry.iterdir()} == mtimes
    capsys.readouterr()
    assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    assert "7 models" in out and "bert_encoder" in out and "bert_encoder.yaml" in out
    assert "last verdict" in out and "no TraceLake" in out  # no sessions yet, and it says so
    assert not aaco_paths.tracelake.exists()


def test_run_measures_a_model_file_into_the_tracelake(aaco_paths, capsys):
    path = add_model(aaco_paths, "tiny", models.tiny_mlp())
    assert main(["run", "--model", str(path), "--iterations", "7", "--no-profile"]) == 0
    captured = capsys.readouterr()
    assert "measured pass: 7 iterations" in captured.err and "analysing" in captured.err
    bars = re.findall(r"\[([#-]{20})\]", captured.err)  # the stage progress bar fills up
    assert bars and bars == sorted(bars, key=lambda b: b.count("#")) and bars[-1] == "#" * 20
    summary = dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in captured.out.splitlines()[1:]
    )
    assert summary["iterations"] == "7" and summary["provider"] == "CPUExecutionProvider"
    assert summary["latency p50"].endswith(" ms") and summary["bottleneck"] != "-"
    first = captured.out.splitlines()[1].strip()  # whether the numbers can be trusted, first
    assert (
        first.startswith("measurement")
        and "7 iterations" in summary["measurement"]
        or ("SUSPECT" in summary["measurement"])
    ), first
    rows = TraceLake(aaco_paths.tracelake).query(
        "SELECT model_slug, measured_iterations, profiled_iterations FROM sessions"
    )
    assert rows.to_pylist() == [
        {"model_slug": "tiny", "measured_iterations": 7, "profiled_iterations": 1}
    ]
    assert main(["registry", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    tiny = next(line.split() for line in listed if line.split()[0] == "tiny")
    assert tiny[3] == "1" and "ms" in tiny and tiny[-1] == "insufficient_history"


def test_run_refuses_an_unavailable_provider(aaco_paths, capsys):
    path = add_model(aaco_paths, "tiny", models.tiny_mlp())
    assert main(["run", "--model", str(path), "--provider", "tensorrt"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'tensorrt'" in err and "Fix: use one of cpu" in err


def test_run_refuses_laboratory_cores_that_are_not_core_numbers(aaco_paths, capsys):
    path = add_model(aaco_paths, "tiny", models.tiny_mlp())
    assert main(["run", "--model", str(path), "--laboratory-cores", "1,x"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'1,x'" in err and "--laboratory-cores 1,3" in err
    assert not aaco_paths.tracelake.exists()  # refused before anything was measured


def test_export_mistakes_are_one_line_errors(aaco_paths, tmp_path, capsys):
    output = str(tmp_path / "trace.json")
    for argv, expected in (
        (["export", "--output", output], "no TraceLake"),
        (["export", "--format", "svg", "--output", output], "unknown export format 'svg'"),
        (["export", "--output", str(tmp_path / "no" / "t.json")], "output folder does not exist"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and expected in err and "Fix:" in err


def test_user_errors_are_one_line_with_the_fix(aaco_paths, tmp_path):
    corrupt = models.write_corrupt_model(tmp_path / "broken.onnx")
    env = {**os.environ, "AACO_HOME": str(aaco_paths.home)}
    aaco = Path(sys.executable).with_name("aaco")
    result = subprocess.run(
        [str(aaco), "run", "--model", str(corrupt)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert str(corrupt) in result.stderr and "Fix:" in result.stderr
    missing = subprocess.run(
        [str(aaco), "run", "--model", "nope"], env=env, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no model 'nope' in the registry" in missing.stderr


def test_duckdbs_own_out_of_memory_anywhere_is_one_line(aaco_paths, monkeypatch, capsys):
    """DuckDB runs out of memory in the analysis after a trace's read (label_kernels, an
    attribution query), not only in the read that turns it into a MemoryError: the same one
    line, never a traceback (2 ingests in 3 under a tight limit printed one)."""
    import duckdb

    from aaco_pipelines.stages import pipeline

    def analysis_out_of_memory(*args, **kwargs):
        con = duckdb.connect(config={"memory_limit": "16MB", "threads": "1"})
        con.execute(
            "SELECT count(DISTINCT i::VARCHAR || repeat('x', 100)) FROM range(3000000) t(i)"
        ).fetchall()

    monkeypatch.setattr(pipeline, "ingest_and_analyze", analysis_out_of_memory)
    trace = SHARED / "samples" / "profilers" / "hpctraining_mi250_laplacian_rocprofv1_results.csv"
    assert main(["ingest", str(trace)]) == 2
    said, error = capsys.readouterr().err.splitlines()  # what it does, then the one line
    assert said == f"aaco ingest: reading {trace} ..."
    assert error.startswith("aaco: error: out of memory"), error

"""`aaco export` and `aaco report` replace only what --output names when it is a new path or a
regular file: a device, a FIFO, a link or a folder is refused in one line and left as it was,
and a write that fails half-way leaves the earlier file whole."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aaco_pipelines.cli import main
from aaco_pipelines.report.output_file import replacing
from tests.helpers import SHARED, fill

KERNEL_CSV = SHARED / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
COMMANDS = {
    "export": ["export"],
    "report": ["report", "--format", "json"],
}


@pytest.fixture(scope="module")
def ingested_trace_home(tmp_path_factory) -> Path:
    """An AACO_HOME with one ingested and analysed session (the sLLM kernel trace)."""
    home = tmp_path_factory.mktemp("outputs") / "aaco"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AACO_HOME", str(home))
        env.delenv("AACO_TRACELAKE", raising=False)
        env.delenv("AACO_REGISTRY", raising=False)
        assert main(["ingest", str(KERNEL_CSV), "--name", "sllm"]) == 0
    return home


@pytest.fixture
def aaco(ingested_trace_home, monkeypatch, capsys):
    """`aaco <command> --output PATH`: (exit code, stderr)."""
    monkeypatch.setenv("AACO_HOME", str(ingested_trace_home))
    monkeypatch.delenv("AACO_TRACELAKE", raising=False)
    capsys.readouterr()

    def run(command: str, output: Path) -> tuple[int, str]:
        code = main([*COMMANDS[command], "--output", str(output)])
        return code, capsys.readouterr().err

    return run


def _device(path: Path) -> Path:
    """A character device like /dev/full (1, 7), made in the test's folder: a regression must
    not turn the machine's own /dev/full into a file."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("cannot make a device file here (needs CAP_MKNOD)")
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _link_to_file(path: Path) -> Path:
    (path.parent / "target.json").write_text("keep me")
    path.symlink_to(path.parent / "target.json")
    return path


def _dangling_link(path: Path) -> Path:
    path.symlink_to(path.parent / "nothing.json")
    return path


OUTPUTS = {
    "device": (_device, stat.S_ISCHR),
    "fifo": (_fifo, stat.S_ISFIFO),
    "folder": (_folder, stat.S_ISDIR),
    "link to a file": (_link_to_file, stat.S_ISLNK),
    "dangling link": (_dangling_link, stat.S_ISLNK),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", OUTPUTS)
def test_only_a_new_path_or_a_regular_file_is_replaced(aaco, tmp_path, command, kind):
    make, still = OUTPUTS[kind]
    output = make(tmp_path / "out.json")
    code, err = aaco(command, output)
    assert code == 2 and err.startswith("aaco: error: ") and err.count("\n") == 1, err
    assert str(output) in err and "Fix:" in err
    assert still(os.lstat(output).st_mode)  # left as it was
    if kind == "link to a file":
        assert (tmp_path / "target.json").read_text() == "keep me"
    if kind == "dangling link":
        assert not (tmp_path / "nothing.json").exists()
    if kind == "folder":
        assert list(output.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out.json"] + (["target.json"] if kind == "link to a file" else [])
    )  # nothing half-written beside it


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_in_proc_is_refused_in_one_line(aaco, command):
    """As root every permission check passes; /proc/version is a regular file nobody can
    replace, which stands for an unwritable output."""
    output = Path("/proc/version")
    before = output.read_text()
    code, err = aaco(command, output)
    assert code == 2 and err.startswith("aaco: error: ") and err.count("\n") == 1, err
    assert str(output) in err and "Fix:" in err
    assert output.read_text() == before


@pytest.mark.parametrize("command", COMMANDS)
def test_a_write_that_runs_out_of_space_leaves_the_earlier_file(aaco, full_disk, command):
    output = full_disk / "out.json"
    output.write_text('{"earlier": true}')
    fill(full_disk, leave_bytes=1024)  # the report is ~15 KB, the export ~100 KB
    code, err = aaco(command, output)
    assert code == 2 and err.startswith("aaco: error: ") and err.count("\n") == 1, err
    assert "no space left" in err and str(output) in err
    assert json.loads(output.read_text()) == {"earlier": True}
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "out.json"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_regular_file_is_replaced_whole(aaco, tmp_path, command):
    output = tmp_path / "out.json"
    output.write_text("earlier")
    code, err = aaco(command, output)
    assert code == 0, err
    assert json.loads(output.read_text())  # the new content, valid JSON
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


WRITER = """
import os, signal, sys, time
from pathlib import Path
from aaco_pipelines.report.output_file import replacing
with replacing(Path(sys.argv[1])) as out:
    out.write("half of it")
    out.flush()
    print("writing", flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
"""


def test_a_killed_writers_partial_file_goes_with_the_next_write(tmp_path):
    """`kill -9` in the middle of an export leaves its partial file beside the output (nothing
    runs to remove it); the next write of that output removes it, but never the partial file of
    a writer still at work."""
    output = tmp_path / "trace.json"
    killed = subprocess.run(
        [sys.executable, "-c", WRITER, str(output), "kill"], capture_output=True, text=True
    )
    assert killed.returncode == -signal.SIGKILL and killed.stdout == "writing\n"
    [abandoned] = tmp_path.glob(".trace.json.*.partial")
    live = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(output), "live"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout.readline() == "writing\n"
        [working] = set(tmp_path.glob(".trace.json.*.partial")) - {abandoned}
        with replacing(output) as out:  # both look new: left, in case a writer is starting
            out.write("first")
        assert abandoned.exists() and working.exists()
        hour_ago = time.time() - 3600
        for partial in (abandoned, working):
            os.utime(partial, (hour_ago, hour_ago))
        with replacing(output) as out:
            out.write("whole")
        assert output.read_text() == "whole"
        assert not abandoned.exists() and working.exists()
    finally:
        live.kill()
        live.wait()
        live.stdout.close()

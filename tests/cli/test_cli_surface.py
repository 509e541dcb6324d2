"""The command line as a tool among others (issue 45): an example in every `--help` that really
parses, `--version` with the commit and the runtimes' versions, shell completion, colour on a
terminal only, and the first line of `aaco run` / `aaco ingest` before the heavy imports while
the list commands make none of them."""

from __future__ import annotations

import argparse
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from aaco_pipelines import __version__
from aaco_pipelines.cli import build_parser, main
from aaco_pipelines.cli import version as cli_version
from aaco_pipelines.cli.common import colour_wanted, coloured, examples_of
from tests import models
from tests.helpers import REPO, SHARED, add_model

AACO = Path(sys.executable).with_name("aaco")
HEAVY = ("onnx", "scipy", "matplotlib", "dagster")
SHELL_OPERATORS = {">", ">>", "|", "&&", ";"}


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command words, parser) of the top-level parser and every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_help_ends_with_examples_that_parse():
    seen = 0
    for path, parser in _parsers(build_parser()):
        examples = examples_of(parser)
        name = " ".join(("aaco", *path))
        assert examples, f"`{name} --help` has no example"
        assert f"\nexamples:\n  {examples[0]}" in parser.format_help()
        for example in examples:
            words = shlex.split(example)
            if any(w in SHELL_OPERATORS for w in words):
                words = words[: min(words.index(w) for w in words if w in SHELL_OPERATORS)]
            assert words[0] == "aaco", example
            if not path:
                continue  # the top level's examples are each some subcommand's
            args = build_parser().parse_args(words[1:])  # exits (SystemExit) if it cannot
            assert words[1 : 1 + len(path)] == list(path), f"{example!r} is not `{name}`'s"
            assert hasattr(args, "func"), example
            seen += 1
    assert seen > 40


def test_version_names_the_commit_and_the_runtimes():
    result = subprocess.run([str(AACO), "--version"], capture_output=True, text=True)
    line = result.stdout.strip()
    match = re.fullmatch(
        r"aaco (\S+) \(commit (\w+)\) onnxruntime (.+) dagster (\S+) duckdb (\S+)", line
    )
    assert result.returncode == 0 and match, line
    assert match[1] == __version__
    assert match[4] == metadata.version("dagster") and match[5] == metadata.version("duckdb")
    assert (
        match[3].split()[0]
        == cli_version.distribution_version(*cli_version.ONNXRUNTIME_DISTRIBUTIONS).split()[0]
    )
    if (REPO / ".git").exists() and shutil.which("git"):
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert match[2] == (head or "unknown")


def test_version_outside_a_checkout_says_unknown(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "aaco_pipelines"
    package.mkdir(parents=True)
    assert cli_version.checkout_commit(package) is None
    monkeypatch.setattr(cli_version, "checkout_commit", lambda: None)
    assert cli_version.version_line().startswith(f"aaco {__version__} (commit unknown) ")
    assert cli_version.distribution_version("no-such-distribution-here") is None


# --- shell completion --------------------------------------------------------------------------


def _bash_complete(script: Path, *words: str, cwd: Path | None = None) -> list[str]:
    """What bash completes for `aaco WORDS...` (the last word being typed) with the script."""
    line = " ".join(shlex.quote(w) for w in ("aaco", *words))
    command = (
        f"source {shlex.quote(str(script))}; COMP_WORDS=({line}); "
        f"COMP_CWORD={len(words)}; COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}; "
        '_shtab_aaco; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes_commands_options_and_paths(tmp_path, capsys):
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "aaco.bash"
    script.write_text(capsys.readouterr().out)
    assert "sessions" in _bash_complete(script, "ses")
    assert _bash_complete(script, "registry", "l") == ["list"]
    assert "--model" in _bash_complete(script, "run", "--mo")
    assert set(_bash_complete(script, "report", "--format", "")) == {"html", "json", "md"}
    (tmp_path / "trace_dir").mkdir()
    (tmp_path / "trace.rpd").touch()
    found = _bash_complete(script, "ingest", "tra", cwd=tmp_path)  # paths from where it runs
    assert {"trace.rpd", "trace_dir"} <= set(found) or {"trace.rpd", "trace_dir/"} <= set(found)


def test_zsh_and_tcsh_scripts_are_generated(capsys):
    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert zsh.startswith("#compdef aaco") and "sessions" in zsh and "_files" in zsh
    assert main(["completion", "tcsh"]) == 0
    assert "complete aaco" in capsys.readouterr().out


# --- colour ------------------------------------------------------------------------------------


def test_colour_only_on_a_terminal_and_never_with_no_color():
    class Terminal:
        def isatty(self):
            return True

    assert colour_wanted(Terminal(), {})
    assert not colour_wanted(Terminal(), {"NO_COLOR": "1"})
    assert not colour_wanted(Terminal(), {"TERM": "dumb"})
    assert not colour_wanted(open(os.devnull, "w"), {})  # noqa: SIM115 - closed at exit
    painted = coloured("measurement SUSPECT: busy; verdict regression, objectives 1 met")
    assert "\x1b[" in painted and re.sub(r"\x1b\[[\d;]*m", "", painted) == (
        "measurement SUSPECT: busy; verdict regression, objectives 1 met"
    )
    assert coloured("no verdict words here") == "no verdict words here"
    assert "\x1b[" not in coloured("suspected_cause pass_rate")  # whole words only


def _on_a_terminal(argv: list[str], env: dict) -> str:
    """What the command prints with a pseudo-terminal as stdout."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        try:
            chunk = os.read(leader, 65536) if ready else b""
        except OSError:  # the terminal closed: the command ended
            chunk = b""
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_doctor_is_coloured_on_a_terminal_and_plain_when_piped_or_no_color(aaco_paths):
    env = {**os.environ, "AACO_HOME": str(aaco_paths.home), "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    coloured_out = _on_a_terminal([str(AACO), "doctor"], env)
    assert "\x1b[" in coloured_out and "OK" in coloured_out
    assert "\x1b[" not in _on_a_terminal([str(AACO), "doctor"], {**env, "NO_COLOR": "1"})
    piped = subprocess.run([str(AACO), "doctor"], env=env, capture_output=True, text=True)
    assert piped.returncode == 0 and "OK" in piped.stdout and "\x1b[" not in piped.stdout


# --- what each command imports before it prints --------------------------------------------------


def _imported(stderr: str) -> list[str]:
    return [
        line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if "import time:" in line
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["registry", "list"],
        ["alert", "list"],
        ["sessions"],
        ["baseline", "list"],
    ],
)
def test_list_commands_import_no_analysis_stack(measured_mlp_home, argv):
    env = {**os.environ, "AACO_HOME": str(measured_mlp_home.paths.home)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "aaco_pipelines.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    heavy = [m for m in _imported(result.stderr) if m.split(".")[0] in HEAVY]
    assert heavy == [], f"aaco {' '.join(argv)} imported {heavy[:5]}"


def _first_line_then_stop(argv: list[str], env: dict) -> list[str]:
    """The command's stderr (Python's -X importtime lines among its own) until the pipeline is
    imported; then the command is stopped."""
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "aaco_pipelines.cli", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 120
    try:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if (
                line.rstrip().endswith("aaco_pipelines.stages.pipeline")
                or time.monotonic() > deadline
            ):
                break
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # its own group: nothing measured yet
        process.wait()
    return lines


@pytest.mark.parametrize("command", ["run", "ingest"])
def test_run_and_ingest_say_what_they_do_before_the_heavy_imports(aaco_paths, command):
    add_model(aaco_paths, "tiny", models.tiny_mlp())
    trace = SHARED / "samples" / "profilers" / "sllm_r9700_decode_attn_564735_kernel_trace.csv"
    argv = ["run", "--model", "tiny"] if command == "run" else ["ingest", str(trace)]
    lines = _first_line_then_stop(argv, {**os.environ, "AACO_HOME": str(aaco_paths.home)})
    said = [i for i, line in enumerate(lines) if line.startswith(f"aaco {command}: ")]
    heavy = [
        i
        for i, line in enumerate(lines)
        if "import time:" in line and line.rsplit("|", 1)[1].strip().split(".")[0] in HEAVY
    ]
    assert said and heavy, lines[-5:]
    assert said[0] < heavy[0], f"{lines[heavy[0]]} came before {lines[said[0]]}"

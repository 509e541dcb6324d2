"""The `aaco` command line: measure, ingest, report, gate and inspect from a terminal or a CI job.

User mistakes are one line with the fix (exit 2), never a traceback. Every error text it prints,
a bug's traceback too, is redacted: no connection-string password reaches the terminal.

Here: the parser and `main` (the console script `aaco`). The commands live by family:
registry (zoo build, registry list), measuring (run, ingest), sessions, reports (export, report), opening (open),
governance (diff, baseline), alerts (alert), bisect, whatif, detector (detector arl|design), services (ui, worker, sweep),
doctor, evidence (verify), restore and completion; version answers --version; common holds what
they share (tables, --json, colour, the examples every --help ends with). Each imports its heavy
modules inside its commands, so every command starts in well under 0.5 s, and `aaco run` and
`aaco ingest` say what they do before they import the pipeline. A surface: it calls the stages'
pipeline, the readers and tracelake.queries, and runs no SQL of its own."""

from __future__ import annotations

import argparse
import sys
import traceback

from aaco_pipelines.cli import (
    alerts,
    bisect,
    cluster,
    completion,
    detector,
    doctor,
    evidence,
    governance,
    measuring,
    opening,
    registry,
    reports,
    restore,
    services,
    sessions,
    whatif,
)
from aaco_pipelines.cli.common import with_examples
from aaco_pipelines.cli.version import VersionAction
from aaco_pipelines.config import AacoPaths, old_home_notice
from aaco_pipelines.errors import AacoInputError, Interrupted, MeasuringFailure, out_of_space
from aaco_pipelines.foundation.address_space import (
    address_space_limit,
    describe_limit,
    fit_address_space,
    require_headroom,
)
from aaco_pipelines.foundation.extras import missing_extra
from aaco_pipelines.foundation.redaction import redact
from aaco_pipelines.foundation.stopping import exit_code, stop_on_signals

DESCRIPTION = """The `aaco` command line: measure, ingest, report, gate and inspect from a terminal or a CI job.

User mistakes are one line with the fix (exit 2), never a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aaco", description=DESCRIPTION)
    parser.add_argument("--version", action=VersionAction)
    with_examples(
        parser,
        "aaco run --model resnet_cnn",
        "aaco sessions --model resnet_cnn",
        "aaco diff --current latest --fail-on-regression",
        "aaco completion bash > ~/.local/share/bash-completion/completions/aaco",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    # In the order `aaco --help` lists them.
    registry.add_parser(sub)  # zoo, registry
    measuring.add_parser(sub)  # run, ingest
    sessions.add_parser(sub)
    services.add_parser(sub)  # ui, worker
    detector.add_parser(sub)
    reports.add_parser(sub)  # export, report
    opening.add_parser(sub)  # open
    governance.add_parser(sub)  # diff, baseline
    alerts.add_parser(sub)  # alert list|show|ack|invalid|fixed|deliver
    bisect.add_parser(sub)
    whatif.add_parser(sub)
    services.add_sweep_parser(sub)
    cluster.add_parser(sub)  # cluster up|env|status|down
    doctor.add_parser(sub)
    evidence.add_parser(sub)  # verify
    restore.add_parser(sub)
    completion.add_parser(sub, parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`aaco`: the command's exit status. An error nobody foresaw still prints its traceback
    (exit 1, as Python would), redacted: a library's message may quote a connection string."""
    try:
        return _main(argv)
    except Exception as exc:  # noqa: BLE001 - printed as Python would, without passwords
        print(redact("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    paths = AacoPaths.from_env()
    notice = old_home_notice(paths)
    if notice:
        print(notice, file=sys.stderr)
    stop_on_signals()
    try:
        fit_address_space()  # before any thread starts
        require_headroom()
        return args.func(args, paths)
    except (AacoInputError, MeasuringFailure) as exc:
        print(f"aaco: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an extra this host's install left out
        missing = missing_extra(exc.name)
        if missing is None:
            raise
        print(f"aaco: error: {missing}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        kept = f"; the unfinished session is kept in {exc.evidence_dir}" if exc.evidence_dir else ""
        print(f"aaco: stopped by {exc.signal_name}{kept}", file=sys.stderr)
        return exit_code(exc)
    except OSError as exc:
        problem = out_of_space(exc, paths.home)
        if problem is None:
            raise
        print(f"aaco: error: {problem}", file=sys.stderr)  # an AacoInputError: redacted
        return 2
    except Exception as exc:  # noqa: BLE001 - out of memory in any of its guises, else raised
        if not _out_of_memory(exc):
            raise
        print(
            "aaco: error: out of memory in the aaco process. Fix: raise the memory limit "
            f"(ulimit -v is {describe_limit()}) or measure a smaller model",
            file=sys.stderr,
        )
        return 2


def _out_of_memory(exc: Exception) -> bool:
    """Python's MemoryError (numpy's, pyarrow's), DuckDB's own out-of-memory error from any
    query (not only the trace read that turns it into a MemoryError: label_kernels, an
    analysis), or the address-space limit in disguise (below)."""
    if isinstance(exc, MemoryError):
        return True
    kind = type(exc)
    if "duckdb" in kind.__module__ and kind.__name__ == "OutOfMemoryException":
        return True
    return isinstance(exc, ImportError | RuntimeError | SystemError) and _out_of_address_space(exc)


def _out_of_address_space(exc: ImportError | RuntimeError | SystemError) -> bool:
    """A native library that could not be mapped, a thread whose stack could not be, or an
    extension module whose allocation failed without saying so while it loaded (pyarrow under
    300 MiB, now and then: "error return without exception set"): the address-space limit, not
    a missing package or a bug."""
    message = str(exc).lower()
    if isinstance(exc, SystemError):
        return "without exception set" in message and address_space_limit() is not None
    if isinstance(exc, RuntimeError):
        return "can't start new thread" in message and address_space_limit() is not None
    return "failed to map segment" in message or "cannot allocate memory" in message

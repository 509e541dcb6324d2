"""`aaco export` (a session's timeline as a Perfetto trace) and `aaco report` (a session's
report as HTML, JSON or Markdown, to a file or the terminal), each refusing a session whose
bundle changed (cli.evidence)."""

from __future__ import annotations

from pathlib import Path

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def cmd_export(args, paths: AacoPaths) -> int:
    """One session as a trace file for ui.perfetto.dev (streamed: big traces stay cheap):
    Chrome trace-event JSON, or Perfetto's own protobuf format, several times smaller."""
    from aaco_pipelines.cli.evidence import checked_session
    from aaco_pipelines.report.output_file import check_output
    from aaco_pipelines.report.perfetto import FORMATS, write_perfetto
    from aaco_pipelines.report.perfetto_proto import write_perfetto_proto
    from aaco_pipelines.tracelake.store import TraceLake

    if args.format not in FORMATS:
        raise AacoInputError(
            f"unknown export format {args.format!r}", fix="use --format perfetto or perfetto-proto"
        )
    output = check_output(Path(args.output))  # before the lake is read
    session = checked_session(paths, args.session)
    write = write_perfetto_proto if args.format == "perfetto-proto" else write_perfetto
    count = write(TraceLake(paths.tracelake), session, output)
    print(f"wrote {count} events to {output} (open it in https://ui.perfetto.dev)")
    return 0


def add_export_parser(sub) -> None:
    export = sub.add_parser("export", help="export a session's timeline (Perfetto trace)")
    export.add_argument("--session", default="latest", help="session id, or latest (latest)")
    export.add_argument(
        "--format",
        default="perfetto",
        help="perfetto (Chrome trace-event JSON) or perfetto-proto (Perfetto's protobuf trace, "
        "for .perfetto-trace/.pftrace files: about a third of the JSON's size)",
    )
    export.add_argument("--output", required=True, help="file to write")
    export.set_defaults(func=cmd_export)


REPORT_FORMATS = ("html", "json", "md")
STDOUT = "-"


def report_output(output: str | None, report_format: str, session_id: str) -> Path | None:
    """Where the report goes: the file --output names; the terminal (None) for "-", and for
    Markdown and JSON without --output (to read or pipe); an HTML page, which a terminal cannot
    show, without --output to <session id>.html in the current folder."""
    if output == STDOUT or (output is None and report_format != "html"):
        return None
    return Path(output) if output is not None else Path.cwd() / f"{session_id}.html"


def cmd_report(args, paths: AacoPaths) -> int:
    """One session's report: a self-contained HTML page, JSON data or Markdown. A file is
    opened (beside its path, renamed at the end) before the report is rendered."""
    from aaco_pipelines.cli.evidence import checked_session
    from aaco_pipelines.report.output_file import replacing

    session = checked_session(paths, args.session)  # before the output is opened
    output = report_output(args.output, args.format, session)
    if output is None:
        to_terminal(render_report(paths, session, args.format))
        return 0
    with replacing(output) as handle:
        text = render_report(paths, session, args.format)
        handle.write(text)
    print(f"wrote {args.format} report ({len(text.encode()) // 1024} KB) to {output}")
    return 0


def to_terminal(text: str) -> None:
    """Print to stdout; a reader that stops early (`| head`) ends the printing quietly, as it
    does for any Unix tool, never with a traceback."""
    import os
    import sys

    try:
        print(text.rstrip("\n"), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit


def render_report(paths: AacoPaths, session: str, report_format: str) -> str:
    """The session's report as text in one of REPORT_FORMATS."""
    import json

    from aaco_pipelines.report.content import render_json
    from aaco_pipelines.report.html import render_html
    from aaco_pipelines.report.markdown_report import render_markdown

    if report_format == "html":
        return render_html(paths.tracelake, session)
    if report_format == "md":
        return render_markdown(paths.tracelake, session)
    return json.dumps(render_json(paths.tracelake, session), indent=2, default=str)


def add_report_parser(sub) -> None:
    report = sub.add_parser("report", help="a session's report (HTML, JSON or Markdown)")
    report.add_argument("--session", default="latest", help="session id, or latest (latest)")
    report.add_argument("--format", default="html", choices=REPORT_FORMATS, help="(html)")
    report.add_argument(
        "--output",
        help="file to write, or - for the terminal (default: md and json to the terminal, "
        "html to ./<session id>.html)",
    )
    report.set_defaults(func=cmd_report)


def add_parser(sub) -> None:
    add_export_parser(sub)
    add_report_parser(sub)

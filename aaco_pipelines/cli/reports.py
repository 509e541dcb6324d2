"""`aaco export` (a session's timeline as a Perfetto trace) and `aaco report` (a session's
report as HTML, JSON or Markdown, to a file or the terminal), each refusing a session whose
bundle changed (cli.evidence). Files go where a Dagster run and `aaco run` publish theirs,
AACO_HOME/reports (report.session_files), unless --output says otherwise."""

from __future__ import annotations

from pathlib import Path

from aaco_pipelines.cli.common import path_argument, reports_folder, to_terminal, with_examples
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError

PROTO_SUFFIX = ".perfetto-trace"  # Perfetto's protobuf trace, as ui.perfetto.dev names it


def export_output(paths: AacoPaths, session_id: str, export_format: str) -> Path:
    """Where `aaco export` writes without --output: the session's trace file under
    AACO_HOME/reports, the one its run published (.perfetto.json), or beside it for the
    protobuf format (.perfetto-trace)."""
    from aaco_pipelines.report.session_files import session_files

    reports_folder(paths.home)
    trace = session_files(paths.home, session_id).trace
    if export_format == "perfetto-proto":
        return trace.with_suffix("").with_suffix(PROTO_SUFFIX)
    return trace


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
    given = check_output(Path(args.output)) if args.output else None  # before the lake is read
    session = checked_session(paths, args.session)
    output = given or check_output(export_output(paths, session, args.format))
    write = write_perfetto_proto if args.format == "perfetto-proto" else write_perfetto
    count = write(TraceLake(paths.tracelake), session, output)
    print(f"wrote {count} events to {output} (open it in https://ui.perfetto.dev)")
    if args.open:
        from aaco_pipelines.cli.opening import FETCH_WAIT_S, open_trace

        return open_trace(output, FETCH_WAIT_S)
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
    path_argument(
        export.add_argument(
            "--output",
            help="file to write (default: AACO_HOME/reports/<session id>.perfetto.json, or "
            f"<session id>{PROTO_SUFFIX} for perfetto-proto)",
        )
    )
    export.add_argument(
        "--open",
        action="store_true",
        help="then open it in ui.perfetto.dev (served on 127.0.0.1:9001 until it is fetched)",
    )
    with_examples(
        export,
        "aaco export --session latest",
        "aaco export --session latest --open",
        "aaco export --session latest --format perfetto-proto --output session.perfetto-trace",
    )
    export.set_defaults(func=cmd_export)


REPORT_FORMATS = ("html", "json", "md")
STDOUT = "-"


def report_output(
    output: str | None, report_format: str, session_id: str, home: Path
) -> Path | None:
    """Where the report goes: the file --output names; the terminal (None) for "-", and for
    Markdown and JSON without --output (to read or pipe); an HTML page, which a terminal cannot
    show, without --output to AACO_HOME/reports/<session id>.html, where its run published it."""
    from aaco_pipelines.report.session_files import session_files

    if output == STDOUT or (output is None and report_format != "html"):
        return None
    if output is not None:
        return Path(output)
    reports_folder(home)
    return session_files(home, session_id).report


def cmd_report(args, paths: AacoPaths) -> int:
    """One session's report: a self-contained HTML page, JSON data or Markdown. A file is
    opened (beside its path, renamed at the end) before the report is rendered."""
    from aaco_pipelines.cli.evidence import checked_session
    from aaco_pipelines.report.output_file import replacing

    session = checked_session(paths, args.session)  # before the output is opened
    output = report_output(args.output, args.format, session, paths.home)
    if output is None:
        to_terminal(render_report(paths, session, args.format))
        return 0
    with replacing(output) as handle:
        text = render_report(paths, session, args.format)
        handle.write(text)
    print(f"wrote {args.format} report ({len(text.encode()) // 1024} KB) to {output}")
    return 0


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
    path_argument(
        report.add_argument(
            "--output",
            help="file to write, or - for the terminal (default: md and json to the terminal, "
            "html to AACO_HOME/reports/<session id>.html)",
        )
    )
    with_examples(
        report,
        "aaco report --session latest --format md",
        "aaco report --session latest  # HTML, to AACO_HOME/reports/<session id>.html",
        "aaco report --format json --output report.json",
    )
    report.set_defaults(func=cmd_report)


def add_parser(sub) -> None:
    add_export_parser(sub)
    add_report_parser(sub)

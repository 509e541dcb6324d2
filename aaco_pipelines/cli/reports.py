"""`aaco export` (a session's timeline as a Perfetto trace) and `aaco report` (a session's
report as HTML, JSON or Markdown), each refusing a session whose bundle changed (cli.evidence)."""

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


def cmd_report(args, paths: AacoPaths) -> int:
    """One session's report: a self-contained HTML page, JSON data or Markdown. The output is
    opened (beside its path, renamed at the end) before the report is rendered."""
    import json

    from aaco_pipelines.cli.evidence import checked_session
    from aaco_pipelines.report.content import render_json
    from aaco_pipelines.report.html import render_html
    from aaco_pipelines.report.markdown_report import render_markdown
    from aaco_pipelines.report.output_file import replacing

    output = Path(args.output)
    session = checked_session(paths, args.session)  # before the output is opened
    with replacing(output) as handle:
        if args.format == "html":
            text = render_html(paths.tracelake, session)
        elif args.format == "md":
            text = render_markdown(paths.tracelake, session)
        else:
            text = json.dumps(render_json(paths.tracelake, session), indent=2, default=str)
        handle.write(text)
    print(f"wrote {args.format} report ({len(text.encode()) // 1024} KB) to {output}")
    return 0


def add_report_parser(sub) -> None:
    report = sub.add_parser("report", help="a session's report (HTML, JSON or Markdown)")
    report.add_argument("--session", default="latest", help="session id, or latest (latest)")
    report.add_argument("--format", default="html", choices=REPORT_FORMATS, help="(html)")
    report.add_argument("--output", required=True, help="file to write")
    report.set_defaults(func=cmd_report)


def add_parser(sub) -> None:
    add_export_parser(sub)
    add_report_parser(sub)

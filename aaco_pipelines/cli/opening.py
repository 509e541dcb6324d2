"""`aaco open`: a session's HTML report in the browser, or its trace in ui.perfetto.dev.

The report is a file, opened as one. ui.perfetto.dev cannot open a local file by its path; it
fetches a trace from http://127.0.0.1:9001, so the trace is served there until the page has
fetched it once, the way Perfetto's own open-trace script does (instance.report_server). A host
with no browser gets the link to open elsewhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aaco_pipelines.cli.common import with_examples
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError

FETCH_WAIT_S = 120  # how long the trace waits to be fetched by ui.perfetto.dev


def cmd_open(args, paths: AacoPaths) -> int:
    """Open the session's report (written first if its run did not), or with --trace its
    Perfetto trace."""
    from aaco_pipelines.cli.evidence import checked_session
    from aaco_pipelines.report.session_files import session_files

    session = checked_session(paths, args.session)
    files = session_files(paths.home, session)
    if not (files.trace if args.trace else files.report).is_file():
        from aaco_pipelines.stages.publish import publish
        from aaco_pipelines.tracelake.store import TraceLake

        print(f"writing the report and trace of {session} ...", file=sys.stderr, flush=True)
        files = publish(TraceLake(paths.tracelake), session, paths.home)
    if args.trace:
        return open_trace(files.trace, args.wait)
    return open_report(files.report)


def open_report(report: Path) -> int:
    import webbrowser

    url = report.absolute().as_uri()
    if webbrowser.open(url):
        print(f"opened {report}")
    else:
        print(f"no browser on this host: open {url}")
    return 0


def open_trace(trace: Path, wait_s: float) -> int:
    """Serve the trace on 127.0.0.1:9001 and open ui.perfetto.dev on it (exported traces too:
    `aaco export --open`)."""
    import threading
    import webbrowser

    from aaco_pipelines.instance.report_server import (
        perfetto_link,
        reports_port,
        serve_until_fetched,
    )

    if not trace.is_file():
        raise AacoInputError(f"no trace at {trace}", fix=f"aaco export --output {trace}")
    port = reports_port()
    link = perfetto_link(f"http://127.0.0.1:{port}", trace.name)
    opener = threading.Timer(0.3, lambda: webbrowser.open(link) or _say(link))
    opener.start()
    try:
        fetched = serve_until_fetched(trace, wait_s, port)
    except OSError as error:
        opener.cancel()
        raise AacoInputError(
            f"port {port} is taken ({error}); ui.perfetto.dev fetches traces only from 9001",
            fix="stop what listens there (an aaco ui serves every trace already: use the link "
            "on its asset page), or open the file in ui.perfetto.dev (Open trace file)",
        ) from None
    if not fetched:
        print(f"ui.perfetto.dev did not fetch the trace within {wait_s:.0f} s: open {trace} "
              "in ui.perfetto.dev (Open trace file)")  # fmt: skip
        return 1
    print(f"opened {trace.name} in ui.perfetto.dev")
    return 0


def _say(link: str) -> None:
    print(f"no browser on this host: open {link} while this waits", flush=True)


def add_parser(sub) -> None:
    opened = sub.add_parser("open", help="open a session's HTML report, or its trace in Perfetto")
    opened.add_argument("session", nargs="?", default="latest", help="session id, or latest")
    opened.add_argument(
        "--trace", action="store_true", help="its Perfetto trace in ui.perfetto.dev instead"
    )
    opened.add_argument(
        "--wait",
        type=float,
        default=FETCH_WAIT_S,
        help=f"seconds the trace waits for ui.perfetto.dev to fetch it ({FETCH_WAIT_S})",
    )
    with_examples(opened, "aaco open latest", "aaco open 20261208T001501Z-mlp-cb4038 --trace")
    opened.set_defaults(func=cmd_open)

"""`aaco bisect`: which model version, between a good session and a bad one, made the model
slower; or, given environments with other ONNX Runtimes (`--runtime`), which runtime
(stages.bisect)."""

from __future__ import annotations

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def cmd_bisect(args, paths: AacoPaths) -> int:
    import json

    from aaco_pipelines.cli.common import progress_printer
    from aaco_pipelines.report.data import open_lake
    from aaco_pipelines.stages.bisect import (
        bisect_alert,
        bisect_model,
        bisect_runtimes,
        bisection_line,
    )

    _check(args)
    lake = open_lake(paths.tracelake)
    say = progress_printer(("bisecting", "measuring", "done"))
    options = {"rounds": args.rounds, "on_progress": say, "model": args.model}
    if args.alert:
        row = bisect_alert(lake, paths, args.alert, runtimes=args.runtime, **options)
    elif args.runtime:
        row = bisect_runtimes(
            lake, paths, args.runtime, good_session=args.good, bad_session=args.bad, **options
        )
    else:
        row = bisect_model(lake, paths, args.good, args.bad, **options)
    say.done()
    print(json.dumps(row, indent=2, default=str) if args.json else bisection_line(row))
    return 0


def _check(args) -> None:
    if args.alert and (args.good or args.bad):
        raise AacoInputError(
            "bisect an alert, or a good and a bad session", fix="--alert ID, or --good S1 --bad S2"
        )
    if args.good and not args.bad:
        raise AacoInputError("--good needs --bad", fix="--good S1 --bad S2")
    if not (args.alert or args.runtime or (args.good and args.bad)):
        raise AacoInputError(
            "bisect an alert, or a good and a bad session",
            fix="--alert ID, or --good S1 --bad S2 (with --runtime ENV ...: runtimes)",
        )


def add_parser(sub) -> None:
    bisect = sub.add_parser(
        "bisect",
        help="which model version (or runtime) made a model slower, measured side by side",
    )
    bisect.add_argument(
        "--model",
        help="the model: a check that the sessions are its; with --runtime and no session, "
        "its latest session is the one measured",
    )
    bisect.add_argument("--good", metavar="SESSION", help="a session before the change")
    bisect.add_argument("--bad", metavar="SESSION", help="a session after it")
    bisect.add_argument("--alert", help="a regression alert: its first session is the bad one")
    bisect.add_argument(
        "--runtime",
        action="append",
        metavar="ENV",
        help="bisect runtimes instead: an environment (its folder or bin/python) with another "
        "ONNX Runtime; repeat, oldest first: the first is the good one, the last the bad one. "
        "The bad session's (or --model's latest) model version is measured under each",
    )
    bisect.add_argument("--rounds", type=int, default=10, help="rounds per comparison (10)")
    bisect.add_argument("--json", action="store_true")
    bisect.set_defaults(func=cmd_bisect)

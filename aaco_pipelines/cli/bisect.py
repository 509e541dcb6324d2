"""`aaco bisect`: which model version, between a good session and a bad one, made the model
slower (stages.bisect)."""

from __future__ import annotations

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def cmd_bisect(args, paths: AacoPaths) -> int:
    import json

    from aaco_pipelines.cli.common import progress_printer
    from aaco_pipelines.report.data import open_lake
    from aaco_pipelines.stages.bisect import bisect_alert, bisect_model, bisection_line

    if bool(args.alert) == bool(args.good or args.bad):
        raise AacoInputError(
            "bisect an alert, or a good and a bad session", fix="--alert ID, or --good S1 --bad S2"
        )
    if not args.alert and not (args.good and args.bad):
        raise AacoInputError("--good and --bad go together", fix="--good S1 --bad S2")
    lake = open_lake(paths.tracelake)
    say = progress_printer(("bisecting", "measuring", "done"))
    options = {"rounds": args.rounds, "on_progress": say, "model": args.model}
    if args.alert:
        row = bisect_alert(lake, paths, args.alert, **options)
    else:
        row = bisect_model(lake, paths, args.good, args.bad, **options)
    say.done()
    print(json.dumps(row, indent=2, default=str) if args.json else bisection_line(row))
    return 0


def add_parser(sub) -> None:
    bisect = sub.add_parser(
        "bisect", help="which model version made a model slower, measured side by side"
    )
    bisect.add_argument("--model", help="the model (a check: the sessions must be its)")
    bisect.add_argument("--good", metavar="SESSION", help="a session before the change")
    bisect.add_argument("--bad", metavar="SESSION", help="a session after it")
    bisect.add_argument("--alert", help="a regression alert: its first session is the bad one")
    bisect.add_argument("--rounds", type=int, default=10, help="rounds per comparison (10)")
    bisect.add_argument("--json", action="store_true")
    bisect.set_defaults(func=cmd_bisect)

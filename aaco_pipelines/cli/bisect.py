"""`aaco bisect`: which model version, between a good session and a bad one, made the model
slower; or, given environments with other ONNX Runtimes (`--runtime`), which runtime
(stages.bisect)."""

from __future__ import annotations

from aaco_pipelines.cli.common import add_json_option, path_argument, with_examples
from aaco_pipelines.config import AacoPaths


def cmd_bisect(args, paths: AacoPaths) -> int:
    from aaco_pipelines.cli.common import print_json, progress_printer
    from aaco_pipelines.stages.bisect import bisect, bisection_line
    from aaco_pipelines.tracelake.queries import open_lake

    lake = open_lake(paths.tracelake)
    say = progress_printer(("bisecting", "measuring", "done"))
    row = bisect(
        lake, paths, alert=args.alert, good=args.good, bad=args.bad, runtimes=args.runtime,
        model=args.model, rounds=args.rounds, on_progress=say,
    )  # fmt: skip
    say.done()
    if args.json:
        print_json(row)
    else:
        print(bisection_line(row))
    return 0


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
    runtime = bisect.add_argument(
        "--runtime",
        action="append",
        metavar="ENV",
        help="bisect runtimes instead: an environment (its folder or bin/python) with another "
        "ONNX Runtime; repeat, oldest first: the first is the good one, the last the bad one. "
        "The bad session's (or --model's latest) model version is measured under each",
    )
    path_argument(runtime, "dir")
    bisect.add_argument("--rounds", type=int, default=10, help="rounds per comparison (10)")
    add_json_option(bisect, "the bisection")
    with_examples(
        bisect,
        "aaco bisect --good SESSION_A --bad SESSION_B",
        "aaco bisect --alert 3f2a --json",
        "aaco bisect --model resnet_cnn --runtime ../ort-1.21 --runtime .venv",
    )
    bisect.set_defaults(func=cmd_bisect)

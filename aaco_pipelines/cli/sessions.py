"""`aaco sessions`: the sessions in the TraceLake, newest first (one model's with --model), with
what a user looks for first: when, what, where, p50, the class and whether the measurement can
be trusted. The ids it prints are what `aaco report`, `diff`, `export` and `whatif` take."""

from __future__ import annotations

from aaco_pipelines.cli.common import add_json_option, print_json, print_table, with_examples
from aaco_pipelines.config import AacoPaths

DEFAULT_LIMIT = 20


def cmd_sessions(args, paths: AacoPaths) -> int:
    """The newest --limit sessions (0: all); no TraceLake yet is no sessions, not an error."""
    from aaco_pipelines.cli.governance import measured_model
    from aaco_pipelines.errors import AacoInputError
    from aaco_pipelines.tracelake import queries
    from aaco_pipelines.tracelake.store import TraceLake

    if args.limit < 0:
        raise AacoInputError("--limit must be 0 (all) or more", fix="e.g. --limit 50")
    lake = TraceLake(paths.tracelake)
    slug, rows, total = None, [], 0
    if lake.exists():
        with lake.reading():
            slug = measured_model(lake, args.model) if args.model else None
            rows = queries.list_sessions(lake, slug, args.limit or None)
            total = queries.count_sessions(lake, slug)
    elif args.model:
        slug = args.model
    if args.json:
        print_json({"lake": str(paths.tracelake), "model": slug, "total": total, "sessions": rows})
        return 0
    if not rows:
        print(f"no sessions in {paths.tracelake} yet (aaco run --model NAME measures one)")
        return 0
    of = f" of {slug}" if slug else ""
    print(f"{total} sessions{of} in {paths.tracelake}, newest first")
    header = ("session", "started", "model", "target", "source", "p50", "bottleneck", "measurement")
    print_table([header, *(session_cells(row) for row in rows)])
    if total > len(rows):
        print(f"  ... and {total - len(rows)} older (--limit 0 lists them all)")
    return 0


def session_cells(row: dict) -> tuple[str, ...]:
    from aaco_pipelines.analysis.bottleneck.classification import class_line

    bottleneck = class_line(row) if row["confidence"] is not None else row["bottleneck"] or "-"
    p50 = row["latency_p50_ns"]
    return (
        row["session_id"],
        f"{row['started_at']:%Y-%m-%d %H:%M:%S}" if row["started_at"] else "-",
        row["model_slug"],
        row["target"] or "-",
        row["trace_source"] or "-",
        f"{p50 / 1e6:.3f} ms" if p50 is not None else "-",
        bottleneck,
        row["measurement"] or "not judged",
    )


def add_parser(sub) -> None:
    sessions = sub.add_parser("sessions", help="the sessions in the TraceLake, newest first")
    sessions.add_argument("--model", help="only this model's")
    sessions.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"at most this many, 0 for all ({DEFAULT_LIMIT})",
    )
    add_json_option(sessions, "the sessions")
    with_examples(sessions, "aaco sessions", "aaco sessions --model resnet_cnn --limit 5 --json")
    sessions.set_defaults(func=cmd_sessions)

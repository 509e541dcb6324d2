"""`aaco diff` (the CI gate's verdict on a session; with --structure, two sessions' graphs
aligned node by node) and `aaco baseline create|list|show|pin` (the named baselines it compares
with). The verdict and baseline text is report.verdict_text's, the structure's
report.structure_text's."""

from __future__ import annotations

import sys

from aaco_pipelines.cli.common import (
    add_json_option,
    emit,
    print_json,
    print_table,
    with_examples,
)
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def cmd_diff(args, paths: AacoPaths) -> int:
    """The gate's verdict on a session; exit 1 on a regression with --fail-on-regression.
    Decided side by side where the stored sessions cannot settle it (--paired auto, the
    default); by default, where the versions cannot be measured again, the stored verdict
    stands. With --structure A B: the structural diff of two sessions instead."""
    if args.structure:
        return cmd_structure(args, paths)
    from aaco_pipelines.tracelake import queries

    lake = queries.open_lake(paths.tracelake)  # no lake: said before the gate's imports
    from aaco_pipelines.bundle.manifest import require_unchanged
    from aaco_pipelines.governance.gate.decision import gate_verdict
    from aaco_pipelines.governance.gate.paired import settle
    from aaco_pipelines.report.verdict_text import diff_text

    verdict = gate_verdict(
        lake,
        args.current or "latest",
        baseline=args.baseline,
        threshold_pct=args.threshold,
        confidence=args.confidence,
    )
    # Decided on these sessions' numbers: refused, before any is printed, if a bundle changed.
    require_unchanged(lake, [verdict.session_id, *verdict.baseline["session_ids"]], paths.sessions)
    # args.paired None: --paired not written, so a refusal to measure again is no error
    verdict = settle(
        verdict,
        lake,
        paths,
        paired=args.paired or "auto",
        asked=args.paired is not None,
        rounds=args.rounds,
        confidence=args.confidence,
        say=lambda message: print(f"aaco: {message}", file=sys.stderr),
    )
    objectives = queries.objective_verdicts(lake, verdict.session_id)
    if args.json:
        print_json({**verdict.to_dict(), "objectives": objectives})
    else:
        emit(diff_text(verdict))
        emit(objectives_text(objectives))
    return 1 if args.fail_on_regression and verdict.regression else 0


def objectives_text(objectives: list[dict]) -> str:
    """The current session's objectives (SLOs), a line each."""
    from aaco_pipelines.report.objectives_text import objective_line

    if not objectives:
        return "objectives: none set for this model (sidecar objectives:, README)"
    return "objectives:\n" + "\n".join(f"  {objective_line(o)}" for o in objectives)


# The gate's options, which a structural diff has no use for: (attribute, as written).
GATE_ONLY = (("baseline", "--baseline"), ("current", "--current"), ("paired", "--paired"),
             ("fail_on_regression", "--fail-on-regression"))  # fmt: skip


def cmd_structure(args, paths: AacoPaths) -> int:
    """`aaco diff --structure A B`: what B ran differently from A, node by node (fusions lost
    and gained, kernels per node, time per node with its CI)."""
    from aaco_pipelines.analysis.comparison.stored_structure import structure_between
    from aaco_pipelines.bundle.manifest import require_unchanged
    from aaco_pipelines.report.structure_text import structure_headline, structure_tables
    from aaco_pipelines.tracelake.queries import open_lake, resolve_session

    given = [flag for name, flag in GATE_ONLY if getattr(args, name)]
    if given:
        raise AacoInputError(
            f"--structure compares two sessions; {', '.join(given)} belong to the gate",
            fix="drop them, or drop --structure for the gate's verdict",
        )
    lake = open_lake(paths.tracelake)
    a, b = (resolve_session(lake, s) if s == "latest" else s for s in args.structure)
    diff = structure_between(lake, a, b)  # an unknown id: one line from there
    require_unchanged(lake, [a, b], paths.sessions)  # refused if their bundles changed
    if args.json:
        print_json(diff.to_dict())
        return 0
    print(structure_headline(diff))
    for title, rows in structure_tables(diff):
        print(f"\n{title}")
        print_table(rows)
    return 0


def add_diff_parser(sub) -> None:
    diff = sub.add_parser("diff", help="CI gate: is a session a regression against a baseline?")
    diff.add_argument(
        "--baseline",
        help="baseline name or session id (default: the pinned baseline, else the previous "
        "5 sessions of the model)",
    )
    diff.add_argument("--current", help="session id, or latest (latest)")
    diff.add_argument("--threshold", type=float, default=3.0, help="least p50 slowdown, %% (3)")
    diff.add_argument("--confidence", type=float, default=0.95, help="CI level (0.95)")
    diff.add_argument(
        "--fail-on-regression", action="store_true", help="exit 1 when it is a regression"
    )
    diff.add_argument(
        "--paired",
        nargs="?",
        const="always",
        choices=("never", "auto", "always"),
        help="decide on the baseline's model version and this session's measured again side by "
        "side, interleaved on this host now (a busy host hits both alike). auto (the default): "
        "only when the stored sessions cannot settle it (a regression, an uncertain one, or a "
        "p50 interval wider than the threshold); where the versions cannot be measured again, "
        "the stored sessions' verdict stands, unless --paired was written (then: exit 2). "
        "always (bare --paired): every time. never: the stored sessions only",
    )
    diff.add_argument(
        "--rounds", type=int, default=20, help="side by side: interleaved rounds (20)"
    )
    diff.add_argument(
        "--structure",
        nargs=2,
        metavar=("A", "B"),
        help="instead of the gate: align two analysed sessions of one model (ids, or latest) "
        "node by node: fusions lost and gained, kernels per node, kernels that came and went, "
        "time per node with a bootstrap CI",
    )
    add_json_option(diff, "the verdict (or, with --structure, the structural diff)")
    with_examples(
        diff,
        "aaco diff --current latest --fail-on-regression",
        "aaco diff --baseline release-1.2 --json",
        "aaco diff --structure SESSION_A latest",
    )
    diff.set_defaults(func=cmd_diff)


def measured_model(lake, name: str) -> str:
    """The slug of a model the TraceLake has sessions of; a name it has none of is one line,
    naming the closest measured model when one is close (a misspelling)."""
    from aaco_pipelines.registry.scan import model_slug, spelled_like
    from aaco_pipelines.tracelake.queries import registry_history

    slug = model_slug(name)
    measured = registry_history(lake)
    if slug in measured:
        return slug
    close = spelled_like(slug, measured)
    raise AacoInputError(
        f"no sessions of model {slug!r} in the TraceLake",
        fix=f"did you mean {close!r}?"
        if close
        else "measure it first (aaco run --model NAME); aaco registry list shows which models "
        "have sessions",
    )


def cmd_baseline_create(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.gate.baselines import create_baseline
    from aaco_pipelines.report.verdict_text import baseline_text
    from aaco_pipelines.tracelake.queries import open_lake

    if args.sessions and (args.target or args.last is not None):
        raise AacoInputError("--target and --last choose sessions of --model", fix="drop them")
    lake = open_lake(paths.tracelake)
    baseline = create_baseline(
        lake,
        args.name,
        session_ids=args.sessions,
        model_slug=measured_model(lake, args.model) if args.model else None,
        target=args.target,
        last=args.last,
        pin=args.pin,
        note=args.note,
        replace=args.replace,
        include_suspect=args.include_suspect,
    )
    print(f"{'replaced' if args.replace else 'created'} baseline {baseline.name}")
    print(baseline_text(baseline))
    if baseline.shortfall:
        print(
            f"aaco: warning: baseline {baseline.name} rests on {baseline.shortfall}: its spread "
            "is a guess from few points (measure the model again, then --replace it)",
            file=sys.stderr,
        )
    return 0


def cmd_baseline_list(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.gate.baselines import list_baselines
    from aaco_pipelines.tracelake.queries import open_lake

    lake = open_lake(paths.tracelake)
    slug = measured_model(lake, args.model) if args.model else None
    baselines = list_baselines(lake, slug)
    if args.json:
        print_json(baselines)  # every field of each baseline, its sessions and window too
        return 0
    if not baselines:
        print("no baselines" + (f" of {slug}" if slug else "") + " (aaco baseline create NAME)")
        return 0
    rows = [("baseline", "model", "target", "sessions", "p50", "pinned", "created", "note")]
    rows += [
        (
            b.name,
            b.model_slug,
            b.target,
            str(b.n_sessions),
            f"{b.latency_p50_ns / 1e6:.4f} ms",
            "pinned" if b.pinned else "-",
            f"{b.created_at:%Y-%m-%d %H:%M}",
            b.note or "-",
        )
        for b in baselines
    ]
    print_table(rows)
    return 0


def cmd_baseline_show(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.gate.baselines import get_baseline
    from aaco_pipelines.report.verdict_text import baseline_text
    from aaco_pipelines.tracelake.queries import open_lake

    print(baseline_text(get_baseline(open_lake(paths.tracelake), args.name)))
    return 0


def cmd_baseline_pin(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.gate.baselines import pin_baseline
    from aaco_pipelines.tracelake.queries import open_lake

    b = pin_baseline(open_lake(paths.tracelake), args.name)
    print(f"pinned baseline {b.name} for {b.model_slug} on {b.target}")
    return 0


def add_baseline_parser(sub) -> None:
    baseline_parser = sub.add_parser(
        "baseline", help="named baselines: the sessions a CI gate compares with"
    )
    with_examples(
        baseline_parser, "aaco baseline create release-1.2 --model resnet_cnn --pin",
        "aaco baseline list --json",
    )  # fmt: skip
    baseline = baseline_parser.add_subparsers(dest="baseline_command", required=True)
    create = baseline.add_parser("create", help="store a baseline of sessions")
    create.add_argument("name", help="the new baseline's name")
    chosen = create.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--sessions", nargs="+", metavar="ID", help="these session ids")
    chosen.add_argument("--model", help="the last sessions of this model")
    create.add_argument("--target", help="with --model: the target (when it has several)")
    create.add_argument("--last", type=int, help="with --model: this many sessions (10)")
    create.add_argument("--pin", action="store_true", help="make it the model+target's baseline")
    create.add_argument("--note", help="e.g. release v1.2")
    create.add_argument("--replace", action="store_true", help="overwrite a baseline of this name")
    create.add_argument(
        "--include-suspect",
        action="store_true",
        help="with --model: keep sessions whose measurement was judged suspect (left out)",
    )
    with_examples(
        create,
        "aaco baseline create release-1.2 --model resnet_cnn --last 10 --pin",
        "aaco baseline create known-good --sessions SESSION_A SESSION_B",
    )
    create.set_defaults(func=cmd_baseline_create)
    listing = baseline.add_parser("list", help="stored baselines")
    listing.add_argument("--model", help="only this model's")
    add_json_option(listing, "the baselines")
    with_examples(listing, "aaco baseline list", "aaco baseline list --model resnet_cnn --json")
    listing.set_defaults(func=cmd_baseline_list)
    show = baseline.add_parser("show", help="one baseline in full")
    show.add_argument("name", help="the baseline's name")
    with_examples(show, "aaco baseline show release-1.2")
    show.set_defaults(func=cmd_baseline_show)
    pin = baseline.add_parser("pin", help="make a baseline the one its model+target gates on")
    pin.add_argument("name", help="the baseline's name")
    with_examples(pin, "aaco baseline pin release-1.2")
    pin.set_defaults(func=cmd_baseline_pin)


def add_parser(sub) -> None:
    add_diff_parser(sub)
    add_baseline_parser(sub)

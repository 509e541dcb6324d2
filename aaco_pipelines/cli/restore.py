"""`aaco restore`: a lost or damaged TraceLake rebuilt from the session bundles and the lake's
journal, every session as itself (the work is stages.restore's). Refused while a lake is there:
the damaged one is moved aside first, never overwritten."""

from __future__ import annotations

import sys

from aaco_pipelines.cli.common import with_examples
from aaco_pipelines.config import AacoPaths


def cmd_restore(args, paths: AacoPaths) -> int:
    """Progress on stderr, a bundle a line; the summary on stdout, one line."""
    from aaco_pipelines.stages.restore import restore_lake

    def say(line: str) -> None:
        print(f"aaco: {line}", file=sys.stderr, flush=True)

    print(restore_lake(paths, on_progress=say, unverified=args.unverified).summary())
    return 0


def add_parser(sub) -> None:
    restore = sub.add_parser(
        "restore",
        help="rebuild a lost or damaged TraceLake from the session bundles (move it aside first)",
    )
    restore.add_argument(
        "--unverified",
        action="store_true",
        help="also restore the bundles the lake's journal has no record of (loaded before it "
        "kept them, or the journal is lost), marked unverified: aaco verify fails them, their "
        "reports say so, no new baseline rests on them",
    )
    with_examples(
        restore,
        "aaco restore  # once the damaged tracelake.duckdb is moved aside",
        "aaco restore --unverified",
    )
    restore.set_defaults(func=cmd_restore)

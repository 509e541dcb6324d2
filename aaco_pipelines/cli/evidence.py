"""`aaco verify` (every file of the sessions' bundles hashed against the manifests the TraceLake
vouches for, one row per session), and the cheap check `aaco report`, `export` and `diff` make
before they use a session's numbers (aaco_pipelines.bundle.manifest)."""

from __future__ import annotations

from aaco_pipelines.cli.common import print_table, with_examples
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def checked_session(paths: AacoPaths, session: str) -> str:
    """The session's id ("latest" resolved), once its bundle is seen unchanged (size and
    mtime against its manifest): a changed one is refused, naming the file."""
    from aaco_pipelines.bundle.manifest import require_unchanged
    from aaco_pipelines.tracelake.queries import open_lake, resolve_session

    lake = open_lake(paths.tracelake)
    with lake.reading():
        session_id = resolve_session(lake, session)
        require_unchanged(lake, [session_id], paths.sessions)
    return session_id


def cmd_verify(args, paths: AacoPaths) -> int:
    """One row per session: ok, what changed, or not covered; exit 2 when any failed."""
    from aaco_pipelines.bundle.manifest import check_bundles
    from aaco_pipelines.tracelake.queries import open_lake, resolve_session

    lake = open_lake(paths.tracelake)
    with lake.reading():
        chosen = [resolve_session(lake, session) for session in args.sessions] or None
        checks = check_bundles(lake, chosen, full=True, sessions=paths.sessions)
    if not checks:
        print("no sessions to verify (aaco run --model NAME measures one)")
        return 0
    print_table([("session", "evidence"), *((c.session_id, c.line()) for c in checks)])
    failed = [c for c in checks if c.failed]
    if failed:
        raise AacoInputError(
            f"the evidence of {len(failed)} of {len(checks)} sessions is changed or missing "
            f"(first: {failed[0].session_id}, {failed[0].line()})",
            fix="restore those bundles from a backup, or measure the models again: their "
            "numbers no longer follow back to unchanged evidence",
        )
    return 0


def add_parser(sub) -> None:
    verify = sub.add_parser(
        "verify", help="hash every file of sessions' bundles against their manifests"
    )
    verify.add_argument(
        "sessions", nargs="*", metavar="SESSION", help="session ids, or latest (default: all)"
    )
    with_examples(verify, "aaco verify", "aaco verify latest")
    verify.set_defaults(func=cmd_verify)

"""`aaco zoo build` and `aaco registry list`: the model registry and the bundled zoo."""

from __future__ import annotations

from pathlib import Path

from aaco_pipelines.cli.common import (
    add_json_option,
    path_argument,
    print_json,
    print_table,
    with_examples,
)
from aaco_pipelines.config import AacoPaths


def cmd_zoo_build(args, paths: AacoPaths) -> int:
    from aaco_pipelines.registry.zoo import build_zoo

    registry = Path(args.registry) if args.registry else paths.registry
    written = build_zoo(registry, only_if_empty=args.if_empty)
    if not written and args.if_empty:
        print(f"registry {registry} already has models; zoo not rebuilt")
    for path in written:
        print(f"wrote {path}")
    return 0


# The longest `aaco registry list` waits for a busy TraceLake (or AACO_LOCK_TIMEOUT_S if shorter):
# the registry is listed either way, its history marked unknown.
HISTORY_WAIT_S = 10.0
UNKNOWN = "?"


def registry_history(lake_path: Path) -> tuple[dict[str, dict] | None, str | None]:
    """({slug: history}, None) from the TraceLake; ({}, why) when there is no lake yet (no
    sessions: 0 versions is true); (None, why) when it cannot be read now (busy, damaged):
    the history is then unknown, never shown as none."""
    from aaco_pipelines.foundation.redaction import redact
    from aaco_pipelines.tracelake import queries
    from aaco_pipelines.tracelake.locking import TraceLakeBusy, lock_timeout
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(lake_path, lock_timeout_s=min(HISTORY_WAIT_S, lock_timeout()))
    if not lake.exists():
        return {}, f"no TraceLake at {lake_path} yet: no sessions"
    unknown = f"versions and history unknown ({UNKNOWN}): "
    try:
        return queries.registry_history(lake), None
    except TraceLakeBusy as exc:
        return None, unknown + f"the TraceLake is busy: {exc}"
    except Exception as exc:  # noqa: BLE001 - the listing stays useful without the history
        return None, unknown + redact(
            f"TraceLake {lake_path} not readable ({type(exc).__name__}: {exc})"
        )


def cmd_registry_list(args, paths: AacoPaths) -> int:
    """Every model file in the registry with its history; a file that cannot be measured has
    its row (`not measured`) and, below the table, the line saying why and the fix. Exit 0
    whenever the registry itself was read: a busy or unreadable TraceLake marks the history
    columns unknown ("?") and says why, so no model reads as never measured."""
    from aaco_pipelines.registry.scan import read_registry

    scan = read_registry(paths.registry)
    history, note = registry_history(paths.tracelake)
    if args.json:
        print_json(registry_listing(scan, history, note, paths.registry))
        return 0
    skipped = f"; {len(scan.problems)} not measured (below)" if scan.problems else ""
    print(f"{len(scan.models)} models in {paths.registry}{skipped}")
    rows = [("model", "sha256", "sidecar", "versions", "last session", "p50", "last verdict")]
    measured = {model.slug: model for model in scan.models}
    for slug in sorted([*measured, *scan.problems]):
        model = measured.get(slug)
        cells = _history_cells(None if history is None else history.get(slug, {}))
        if model is None:
            rows.append((slug, "-", "-", *cells[:3], "NOT MEASURED"))
            continue
        sidecar = model.sidecar.name if model.sidecar else "-"
        rows.append((slug, model.sha256[:12], sidecar, *cells))
    print_table(rows)
    for problem in scan.problems.values():
        print(f"not measured: {problem}")
    if note:
        print(note)
    return 0


def registry_listing(scan, history: dict | None, note: str | None, registry: Path) -> dict:
    """`aaco registry list --json`: every model (the measurable ones and those that cannot be
    measured, with why), its history null where it is unknown (history_known false)."""
    models = []
    measured = {model.slug: model for model in scan.models}
    for slug in sorted([*measured, *scan.problems]):
        model, problem = measured.get(slug), scan.problems.get(slug)
        h = None if history is None else history.get(slug, {})
        models.append({
            "model": slug,
            "path": str(model.path) if model else None,
            "sha256": model.sha256 if model else None,
            "sidecar": str(model.sidecar) if model and model.sidecar else None,
            "measurable": model is not None,
            "problem": str(problem) if problem is not None else None,
            "versions": None if h is None else h.get("versions", 0),
            "last_session_at": None if h is None else h.get("last_at"),
            "last_p50_ms": h["last_p50_ns"] / 1e6 if h and h.get("last_p50_ns") else None,
            "last_verdict": None if h is None else h.get("verdict"),
        })  # fmt: skip
    return {"registry": str(registry), "history_known": history is not None, "note": note,
            "models": models}  # fmt: skip


def _history_cells(h: dict | None) -> tuple[str, str, str, str]:
    """versions, last session, p50, last verdict: `?` each when the history is unknown."""
    if h is None:
        return (UNKNOWN,) * 4
    last = h.get("last_at")
    return (
        str(h.get("versions", 0)),
        f"{last:%Y-%m-%d %H:%M}" if last else "-",
        f"{h['last_p50_ns'] / 1e6:.3f} ms" if h.get("last_p50_ns") else "-",
        h.get("verdict") or "-",
    )


def add_parser(sub) -> None:
    zoo_parser = sub.add_parser("zoo", help="the bundled model zoo")
    zoo = zoo_parser.add_subparsers(dest="zoo_command", required=True)
    build = zoo.add_parser("build", help="write the bundled zoo into the registry")
    path_argument(
        build.add_argument("--registry", help="target folder (default: AACO_REGISTRY)"), "dir"
    )
    build.add_argument(
        "--if-empty", action="store_true", help="only when the registry has no models"
    )
    with_examples(build, "aaco zoo build --if-empty", "aaco zoo build --registry ./models")
    build.set_defaults(func=cmd_zoo_build)
    with_examples(zoo_parser, "aaco zoo build --if-empty")

    registry_parser = sub.add_parser("registry", help="the model registry")
    with_examples(registry_parser, "aaco registry list", "aaco registry list --json")
    registry = registry_parser.add_subparsers(dest="registry_command", required=True)
    listing = registry.add_parser("list", help="registered models, with their history")
    add_json_option(listing, "the models")
    with_examples(listing, "aaco registry list", "aaco registry list --json")
    listing.set_defaults(func=cmd_registry_list)

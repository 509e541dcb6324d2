"""`aaco zoo build` and `aaco registry list`: the model registry and the bundled zoo."""

from __future__ import annotations

from pathlib import Path

from aaco_pipelines.cli.common import print_table
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


def registry_history(lake_path: Path) -> tuple[dict[str, dict], str | None]:
    """{slug: history} from the TraceLake, or ({}, why not) when it cannot be read."""
    from aaco_pipelines.redaction import redact
    from aaco_pipelines.tracelake import queries
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(lake_path, lock_timeout_s=10)
    if not lake.exists():
        return {}, f"no TraceLake at {lake_path} yet: no sessions"
    try:
        return queries.registry_history(lake), None
    except Exception as exc:  # noqa: BLE001 - the listing stays useful without the history
        return {}, redact(f"TraceLake {lake_path} not readable ({type(exc).__name__}: {exc})")


def cmd_registry_list(args, paths: AacoPaths) -> int:
    from aaco_pipelines.registry.scan import scan_registry, slug_conflicts

    models = scan_registry(paths.registry)
    history, note = registry_history(paths.tracelake)
    print(f"{len(models)} models in {paths.registry}")
    rows = [("model", "sha256", "sidecar", "versions", "last session", "p50", "last verdict")]
    for model in models:
        h = history.get(model.slug, {})
        last = h.get("last_at")
        rows.append(
            (
                model.slug,
                model.sha256[:12],
                model.sidecar.name if model.sidecar else "-",
                str(h.get("versions", 0)),
                f"{last:%Y-%m-%d %H:%M}" if last else "-",
                f"{h['last_p50_ns'] / 1e6:.3f} ms" if h.get("last_p50_ns") else "-",
                h.get("verdict") or "-",
            )
        )
    print_table(rows)
    for conflict in slug_conflicts(paths.registry).values():
        print(f"not measured: {conflict}")
    if note:
        print(note)
    return 0


def add_parser(sub) -> None:
    zoo = sub.add_parser("zoo", help="the bundled model zoo").add_subparsers(
        dest="zoo_command", required=True
    )
    build = zoo.add_parser("build", help="write the bundled zoo into the registry")
    build.add_argument("--registry", help="target folder (default: AACO_REGISTRY)")
    build.add_argument(
        "--if-empty", action="store_true", help="only when the registry has no models"
    )
    build.set_defaults(func=cmd_zoo_build)

    registry = sub.add_parser("registry", help="the model registry").add_subparsers(
        dest="registry_command", required=True
    )
    registry.add_parser("list", help="registered models").set_defaults(func=cmd_registry_list)

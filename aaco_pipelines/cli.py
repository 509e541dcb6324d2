"""The `aaco` command line (this issue: zoo, registry, run, ui; more subcommands come later)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from aaco_pipelines import __version__
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError, WorkerFailure


def cmd_zoo_build(args, paths: AacoPaths) -> int:
    from aaco_pipelines.registry.zoo import build_zoo

    registry = Path(args.registry) if args.registry else paths.registry
    written = build_zoo(registry, only_if_empty=args.if_empty)
    if not written and args.if_empty:
        print(f"registry {registry} already has models; zoo not rebuilt")
    for path in written:
        print(f"wrote {path}")
    return 0


def cmd_registry_list(args, paths: AacoPaths) -> int:
    from aaco_pipelines.registry.scan import scan_registry

    models = scan_registry(paths.registry)
    print(f"{len(models)} models in {paths.registry}")
    for model in models:
        sidecar = model.sidecar.name if model.sidecar else "-"
        print(f"  {model.slug:24} {model.sha256[:12]}  sidecar={sidecar}")
    return 0


def cmd_run(args, paths: AacoPaths) -> int:
    from aaco_pipelines.pipeline import MeasureOptions, measure_model
    from aaco_pipelines.registry.scan import find_model, model_slug, registered_model

    candidate = Path(args.model)
    if candidate.suffix == ".onnx" and candidate.is_file():
        model = registered_model(candidate)
    else:
        model = find_model(paths.registry, model_slug(args.model))
    options = MeasureOptions(laboratory=args.laboratory)
    bundle = measure_model(
        model, paths, options, on_progress=lambda m: print(f"  {m}", file=sys.stderr)
    )
    print(f"session {bundle.session_id} -> {paths.tracelake}")
    return 0


def cmd_ingest(args, paths: AacoPaths) -> int:
    """A trace collected elsewhere becomes a session, analysed like a measured one."""
    from aaco_pipelines.ingest import ingest_trace
    from aaco_pipelines.pipeline import analyze_session
    from aaco_pipelines.tracelake.store import TraceLake

    bundle = ingest_trace(
        Path(args.path), paths, model=Path(args.model) if args.model else None, name=args.name
    )
    TraceLake(paths.tracelake).ingest_session(bundle)
    summary = analyze_session(bundle, paths)
    print(f"session {bundle.session_id} ({bundle.session['trace_source']}) -> {paths.tracelake}")
    print(f"  bottleneck: {summary['bottleneck']} ({summary['confidence']:.2f})")
    return 0


def cmd_ui(args, paths: AacoPaths) -> int:
    """Set up AACO_HOME and DAGSTER_HOME, build the zoo if the registry is empty, start Dagster."""
    from aaco_pipelines.instance import prepare_dagster_home
    from aaco_pipelines.registry.zoo import build_zoo

    build_zoo(paths.registry, only_if_empty=True)
    dagster_home = prepare_dagster_home(Path(os.environ.get("DAGSTER_HOME") or paths.dagster_home))
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "AACO_HOME": str(paths.home)}
    workspace = Path(args.workspace).absolute()
    command = [
        str(Path(sys.executable).with_name("dagster")),
        "dev",
        "-w",
        str(workspace),
        "-h",
        args.host,
        "-p",
        str(args.port),
    ]
    print(
        f"AACO_HOME={paths.home}  DAGSTER_HOME={dagster_home}  UI: http://{args.host}:{args.port}"
    )
    os.chdir(workspace.parent)
    os.execve(command[0], command, env)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aaco", description=__doc__)
    parser.add_argument("--version", action="version", version=f"aaco {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

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

    run = sub.add_parser("run", help="measure one model now, without Dagster")
    run.add_argument("--model", required=True, help="registry name or path to an .onnx file")
    run.add_argument("--laboratory", action="store_true", help="pinned cores, fixed threads")
    run.set_defaults(func=cmd_run)

    ingest = sub.add_parser("ingest", help="ingest a trace collected elsewhere as a session")
    ingest.add_argument(
        "path", help="rocprofv3 output directory or trace file (csv, json, rocpd, rpd, rocprof v1)"
    )
    ingest.add_argument("--model", help="the ONNX model that was traced (adds its graph)")
    ingest.add_argument("--name", help="model name for the session (default: model or trace name)")
    ingest.set_defaults(func=cmd_ingest)

    ui = sub.add_parser("ui", help="start the Dagster webserver and daemon (same as make run)")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.add_argument("--workspace", default="workspace.yaml")
    ui.set_defaults(func=cmd_ui)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args, AacoPaths.from_env())
    except (AacoInputError, WorkerFailure) as exc:
        print(f"aaco: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""`aaco whatif`: the predicted end-to-end latency of a session with some nodes made faster (or
slower), by re-timing its critical-path DAG (analysis.critical_path.session_whatif), not by subtracting shares."""

from __future__ import annotations

from aaco_pipelines.cli.common import add_json_option, print_json, with_examples
from aaco_pipelines.cli.evidence import checked_session
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError


def cmd_whatif(args, paths: AacoPaths) -> int:
    from aaco_pipelines.analysis.critical_path.session_whatif import what_if
    from aaco_pipelines.bundle.manifest import home_bundle
    from aaco_pipelines.bundle.session_bundle import SessionBundle
    from aaco_pipelines.tracelake.queries import open_lake, session_bundle_path

    chosen = [(s, v) for s, v in SELECTORS if getattr(args, s) is not None]
    if len(chosen) != 1:
        raise AacoInputError(
            "choose what to make faster: exactly one of --node, --op-type, --kernel-family",
            fix="e.g. aaco whatif --session latest --node /encoder/layer.0/MatMul --speedup 2",
        )
    selector, _ = chosen[0]
    session_id = checked_session(paths, args.session)
    lake = open_lake(paths.tracelake)
    with lake.reading():
        folder = home_bundle(paths.sessions, session_id) or session_bundle_path(lake, session_id)
        result = what_if(
            lake,
            session_id,
            SessionBundle(folder).optimized_model() if folder and folder.is_dir() else None,
            selector=selector,
            value=getattr(args, selector),
            speedup=args.speedup,
        )
    if args.json:
        print_json(result.to_dict())
    else:
        print(whatif_text(result))
    return 0


SELECTORS = (("node", "--node"), ("op_type", "--op-type"), ("kernel_family", "--kernel-family"))


def whatif_text(result) -> str:
    """Three lines: the prediction with its interval, what rests on what, and the caveats."""
    faster = "faster" if result.speedup >= 1 else "slower"
    factor = result.speedup if result.speedup >= 1 else 1 / result.speedup
    lines = [
        f"{result.selector.replace('_', ' ')} {result.value} {factor:g}x {faster}: p50 "
        f"{result.current_p50_ms:.4g} ms -> {result.predicted_p50_ms:.4g} ms "
        f"({result.change_ms:+.4g} ms, 95% CI {result.change_low_ms:+.4g} .. "
        f"{result.change_high_ms:+.4g} ms)",
        f"re-timed {len(result.runtime_nodes)} runtime node(s) holding "
        f"{result.share_of_kernel_time:.1%} of node time, over {result.iterations} profiled "
        f"iterations ({result.dag.replace('_', ' ')})",
    ]
    lines += [f"caveat: {caveat}" for caveat in result.caveats]
    return "\n".join(lines)


def add_parser(sub) -> None:
    whatif = sub.add_parser(
        "whatif", help="predicted latency with some nodes faster (re-timed critical path)"
    )
    whatif.add_argument("--session", default="latest", help="session id, or latest (latest)")
    group = whatif.add_mutually_exclusive_group()
    group.add_argument("--node", help="an ONNX node (or runtime node) name")
    group.add_argument("--op-type", dest="op_type", help="every ONNX node of this op type")
    group.add_argument(
        "--kernel-family", dest="kernel_family", help="a GPU trace's kernels of this family"
    )
    whatif.add_argument(
        "--speedup", type=float, default=2.0, help="how many times faster; < 1 slower (2)"
    )
    add_json_option(whatif, "the prediction")
    with_examples(
        whatif,
        "aaco whatif --session latest --op-type MatMul --speedup 2",
        "aaco whatif --node /encoder/layer.0/MatMul --speedup 1.5 --json",
    )
    whatif.set_defaults(func=cmd_whatif)

"""`aaco detector arl` and `aaco detector design`: average run length (ARL) and design of the
drift detectors (CUSUM and EWMA charts)."""

from __future__ import annotations

from aaco_pipelines.cli.common import add_json_option, print_json, with_examples
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError

DETECTOR_OPTIONS = {"cusum": ("sides", "k", "h"), "ewma": ("lam", "L", "limits")}
DETECTOR_DEFAULTS = {"sides": 2, "k": 0.5, "lam": 0.1, "limits": "asymptotic"}
DETECTOR_FLAGS = {
    "sides": "--sides", "k": "--k", "h": "--h", "lam": "--lambda", "L": "--L", "limits": "--limits"
}  # fmt: skip


def detector_options(args, required: str | None = None) -> dict:
    """The chosen chart's options with defaults; another chart's option is a one-line error."""
    own = DETECTOR_OPTIONS[args.chart]
    usable = " ".join(DETECTOR_FLAGS[n] for n in own if hasattr(args, n))
    foreign = [
        DETECTOR_FLAGS[n]
        for names in DETECTOR_OPTIONS.values()
        for n in names
        if n not in own and getattr(args, n, None) is not None
    ]
    if foreign:
        raise AacoInputError(
            f"{', '.join(foreign)} does not apply to --chart {args.chart}",
            fix=f"with --chart {args.chart} use {usable}",
        )
    options = {n: getattr(args, n, None) for n in own if hasattr(args, n)}
    options = {n: DETECTOR_DEFAULTS.get(n) if v is None else v for n, v in options.items()}
    if required and options[required] is None:
        flag = DETECTOR_FLAGS[required]
        raise AacoInputError(
            f"--chart {args.chart} needs {flag}",
            fix=f"add {flag} (aaco detector design finds one for a target in-control ARL)",
        )
    return options


def detector_parameter_error(exc: ValueError, args) -> AacoInputError:
    fix = f"see aaco detector {args.detector_command} --help for valid values"
    return AacoInputError(str(exc).rstrip("."), fix=fix)


def cmd_detector_arl(args, paths: AacoPaths) -> int:
    """ARL at each --shift: how long between false alarms (0) and until a shift is seen."""
    from functools import partial

    from aaco_pipelines.governance.drift import arl
    from aaco_pipelines.report.verdict_text import arl_cell

    o = detector_options(args, required="h" if args.chart == "cusum" else "L")
    try:
        if args.chart == "cusum":
            title = f"CUSUM k={o['k']:g} h={o['h']:g} {o['sides']}-sided (Brook-Evans Markov chain)"
            compute = partial(arl.cusum_arl, o["k"], o["h"], sides=o["sides"])
        elif o["limits"] == "exact":
            title = (
                f"EWMA lambda={o['lam']:g} L={o['L']:g} exact limits "
                f"(simulated: {args.runs} runs, seed {args.seed}; ARL +- standard error)"
            )
            params = arl.EwmaParams(lam=o["lam"], L=o["L"], limits="exact")
            compute = partial(arl.simulate_arl, "ewma", params, runs=args.runs, seed=args.seed)
        else:
            title = f"EWMA lambda={o['lam']:g} L={o['L']:g} asymptotic limits (integral equation)"
            compute = partial(arl.ewma_arl, o["lam"], o["L"])
        shifts = args.shift or [0.0, 1.0]
        values = [compute(s) for s in shifts]
    except ValueError as exc:
        raise detector_parameter_error(exc, args) from exc
    if args.json:  # a simulated ARL: {mean, se, runs, censored}
        arls = [{"shift": s, "arl": v} for s, v in zip(shifts, values, strict=True)]
        print_json({"chart": args.chart, "options": o, "method": title, "arl": arls})
        return 0
    rows = [f"{s:6.2f}  {arl_cell(v)}" for s, v in zip(shifts, values, strict=True)]
    print(title)
    print(f"{'shift':>6}  {'ARL':>10}")
    print("\n".join(rows))
    return 0


def cmd_detector_design(args, paths: AacoPaths) -> int:
    """The limit (h or L) giving --target-arl in control, and what it buys at a 1 sd shift."""
    from functools import partial

    from aaco_pipelines.governance.drift import arl

    o = detector_options(args)
    try:
        if args.chart == "cusum":
            limit = arl.design_cusum(args.target_arl, k=o["k"], sides=o["sides"])
            title = f"CUSUM k={o['k']:g} {o['sides']}-sided: h = {limit:.4f}"
            at = partial(arl.cusum_arl, o["k"], limit, sides=o["sides"])
        else:
            limit = arl.design_ewma(args.target_arl, lam=o["lam"])
            title = f"EWMA lambda={o['lam']:g} asymptotic limits: L = {limit:.4f}"
            at = partial(arl.ewma_arl, o["lam"], limit)
    except ValueError as exc:
        raise detector_parameter_error(exc, args) from exc
    if args.json:
        print_json({"chart": args.chart, "options": o, "h" if args.chart == "cusum" else "L": limit,
                    "in_control_arl": at(0.0), "arl_at_shift_1": at(1.0)})  # fmt: skip
        return 0
    print(title)
    print(f"  in-control ARL  {at(0.0):10.2f}")
    print(f"  ARL at shift 1  {at(1.0):10.2f}")
    return 0


def add_parser(sub) -> None:
    detector_parser = sub.add_parser(
        "detector", help="average run length (ARL) and design of the drift detectors"
    )
    with_examples(
        detector_parser, "aaco detector arl --chart cusum --h 5 --shift 0 0.5 1",
        "aaco detector design --chart ewma --target-arl 500",
    )  # fmt: skip
    detector = detector_parser.add_subparsers(dest="detector_command", required=True)
    # No abbreviations: `design --h 5` must be an error, not a prefix of --help.
    run_length = detector.add_parser(
        "arl", help="ARL of a CUSUM or EWMA chart at given shifts", allow_abbrev=False
    )
    design = detector.add_parser(
        "design", help="h or L for a target in-control ARL", allow_abbrev=False
    )
    for p in (run_length, design):
        p.add_argument(
            "--chart", required=True, choices=("cusum", "ewma"), help="the drift detector's chart"
        )
        p.add_argument("--sides", type=int, choices=(1, 2), help="CUSUM: 1 = upward only (2)")
        p.add_argument("--k", type=float, help="CUSUM allowance in sd (0.5)")
        p.add_argument(
            "--lambda", dest="lam", metavar="LAMBDA", type=float, help="EWMA weight (0.1)"
        )
    run_length.add_argument("--h", type=float, help="CUSUM decision interval")
    run_length.add_argument("--L", type=float, help="EWMA limit width in sd of the statistic")
    run_length.add_argument(
        "--limits", choices=("asymptotic", "exact"), help="EWMA: exact = time-varying (asymptotic)"
    )
    run_length.add_argument(
        "--shift", type=float, nargs="+", action="extend", help="mean shift(s) in sd (0 1)"
    )
    run_length.add_argument("--runs", type=int, default=10_000, help="exact EWMA: simulated runs")
    run_length.add_argument("--seed", type=int, default=0, help="exact EWMA: simulation seed")
    with_examples(
        run_length,
        "aaco detector arl --chart cusum --h 5 --shift 0 0.5 1",
        "aaco detector arl --chart ewma --L 2.7 --limits exact --runs 2000",
    )
    add_json_option(run_length, "the ARL at each shift")
    run_length.set_defaults(func=cmd_detector_arl)
    design.add_argument("--target-arl", type=float, required=True, help="in-control ARL wanted")
    with_examples(
        design,
        "aaco detector design --chart cusum --target-arl 370",
        "aaco detector design --chart ewma --lambda 0.2 --target-arl 500",
    )
    add_json_option(design, "the limit and its ARLs")
    design.set_defaults(func=cmd_detector_design)

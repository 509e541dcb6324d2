"""The `aaco` command line: measure, ingest, report, gate and inspect from a terminal or a CI job.

User mistakes are one line with the fix (exit 2), never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aaco_pipelines import __version__
from aaco_pipelines.address_space import (
    address_space_limit,
    describe_limit,
    fit_address_space,
    require_headroom,
)
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError, Interrupted, WorkerFailure, out_of_space
from aaco_pipelines.stopping import exit_code, stop_on_signals


def cmd_zoo_build(args, paths: AacoPaths) -> int:
    from aaco_pipelines.registry.zoo import build_zoo

    registry = Path(args.registry) if args.registry else paths.registry
    written = build_zoo(registry, only_if_empty=args.if_empty)
    if not written and args.if_empty:
        print(f"registry {registry} already has models; zoo not rebuilt")
    for path in written:
        print(f"wrote {path}")
    return 0


# Per model: versions measured, the last session, and the worst verdict of its last judged one.
REGISTRY_HISTORY_SQL = """
WITH last_judged AS (
    SELECT d.model_slug, arg_max(d.session_id, s.started_at) AS session_id
    FROM drift_verdicts d JOIN sessions s USING (session_id) GROUP BY d.model_slug),
verdicts AS (
    SELECT d.model_slug, arg_min(CASE WHEN d.verdict IN ('regression', 'improvement')
        THEN d.verdict || ' (' || d.metric || ')' ELSE d.verdict END, CASE d.verdict
        WHEN 'regression' THEN 0 WHEN 'improvement' THEN 1 WHEN 'unstable_series' THEN 2
        WHEN 'no_change' THEN 3 ELSE 4 END
    ) AS verdict
    FROM drift_verdicts d JOIN last_judged USING (model_slug, session_id) GROUP BY d.model_slug)
SELECT model_slug, count(DISTINCT model_sha256) AS versions, max(started_at) AS last_at,
       arg_max(latency_p50_ns, started_at) AS last_p50_ns, any_value(v.verdict) AS verdict
FROM sessions LEFT JOIN verdicts v USING (model_slug) GROUP BY model_slug
"""


def registry_history(lake_path: Path) -> tuple[dict[str, dict], str | None]:
    """{slug: history} from the TraceLake, or ({}, why not) when it cannot be read."""
    from aaco_pipelines.tracelake.store import TraceLake

    if not lake_path.exists():
        return {}, f"no TraceLake at {lake_path} yet: no sessions"
    try:
        rows = TraceLake(lake_path, lock_timeout_s=10).query(REGISTRY_HISTORY_SQL).to_pylist()
    except Exception as exc:  # noqa: BLE001 - the listing stays useful without the history
        return {}, f"TraceLake {lake_path} not readable ({type(exc).__name__}: {exc})"
    return {row["model_slug"]: row for row in rows}, None


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
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for conflict in slug_conflicts(paths.registry).values():
        print(f"not measured: {conflict}")
    if note:
        print(note)
    return 0


PROVIDER_NAMES = {
    "cpu": "CPUExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
}


def run_providers(name: str | None) -> tuple[str, ...] | None:
    """--provider (cpu, rocm, migraphx or a full name) checked against this ONNX Runtime, with
    the CPU provider as fallback; None keeps the sidecar's or the automatic choice."""
    if name is None:
        return None
    import onnxruntime as ort

    provider = PROVIDER_NAMES.get(name.lower(), name)
    available = ort.get_available_providers()
    if provider not in available:
        short = [k for k, v in PROVIDER_NAMES.items() if v in available]
        raise AacoInputError(
            f"execution provider {name!r} is not available in this ONNX Runtime",
            fix=f"use one of {', '.join(short + available)} (aaco doctor shows why)",
        )
    return tuple(dict.fromkeys([provider, "CPUExecutionProvider"]))


# The stages of one `aaco run`, in order, as the worker and the pipeline announce them.
RUN_STAGES = ("creating session", "warmup pass", "measured pass", "profiled pass", "collecting",
              "analysing", "done")  # fmt: skip


# The stages of one `aaco ingest`.
INGEST_STAGES = ("copying", "loading", "analysing", "done")


def progress_printer(stages: tuple[str, ...] = RUN_STAGES) -> Callable[[str], None]:
    """Progress on stderr: a bar over the stages, the seconds since the command began, and the
    worker's or pipeline's own line (the worker does not report inside the timed loop)."""
    started = time.monotonic()
    reached = [0]

    def say(message: str) -> None:
        stage = next((i for i, s in enumerate(stages, 1) if message.startswith(s)), 0)
        reached[0] = max(reached[0], stage)
        filled = round(20 * reached[0] / len(stages))
        bar = "#" * filled + "-" * (20 - filled)
        elapsed = time.monotonic() - started
        print(f"  [{bar}] {elapsed:6.1f}s  {message}", file=sys.stderr, flush=True)

    return say


RUN_SUMMARY_SQL = """
SELECT s.session_id, s.model_slug, s.providers_used, s.measured_iterations, s.latency_mean_ns,
       s.latency_p50_ns, s.latency_p99_ns, s.throughput_per_s, b.bottleneck, b.confidence,
       s.workload, s.scenario
FROM sessions s LEFT JOIN bottleneck_reports b USING (session_id) WHERE s.session_id = ?
"""


def run_summary(lake_path: Path, session_id: str) -> str:
    """The session's headline numbers as an aligned two-column table."""
    from aaco_pipelines.tracelake.store import TraceLake

    row = TraceLake(lake_path).query(RUN_SUMMARY_SQL, [session_id]).to_pylist()[0]
    bottleneck = row["bottleneck"] or "-"
    if row["confidence"] is not None:
        bottleneck += f" ({row['confidence']:.2f})"
    cells = [
        ("session", row["session_id"]),
        ("model", row["model_slug"]),
        ("provider", ", ".join(row["providers_used"] or []) or "-"),
        ("iterations", str(row["measured_iterations"])),
        ("latency mean", f"{row['latency_mean_ns'] / 1e6:.3f} ms"),
        ("latency p50", f"{row['latency_p50_ns'] / 1e6:.3f} ms"),
        ("latency p99", f"{row['latency_p99_ns'] / 1e6:.3f} ms"),
        ("throughput", f"{row['throughput_per_s']:.1f} /s"),
        ("bottleneck", bottleneck),
    ]
    if row["workload"] == "generation":
        cells[3] = ("requests", f"{row['measured_iterations']} ({row['scenario']}, end to end)")
        cells += generation_summary(lake_path, session_id)
    return "\n".join(f"  {name:13} {value}" for name, value in cells)


GENERATION_SUMMARY_SQL = """
SELECT run, metric, value FROM generation_metrics
WHERE session_id = ? AND source = 'aaco' AND batch_size IS NULL AND run NOT IN ('curve')
"""


def generation_summary(lake_path: Path, session_id: str) -> list[tuple[str, str]]:
    """One line per scenario of a generation session: TTFT, TPOT, tokens/s, goodput."""
    from aaco_pipelines.llm.workload import SCENARIOS
    from aaco_pipelines.tracelake.store import TraceLake

    rows = TraceLake(lake_path).query(GENERATION_SUMMARY_SQL, [session_id]).to_pylist()
    figures = {(r["run"], r["metric"]): r["value"] for r in rows}
    lines = []
    for run in SCENARIOS:
        if (run, "ttft_p50_ns") not in figures:
            continue
        f = {metric: value for (r, metric), value in figures.items() if r == run}
        lines.append((run, f"TTFT p50 {f['ttft_p50_ns'] / 1e6:.3f} ms, p99 "
                      f"{f['ttft_p99_ns'] / 1e6:.3f} ms; TPOT p50 {f.get('tpot_p50_ns', 0) / 1e6:.3f} ms; "
                      f"{f['output_tokens_per_s']:.0f} tokens/s; goodput {f['goodput_per_s']:.1f} /s "
                      f"({f['slo_attainment']:.0%} within SLO)"))  # fmt: skip
    return lines


def cmd_run(args, paths: AacoPaths) -> int:
    """Measure and analyse one model through the same pipeline the Dagster assets run."""
    from aaco_pipelines.execution.runner import RunnerLimits
    from aaco_pipelines.registry.scan import find_model, model_slug, registered_model
    from aaco_pipelines.stages.measure import MeasureOptions
    from aaco_pipelines.stages.pipeline import measure_model

    if args.iterations is not None and args.iterations < 1:
        raise AacoInputError("--iterations must be at least 1", fix="e.g. --iterations 50")
    if args.memory_limit_mb is not None and args.memory_limit_mb < 64:
        raise AacoInputError(
            "--memory-limit-mb must be at least 64", fix="e.g. --memory-limit-mb 16384"
        )
    candidate = Path(args.model)
    if candidate.suffix == ".onnx" and candidate.is_file():
        model = registered_model(candidate)
    else:
        model = find_model(paths.registry, model_slug(args.model))
    options = MeasureOptions(
        laboratory=args.laboratory,
        providers=run_providers(args.provider),
        measured_iterations=args.iterations,
        profiled_iterations=None if args.profile else 1,
        limits=RunnerLimits(memory_limit_mb=args.memory_limit_mb),
    )
    say = progress_printer()
    bundle = measure_model(model, paths, options, on_progress=say, analyze=True)
    say("done")
    print(f"session {bundle.session_id} -> {paths.tracelake}")
    print(run_summary(paths.tracelake, bundle.session_id))
    observed = bundle.read_json("observed.json")
    print(
        f"  {'peak memory':13} {observed['worker_peak_rss_bytes'] >> 20} MiB of the "
        f"{observed['memory_limit_bytes'] >> 20} MiB limit "
        f"({bundle.request['limits']['memory_limit_rule'].split(':')[0]})"
    )
    return 0


def cmd_ingest(args, paths: AacoPaths) -> int:
    """A trace collected elsewhere becomes a session, analysed like a measured one. Both paths
    are checked before any work: a FIFO or device would block or never end once opened."""
    from aaco_pipelines.collectors.trace_paths import check_trace
    from aaco_pipelines.stages.ingest_trace import ingest_trace

    check_trace(Path(args.path))
    model = Path(args.model) if args.model else None
    if model is not None and not model.is_file():
        raise AacoInputError(
            "the model is not a regular file" if model.exists() else "model file not found",
            path=model,
            fix="give the .onnx file itself",
        )
    say = progress_printer(INGEST_STAGES)
    bundle = ingest_trace(
        Path(args.path),
        paths,
        model=model,
        name=args.name,
        complete=False,  # visible once analysed, below
        on_progress=say,
    )
    say("analysing: attribution, bottleneck, drift")
    from aaco_pipelines.session_folders import quarantine_on_failure
    from aaco_pipelines.stages.pipeline import (
        analyze_session,  # the analysis stack: imported for it
    )
    from aaco_pipelines.tracelake.store import TraceLake

    with quarantine_on_failure(bundle.path, paths, TraceLake(paths.tracelake)):
        summary = analyze_session(bundle, paths)
    say("done")
    print(f"session {bundle.session_id} ({bundle.session['trace_source']}) -> {paths.tracelake}")
    print(f"  bottleneck: {summary['bottleneck']} ({summary['confidence']:.2f})")
    return 0


def cmd_export(args, paths: AacoPaths) -> int:
    """One session as a trace file for ui.perfetto.dev (streamed: big traces stay cheap):
    Chrome trace-event JSON, or Perfetto's own protobuf format, several times smaller."""
    from aaco_pipelines.report.output_file import check_output
    from aaco_pipelines.report.perfetto import FORMATS, write_perfetto
    from aaco_pipelines.report.perfetto_proto import write_perfetto_proto
    from aaco_pipelines.tracelake.store import TraceLake

    if args.format not in FORMATS:
        raise AacoInputError(
            f"unknown export format {args.format!r}", fix="use --format perfetto or perfetto-proto"
        )
    output = check_output(Path(args.output))  # before the lake is read
    write = write_perfetto_proto if args.format == "perfetto-proto" else write_perfetto
    count = write(TraceLake(paths.tracelake), args.session, output)
    print(f"wrote {count} events to {output} (open it in https://ui.perfetto.dev)")
    return 0


def add_export_parser(sub) -> None:
    export = sub.add_parser("export", help="export a session's timeline (Perfetto trace)")
    export.add_argument("--session", default="latest", help="session id, or latest (latest)")
    export.add_argument(
        "--format",
        default="perfetto",
        help="perfetto (Chrome trace-event JSON) or perfetto-proto (Perfetto's protobuf trace, "
        "for .perfetto-trace/.pftrace files: about a third of the JSON's size)",
    )
    export.add_argument("--output", required=True, help="file to write")
    export.set_defaults(func=cmd_export)


REPORT_FORMATS = ("html", "json", "md")


def cmd_report(args, paths: AacoPaths) -> int:
    """One session's report: a self-contained HTML page, JSON data or Markdown. The output is
    opened (beside its path, renamed at the end) before the report is rendered."""
    import json

    from aaco_pipelines.report.content import render_json
    from aaco_pipelines.report.html import render_html
    from aaco_pipelines.report.markdown_report import render_markdown
    from aaco_pipelines.report.output_file import replacing

    output = Path(args.output)
    with replacing(output) as handle:
        if args.format == "html":
            text = render_html(paths.tracelake, args.session)
        elif args.format == "md":
            text = render_markdown(paths.tracelake, args.session)
        else:
            text = json.dumps(render_json(paths.tracelake, args.session), indent=2, default=str)
        handle.write(text)
    print(f"wrote {args.format} report ({len(text.encode()) // 1024} KB) to {output}")
    return 0


def add_report_parser(sub) -> None:
    report = sub.add_parser("report", help="a session's report (HTML, JSON or Markdown)")
    report.add_argument("--session", default="latest", help="session id, or latest (latest)")
    report.add_argument("--format", default="html", choices=REPORT_FORMATS, help="(html)")
    report.add_argument("--output", required=True, help="file to write")
    report.set_defaults(func=cmd_report)


def cmd_doctor(args, paths: AacoPaths) -> int:
    """What this host can measure; always exits 0, since a doctor reports."""
    from aaco_pipelines.doctor import format_checks, run_checks

    print(format_checks(run_checks(paths)))
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


def cmd_worker(args, paths: AacoPaths) -> int:
    """A device's worker on the host that owns it: takes the runs on the device's Celery queue,
    one at a time (a solo pool: Celery's default prefork pool fails Dagster runs), and measures
    them as target `--target` (AACO_TARGET).

    It becomes the `celery` process itself, the command `dagster-celery worker start` would run:
    that wrapper runs celery as a child it does not stop, so a stopped wrapper leaves a worker
    behind, and it writes the broker URL (password included) into DAGSTER_HOME. Celery reads
    the broker from CELERY_BROKER_URL instead."""
    from aaco_pipelines.instance import (
        BROKER_ENV,
        POSTGRES_ENV,
        prepare_dagster_home,
        register_target,
    )

    if not (os.environ.get(BROKER_ENV) and os.environ.get(POSTGRES_ENV)):
        raise AacoInputError(
            f"a device worker needs the shared instance and the broker: {POSTGRES_ENV} and "
            f"{BROKER_ENV} are not both set",
            fix="set them as on the head node (see 'Scaling out' in README)",
        )
    os.environ["AACO_TARGET"] = args.target  # this host's device: its pool, its measurements
    dagster_home = prepare_dagster_home(Path(os.environ.get("DAGSTER_HOME") or paths.dagster_home))
    register_target(dagster_home, args.target)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "AACO_HOME": str(paths.home),
        "CELERY_BROKER_URL": os.environ[BROKER_ENV],
        "CELERY_RESULT_BACKEND": os.environ[BROKER_ENV],
    }
    command = [
        str(bin_dir / "celery"), "-A", "dagster_celery.app", "worker", "--prefetch-multiplier=1",
        "--loglevel", "INFO", "-Q", args.target, "-n", f"aaco-{args.target}@%h",
        "--pool", "solo", "--concurrency", "1",
    ]  # fmt: skip
    print(f"worker for {args.target}: queue {args.target}, DAGSTER_HOME={dagster_home}", flush=True)
    os.execve(command[0], command, env)
    return 0  # not reached


# --- detector: ARL and design of the drift detectors ------------------------------------------

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

    from aaco_pipelines.governance import arl

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
        rows = [f"{s:6.2f}  {arl_cell(compute(s))}" for s in args.shift or [0.0, 1.0]]
    except ValueError as exc:
        raise detector_parameter_error(exc, args) from exc
    print(title)
    print(f"{'shift':>6}  {'ARL':>10}")
    print("\n".join(rows))
    return 0


def arl_cell(value) -> str:
    """A computed ARL, or a simulated one with its standard error."""
    if isinstance(value, float):
        return f"{value:10.2f}"
    censored = f"  ({value.censored} runs censored: a lower bound)" if value.censored else ""
    return f"{value.mean:10.2f} +- {value.se:.2f}{censored}"


def cmd_detector_design(args, paths: AacoPaths) -> int:
    """The limit (h or L) giving --target-arl in control, and what it buys at a 1 sd shift."""
    from functools import partial

    from aaco_pipelines.governance import arl

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
    print(title)
    print(f"  in-control ARL  {at(0.0):10.2f}")
    print(f"  ARL at shift 1  {at(1.0):10.2f}")
    return 0


def add_detector_parser(sub) -> None:
    detector = sub.add_parser(
        "detector", help="average run length (ARL) and design of the drift detectors"
    ).add_subparsers(dest="detector_command", required=True)
    # No abbreviations: `design --h 5` must be an error, not a prefix of --help.
    run_length = detector.add_parser(
        "arl", help="ARL of a CUSUM or EWMA chart at given shifts", allow_abbrev=False
    )
    design = detector.add_parser(
        "design", help="h or L for a target in-control ARL", allow_abbrev=False
    )
    for p in (run_length, design):
        p.add_argument("--chart", required=True, choices=("cusum", "ewma"))
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
    run_length.set_defaults(func=cmd_detector_arl)
    design.add_argument("--target-arl", type=float, required=True, help="in-control ARL wanted")
    design.set_defaults(func=cmd_detector_design)


# --- diff and baselines: the CI gate -----------------------------------------------------------


def cmd_diff(args, paths: AacoPaths) -> int:
    """The gate's verdict on a session; exit 1 on a regression with --fail-on-regression."""
    import json

    from aaco_pipelines.governance.gate import gate_verdict
    from aaco_pipelines.report.data import open_lake

    verdict = gate_verdict(
        open_lake(paths.tracelake),
        args.current,
        baseline=args.baseline,
        threshold_pct=args.threshold,
        confidence=args.confidence,
    )
    print(json.dumps(verdict.to_dict(), indent=2, default=str) if args.json else diff_text(verdict))
    return 1 if args.fail_on_regression and verdict.regression else 0


def diff_text(v) -> str:
    """A GateVerdict as a headline and an aligned table."""
    p50, tput, b = v.latency_delta_pct, v.throughput_delta_pct, v.baseline
    head = f"REGRESSION ({v.severity})" if v.regression else "no regression"
    others = ", ".join(f"{s['kind']} ({s['posterior']:.2f})" for s in v.suspects[1:]) or "-"
    noise = v.evidence.get("noise_sd_pct")
    sessions = f"{b['n_sessions']} session{'s' * (b['n_sessions'] != 1)}"
    cells = [
        ("session", f"{v.session_id} ({v.model_slug} on {v.target})"),
        ("baseline", f"{b['name']} ({b['source']}, {sessions})"),
        ("p50 latency", f"{p50['baseline_ms']:.4f} ms -> {p50['current_ms']:.4f} ms  "
         f"{p50['effect_pct']:+.2f} % [{p50['ci_low']:+.2f}, {p50['ci_high']:+.2f}]"),
        ("throughput", f"{tput['baseline_per_s']:.1f} /s -> {tput['current_per_s']:.1f} /s  "
         f"{tput['effect_pct']:+.2f} % [{tput['ci_low']:+.2f}, {tput['ci_high']:+.2f}]"),
        ("confidence", f"{v.confidence:.2f}"),
        ("suspected", suspect_text(v.suspected_cause)),
        ("also", others),
        ("decided by", f"{v.evidence['decided_by']}: {v.evidence['test']}"),
        ("noise", f"session-to-session sd {noise:.1f} % of p50" if noise is not None else "-"),
        ("recommendation", v.recommendation),
    ]  # fmt: skip
    if v.generation is not None:
        cells[4:4] = generation_cells(v.generation)
    title = f"{head}: {v.model_slug} p50 {p50['effect_pct']:+.2f} % vs {b['name']} "
    title += f"(threshold {v.threshold_pct:g} %)"
    return "\n".join([title, *(f"  {name:15} {value}" for name, value in cells)])


def generation_cells(g: dict) -> list[tuple[str, str]]:
    """A generation session's figures and where its TTFT change went, as diff table rows."""
    cells = []
    for key, label, scale, unit in (
        ("ttft_p50_ns", "TTFT p50", 1e-6, "ms"),
        ("tpot_p50_ns", "TPOT p50", 1e-6, "ms"),
        ("itl_p99_ns", "ITL p99", 1e-6, "ms"),
        ("output_tokens_per_s", "tokens/s", 1.0, "/s"),
    ):
        c = g.get(key)
        if c is not None:
            cells.append((label, f"{c['baseline'] * scale:.4g} {unit} -> "
                          f"{c['current'] * scale:.4g} {unit}  {c['effect_pct']:+.2f} %"))  # fmt: skip
    e = g["ttft_explained"]
    parts = ", ".join(
        f"{part.replace('_', ' ')} {e[f'{part}_ms']:+.3f} ms"
        for part in ("queueing", "prefill_kernel", "host")
        if e[f"{part}_ms"] is not None
    )
    cells.append(("TTFT change", f"mean {e['ttft_mean_delta_ms']:+.3f} ms = {parts} "
                  f"(mostly {(e['dominant'] or '-').replace('_', ' ')}; {g['scenario']})"))  # fmt: skip
    return cells


def suspect_text(s: dict | None) -> str:
    """kind (name): before -> after (posterior, share of the slowdown it explains)."""
    if s is None:
        return "-"
    label = s["kind"] if s["name"] == s["kind"] else f"{s['kind']} ({s['name']})"
    change = f": {s['before']} -> {s['after']}" if s["before"] or s["after"] else ""
    share = f", explains {s['share']:.0%}" if s["share"] is not None else ""
    return f"{label}{change} (posterior {s['posterior']:.2f}{share})"


def add_diff_parser(sub) -> None:
    diff = sub.add_parser("diff", help="CI gate: is a session a regression against a baseline?")
    diff.add_argument(
        "--baseline",
        help="baseline name or session id (default: the pinned baseline, else the previous "
        "5 sessions of the model)",
    )
    diff.add_argument("--current", default="latest", help="session id, or latest (latest)")
    diff.add_argument("--threshold", type=float, default=3.0, help="least p50 slowdown, %% (3)")
    diff.add_argument("--confidence", type=float, default=0.95, help="CI level (0.95)")
    diff.add_argument(
        "--fail-on-regression", action="store_true", help="exit 1 when it is a regression"
    )
    diff.add_argument("--json", action="store_true", help="print the verdict as JSON")
    diff.set_defaults(func=cmd_diff)


def cmd_baseline_create(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.baselines import create_baseline
    from aaco_pipelines.registry.scan import model_slug
    from aaco_pipelines.report.data import open_lake

    if args.sessions and (args.target or args.last is not None):
        raise AacoInputError("--target and --last choose sessions of --model", fix="drop them")
    baseline = create_baseline(
        open_lake(paths.tracelake),
        args.name,
        session_ids=args.sessions,
        model_slug=model_slug(args.model) if args.model else None,
        target=args.target,
        last=args.last,
        pin=args.pin,
        note=args.note,
        replace=args.replace,
    )
    print(f"{'replaced' if args.replace else 'created'} baseline {baseline.name}")
    print(baseline_text(baseline))
    return 0


def cmd_baseline_list(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.baselines import list_baselines
    from aaco_pipelines.registry.scan import model_slug
    from aaco_pipelines.report.data import open_lake

    slug = model_slug(args.model) if args.model else None
    baselines = list_baselines(open_lake(paths.tracelake), slug)
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
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_baseline_show(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.baselines import get_baseline
    from aaco_pipelines.report.data import open_lake

    print(baseline_text(get_baseline(open_lake(paths.tracelake), args.name)))
    return 0


def cmd_baseline_pin(args, paths: AacoPaths) -> int:
    from aaco_pipelines.governance.baselines import pin_baseline
    from aaco_pipelines.report.data import open_lake

    b = pin_baseline(open_lake(paths.tracelake), args.name)
    print(f"pinned baseline {b.name} for {b.model_slug} on {b.target}")
    return 0


def baseline_text(b) -> str:
    """One baseline as an aligned two-column table."""
    cells = [
        ("baseline", b.name + ("  (pinned)" if b.pinned else "")),
        ("model", f"{b.model_slug} on {b.target}"),
        ("created", f"{b.created_at:%Y-%m-%d %H:%M:%S %Z}"),
        ("latency p50", f"{b.latency_p50_ns / 1e6:.4f} ms (median of sessions)"),
        ("latency p99", f"{b.latency_p99_ns / 1e6:.4f} ms"),
        ("throughput", f"{b.throughput_per_s:.1f} /s"),
        ("model sha256", (b.model_sha256 or "-")[:12]),
        ("runtime", f"onnxruntime {b.env.get('onnxruntime_version') or '-'}, "
         f"rocm {b.env.get('rocm_version') or '-'} ({(b.runtime_fingerprint or '-')[:12]})"),
        ("providers", ", ".join(b.providers_used) or "-"),
        ("note", b.note or "-"),
        (f"sessions ({b.n_sessions})", "\n".join(" " * 18 * (i > 0) + s
                                                for i, s in enumerate(b.session_ids))),
    ]  # fmt: skip
    return "\n".join(f"  {name:15} {value}" for name, value in cells)


def add_baseline_parser(sub) -> None:
    baseline = sub.add_parser(
        "baseline", help="named baselines: the sessions a CI gate compares with"
    ).add_subparsers(dest="baseline_command", required=True)
    create = baseline.add_parser("create", help="store a baseline of sessions")
    create.add_argument("name")
    chosen = create.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--sessions", nargs="+", metavar="ID", help="these session ids")
    chosen.add_argument("--model", help="the last sessions of this model")
    create.add_argument("--target", help="with --model: the target (when it has several)")
    create.add_argument("--last", type=int, help="with --model: this many sessions (10)")
    create.add_argument("--pin", action="store_true", help="make it the model+target's baseline")
    create.add_argument("--note", help="e.g. release v1.2")
    create.add_argument("--replace", action="store_true", help="overwrite a baseline of this name")
    create.set_defaults(func=cmd_baseline_create)
    listing = baseline.add_parser("list", help="stored baselines")
    listing.add_argument("--model", help="only this model's")
    listing.set_defaults(func=cmd_baseline_list)
    show = baseline.add_parser("show", help="one baseline in full")
    show.add_argument("name")
    show.set_defaults(func=cmd_baseline_show)
    pin = baseline.add_parser("pin", help="make a baseline the one its model+target gates on")
    pin.add_argument("name")
    pin.set_defaults(func=cmd_baseline_pin)


# --- sweep: every model through Dagster, for cron ---------------------------------------------


def cmd_sweep(args, paths: AacoPaths) -> int:
    """Measure every registry model as Dagster runs; exit 1 when a model failed."""
    from sensors.sweep import dagster_home_for, sweep

    only, targets = _names(args.models), _names(args.targets)
    print(
        f"sweeping {paths.registry}; runs go to DAGSTER_HOME={dagster_home_for(paths)}", flush=True
    )
    results = sweep(
        paths,
        only,
        targets=targets,
        on_result=lambda r: print("  " + r.line(), flush=True),
        on_progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    failed = [r.slug for r in results if r.status == "failed"]
    regressed = [r.slug for r in results if r.status == "regression"]
    print(f"{len(results)} runs: {len(failed)} failed, {len(regressed)} regressed")
    return 1 if failed or (args.fail_on_regression and regressed) else 0


def _names(listed: str | None) -> list[str] | None:
    """A comma-separated option as a list (None when absent or empty)."""
    names = [name.strip() for name in (listed or "").split(",") if name.strip()]
    return names or None


def add_sweep_parser(sub) -> None:
    sweep = sub.add_parser(
        "sweep", help="measure every registry model through Dagster now (for cron, no daemon)"
    )
    sweep.add_argument("--models", help="comma-separated model names (default: all)")
    sweep.add_argument(
        "--targets",
        help="comma-separated devices (default: this host's; with runs routed to device "
        "workers, every registered one)",
    )
    sweep.add_argument(
        "--fail-on-regression", action="store_true", help="also exit 1 when a model regressed"
    )
    sweep.set_defaults(func=cmd_sweep)


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
    run.add_argument("--provider", help="cpu, rocm, migraphx or a full provider name")
    run.add_argument(
        "--iterations", type=int, help="exactly N measured iterations (default: the sidecar's)"
    )
    run.add_argument(
        "--memory-limit-mb",
        type=int,
        help="kill the worker above this RSS (default: 3 x (weights + inputs) + 4 GiB, "
        "at most 80%% of the host's memory)",
    )
    run.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="profiled pass with the sidecar's count; --no-profile keeps it to 1 iteration",
    )
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
    worker = sub.add_parser(
        "worker", help="run a device's queue on this host (scaled-out instance, see README)"
    )
    worker.add_argument("--target", required=True, help="the device: cpu, gpu0, gpu1, ...")
    worker.set_defaults(func=cmd_worker)

    add_detector_parser(sub)
    add_export_parser(sub)
    add_report_parser(sub)
    add_diff_parser(sub)
    add_baseline_parser(sub)
    add_sweep_parser(sub)
    doctor = sub.add_parser("doctor", help="check this host: runtime, ROCm, GPUs, TraceLake")
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    paths = AacoPaths.from_env()
    stop_on_signals()
    try:
        fit_address_space()  # before any thread starts
        require_headroom()
        return args.func(args, paths)
    except (AacoInputError, WorkerFailure) as exc:
        print(f"aaco: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        kept = f"; the unfinished session is kept in {exc.evidence_dir}" if exc.evidence_dir else ""
        print(f"aaco: stopped by {exc.signal_name}{kept}", file=sys.stderr)
        return exit_code(exc)
    except (MemoryError, ImportError, RuntimeError) as exc:
        if not isinstance(exc, MemoryError) and not _out_of_address_space(exc):
            raise
        print(
            "aaco: error: out of memory in the aaco process. Fix: raise the memory limit "
            f"(ulimit -v is {describe_limit()}) or measure a smaller model",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        problem = out_of_space(exc, paths.home)
        if problem is None:
            raise
        print(f"aaco: error: {problem}", file=sys.stderr)
        return 2


def _out_of_address_space(exc: ImportError | RuntimeError) -> bool:
    """A native library that could not be mapped, or a thread whose stack could not be: the
    address-space limit, not a missing package or a bug."""
    message = str(exc).lower()
    if isinstance(exc, RuntimeError):
        return "can't start new thread" in message and address_space_limit() is not None
    return "failed to map segment" in message or "cannot allocate memory" in message


if __name__ == "__main__":
    sys.exit(main())

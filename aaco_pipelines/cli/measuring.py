"""`aaco run` (measure one model now, without Dagster) and `aaco ingest` (a trace collected
elsewhere becomes a session), with the headline table `aaco run` prints."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aaco_pipelines.cli.common import (
    INGEST_STAGES,
    add_json_option,
    comma_list,
    emit,
    lake_where,
    next_commands,
    path_argument,
    print_json,
    progress_printer,
    with_examples,
)
from aaco_pipelines.config import AacoPaths, default_target
from aaco_pipelines.errors import AacoInputError

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


def run_figures(lake_path: Path, session_id: str) -> dict:
    """What `aaco run` reports of a session, in one read of the lake: its headline row, a
    generation session's figures, the measurement-quality verdict, the top op and the
    objectives; `compare`: whether the model has an earlier session to diff against."""
    from aaco_pipelines.tracelake import queries
    from aaco_pipelines.tracelake.store import TraceLake

    lake = TraceLake(lake_path)
    with lake.reading():  # a generation session's figures are a second read
        row = queries.run_summary(lake, session_id)
        figures = (
            queries.generation_summary(lake, session_id) if row["workload"] == "generation" else {}
        )
        return {
            "row": row,
            "figures": figures,
            "quality": queries.measurement_quality_row(lake, session_id),
            "top": queries.top_op(lake, session_id),
            "objectives": queries.objective_verdicts(lake, session_id),
            "compare": queries.previous_session(lake, session_id) is not None,
        }


def run_summary(lake_path: Path, session_id: str, found: dict | None = None) -> str:
    """The session's headline numbers as an aligned two-column table, whether they can be
    trusted first (`found`: run_figures, when already read)."""
    import json

    from aaco_pipelines.analysis.bottleneck.classification import (
        class_line,
        close_call_text,
        set_aside_signals,
    )
    from aaco_pipelines.analysis.comparison.across_sessions import rivals, rivals_text
    from aaco_pipelines.analysis.metrics.measurement_quality import MeasurementQuality

    found = found or run_figures(lake_path, session_id)
    row, figures, quality = found["row"], found["figures"], found["quality"]
    top, objectives = found["top"], found["objectives"]
    classes = top["other_classes"] if top else []  # no class before attribution either
    bottleneck = class_line(row) if row["confidence"] is not None else row["bottleneck"] or "-"
    close = close_call_text(json.loads(row["close_calls_json"] or "null"))
    if close:
        bottleneck += f", a close call: {close}"
    set_aside = set_aside_signals(json.loads(row["evidence_json"] or "[]"))
    if row["decided"] is False:
        bottleneck += f": {row['undecided_reason']}"
    elif quality and quality["verdict"] == "suspect" and set_aside:
        bottleneck += ", on what contention does not move (the measurement was suspect)"
    elif quality and quality["verdict"] == "suspect" and row["bottleneck"]:
        bottleneck += ", uncertain: on a suspect measurement"
    found = rivals(row["bottleneck"], classes) if row["bottleneck"] else {}
    if found:
        bottleneck += "; " + rivals_text("bottleneck", found, classes)
    cells = [
        ("measurement", MeasurementQuality.from_row(quality).line() if quality else "not judged"),
        ("session", row["session_id"]),
        ("model", row["model_slug"]),
        ("provider", ", ".join(row["providers_used"] or []) or "-"),
        ("iterations", str(row["measured_iterations"])),
        ("latency mean", f"{row['latency_mean_ns'] / 1e6:.3f} ms"),
        ("latency p50", f"{row['latency_p50_ns'] / 1e6:.3f} ms"),
        ("latency p99", f"{row['latency_p99_ns'] / 1e6:.3f} ms"),
        ("throughput", f"{row['throughput_per_s']:.1f} /s"),
        ("bottleneck", bottleneck),
        ("top op", top_op_cell(top)),
    ]
    if row["workload"] == "generation":
        cells[4] = ("requests", f"{row['measured_iterations']} ({row['scenario']}, end to end)")
        cells += generation_summary(figures)
    if objectives:
        cells.append(("objectives", objectives_cell(objectives)))
    return "\n".join(f"  {name:13} {value}" for name, value in cells)


def objectives_cell(objectives: list[dict]) -> str:
    """How many objectives each verdict has, the breached ones named (aaco diff lists all)."""
    counts: dict[str, list[str]] = {}
    for o in objectives:
        verdict = o["verdict"] + (" on a suspect measurement" if o["suspect"] else "")
        counts.setdefault(verdict, []).append(o["objective"])
    return ", ".join(
        f"{len(names)} {verdict}" + (f" ({', '.join(names)})" if "breached" in verdict else "")
        for verdict, names in sorted(counts.items())
    )


def top_op_cell(top: dict | None) -> str:
    """The top node, its share, the ops tied with it, and "uncertain" when a bootstrap
    resample of the profiled iterations often ranks another first (analysis/ranking_stability)."""
    from aaco_pipelines.analysis.attribution.ranking_stability import (
        MIN_ITERATIONS,
        STABLE,
        TICK_NS,
        TIE,
        tied_with_top,
    )
    from aaco_pipelines.analysis.comparison.across_sessions import rivals, rivals_text

    if top is None:
        return "-"
    cell = top["name"]
    if top["share"] is not None:
        cell += f" ({top['share']:.0%} of kernel time)"
    tied = tied_with_top(top.get("ranked") or [])
    if tied:
        named = ", ".join(f"{t['name']} {t['share']:.0%}" for t in tied[:TIED_SHOWN])
        more = f" and {len(tied) - TIED_SHOWN} more" if len(tied) > TIED_SHOWN else ""
        cell += f", tied with {named}{more} (within {TIE:.0%} or {TICK_NS / 1e3:g} µs of its time)"
    others = top.get("others") or []
    found = rivals(top["name"], others, said=[t["name"] for t in tied])
    if found:
        cell += "; " + rivals_text("top_op", found, others)
    stability = top["top_op_stability"]
    if stability is None:
        return cell + (
            f"; ranking not judged ({top['profiled_iterations']} profiled iterations, "
            f"under {MIN_ITERATIONS})"
        )
    if stability < STABLE and not tied and not found:
        return cell + f", top op uncertain: first in {stability:.0%} of resamples"
    return cell


TIED_SHOWN = 3  # tied ops named in the summary's cell; the report lists them all


def generation_summary(figures: dict[tuple[str, str], float]) -> list[tuple[str, str]]:
    """One line per scenario of a generation session: TTFT, TPOT, tokens/s, goodput."""
    from aaco_pipelines.registry.workload import SCENARIOS

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


def laboratory_cores(listed: str | None) -> tuple[int, ...] | None:
    """--laboratory-cores 1,3 as core numbers (None: laboratory mode chooses the quietest)."""
    names = comma_list(listed)
    if names is None:
        return None
    if not all(name.isdigit() for name in names):
        raise AacoInputError(
            f"--laboratory-cores takes core numbers, not {listed!r}",
            fix="e.g. --laboratory-cores 1,3",
        )
    return tuple(int(name) for name in names)


def model_named(given: str, paths: AacoPaths):
    """The model `aaco run --model` names: an .onnx file by its path (outside the registry: a
    series of its own), else a registry model by its name. A misspelled name or path is one
    line naming the closest model when one is close."""
    from aaco_pipelines.registry.identity import model_at
    from aaco_pipelines.registry.scan import find_model, model_slug, spelled_like

    candidate = Path(given)
    if candidate.suffix == ".onnx" and candidate.is_file():
        return model_at(candidate, paths.registry)
    if len(candidate.parts) == 1:
        return find_model(paths.registry, model_slug(given))
    if candidate.exists():
        raise AacoInputError(
            "the model is not an .onnx file",
            path=candidate,
            fix="give the .onnx file itself, or a registry model's name (aaco registry list)",
        )
    folder = candidate.parent
    siblings = [p.name for p in folder.glob("*.onnx")] if folder.is_dir() else []
    close = spelled_like(candidate.name, siblings)
    raise AacoInputError(
        "model file not found",
        path=candidate,
        fix=f"did you mean {str(folder / close)!r}?"
        if close
        else "give an existing .onnx file, or a registry model's name (aaco registry list)",
    )


def cmd_run(args, paths: AacoPaths) -> int:
    """Measure and analyse one model through the same pipeline the Dagster assets run. The
    options and the model are checked first (a mistake is one line), then the first line is
    printed, then the pipeline (onnx, scipy: seconds on a busy host) is imported."""
    from aaco_pipelines.registry.sidecar import TIMEOUT_RANGE_S

    if args.iterations is not None and args.iterations < 1:
        raise AacoInputError("--iterations must be at least 1", fix="e.g. --iterations 50")
    if args.memory_limit_mb is not None and args.memory_limit_mb < 64:
        raise AacoInputError(
            "--memory-limit-mb must be at least 64", fix="e.g. --memory-limit-mb 16384"
        )
    low, high = TIMEOUT_RANGE_S
    if args.timeout is not None and not low <= args.timeout <= high:  # NaN fails too
        raise AacoInputError(
            f"--timeout must be from {low:g} to {high:g} seconds", fix="e.g. --timeout 600"
        )
    model = model_named(args.model, paths)
    from aaco_pipelines.registry.sidecar import load_sidecar

    load_sidecar(model.path)  # a mistake in it is one line, before anything is said or started
    cores = laboratory_cores(args.laboratory_cores)
    providers = run_providers(args.provider)
    target = default_target()  # what this host measures on, as the Dagster runs record it
    print(f"aaco run: measuring {model.slug} ({model.path}) on {target} ...", file=sys.stderr,
          flush=True)  # fmt: skip
    from aaco_pipelines.execution.runner import RunnerLimits
    from aaco_pipelines.stages.measure import MeasureOptions
    from aaco_pipelines.stages.pipeline import measure_model

    options = MeasureOptions(
        target=target,
        laboratory=args.laboratory or cores is not None,
        laboratory_cores=cores,
        providers=providers,
        measured_iterations=args.iterations,
        profiled_iterations=None if args.profile else 1,
        limits=RunnerLimits(
            memory_limit_mb=args.memory_limit_mb,
            **({"timeout_s": args.timeout} if args.timeout is not None else {}),
        ),
        timeout_given=args.timeout is not None,
        counters=args.counters,
    )
    say = progress_printer()
    bundle = measure_model(model, paths, options, on_progress=say, analyze=True)
    files = published(args, paths, bundle.session_id, say)
    say.done()
    session_id = bundle.session_id
    found = run_figures(paths.tracelake, session_id)
    observed = bundle.read_json("observed.json")
    memory = {
        "peak_rss_mib": observed["worker_peak_rss_bytes"] >> 20,
        "limit_mib": observed["memory_limit_bytes"] >> 20,
        "limit_rule": bundle.request["limits"]["memory_limit_rule"].split(":")[0],
    }
    then = next_commands(session_id, found["compare"])
    if args.json:
        print_json({"session_id": session_id, "lake": lake_where(paths), **run_json(found),
                    "memory": memory, **files, "next": then})  # fmt: skip
        return 0
    print(f"session {session_id} -> {lake_where(paths)}")
    emit(run_summary(paths.tracelake, session_id, found))
    print(
        f"  {'peak memory':13} {memory['peak_rss_mib']} MiB of the {memory['limit_mib']} MiB "
        f"limit ({memory['limit_rule']})"
    )
    print("\n".join(published_lines(files, then)))
    return 0


def run_json(found: dict) -> dict:
    """`aaco run --json`'s figures (run_figures): times in ms, JSON columns decoded."""
    import json

    row, top, quality = found["row"], found["top"], found["quality"]
    ms = {k: row[f"latency_{k}_ns"] / 1e6 if row[f"latency_{k}_ns"] is not None else None
          for k in ("mean", "p50", "p99")}  # fmt: skip
    generation: dict[str, dict] = {}
    for (run, metric), value in found["figures"].items():
        generation.setdefault(run, {})[metric] = value
    return {
        "model": row["model_slug"],
        "workload": row["workload"],
        "providers": row["providers_used"] or [],
        "measured_iterations": row["measured_iterations"],
        "latency_ms": ms,
        "throughput_per_s": row["throughput_per_s"],
        "bottleneck": {
            "class": row["bottleneck"],
            "confidence": row["confidence"],
            "close_calls": json.loads(row["close_calls_json"] or "null"),
            "decided": row.get("decided"),
            "undecided_reason": row.get("undecided_reason"),
        },
        "measurement": decoded(quality) if quality else None,
        "top_op": top_op_json(top),
        "objectives": found["objectives"],
        "generation": generation or None,
    }


def top_op_json(top: dict | None) -> dict | None:
    if top is None:
        return None
    p50 = top["p50_ns"]
    return {
        "name": top["name"],
        "share": top["share"],
        "p50_ms": p50 / 1e6 if p50 is not None else None,
        "stability": top["top_op_stability"],
        "profiled_iterations": top["profiled_iterations"],
    }


def decoded(row: dict) -> dict:
    """A lake row with its `*_json` text columns as the values they hold (`reasons`, ...)."""
    import json

    return {
        (k[: -len("_json")] if k.endswith("_json") else k): (
            json.loads(v) if k.endswith("_json") and isinstance(v, str) else v
        )
        for k, v in row.items()
    }


def cmd_ingest(args, paths: AacoPaths) -> int:
    """A trace collected elsewhere becomes a session, analysed like a measured one. Both paths
    are checked before any work: a FIFO or device would block or never end once opened."""
    from aaco_pipelines.collectors.trace_paths import check_trace

    check_trace(Path(args.path))
    model = Path(args.model) if args.model else None
    if model is not None and not model.is_file():
        raise AacoInputError(
            "the model is not a regular file" if model.exists() else "model file not found",
            path=model,
            fix="give the .onnx file itself",
        )
    print(f"aaco ingest: reading {args.path} ...", file=sys.stderr, flush=True)
    # The pipeline brings the analysis stack (onnx, scipy): imported once the paths are good.
    from aaco_pipelines.analysis.bottleneck.classification import class_line
    from aaco_pipelines.stages.pipeline import ingest_and_analyze
    from aaco_pipelines.tracelake import queries
    from aaco_pipelines.tracelake.store import TraceLake

    say = progress_printer(INGEST_STAGES)
    bundle, summary = ingest_and_analyze(
        Path(args.path), paths, model=model, name=args.name, on_progress=say
    )
    files = published(args, paths, bundle.session_id, say)
    say.done()
    session_id, source = bundle.session_id, bundle.session["trace_source"]
    compare = queries.previous_session(TraceLake(paths.tracelake), session_id) is not None
    then = next_commands(session_id, compare)
    if args.json:
        print_json({"session_id": session_id, "trace_source": source, "lake": lake_where(paths),
                    **summary, **files, "next": then})  # fmt: skip
        return 0
    print(f"session {session_id} ({source}) -> {lake_where(paths)}")
    emit(f"  bottleneck: {class_line(summary)}")
    if not summary["decided"]:
        emit(f"    not decided: {summary['undecided_reason']}")
    print("\n".join(published_lines(files, then)))
    return 0


def published(args, paths: AacoPaths, session_id: str, say) -> dict:
    """The publish stage, as a Dagster run ends with it: the session's report and trace files
    ({report, trace, not_published}: null where not written, and why). The session is stored
    by now: a failure here is a warning."""
    if not args.publish:
        return {"report": None, "trace": None, "not_published": "--no-publish"}
    from aaco_pipelines.stages.publish import publish
    from aaco_pipelines.tracelake.store import TraceLake

    say("publishing: the report and the trace")
    try:
        files = publish(TraceLake(paths.tracelake), session_id, paths.home)
    except Exception as exc:  # noqa: BLE001 - said; the measurement is kept; a stop passes
        return {"report": None, "trace": None, "not_published": f"{type(exc).__name__}: {exc}"}
    if files.trace_written:
        return {"report": str(files.report), "trace": str(files.trace), "not_published": None}
    return {"report": str(files.report), "trace": None,
            "not_published": f"trace {files.trace_note(session_id)}"}  # fmt: skip


def published_lines(files: dict, then: list[str]) -> list[str]:
    """The files' lines of the text output, then the commands to run next."""
    lines = []
    if files["report"]:
        lines.append(f"  {'report':13} {files['report']}")
    if files["trace"]:
        lines.append(f"  {'trace':13} {files['trace']}")
    why = files["not_published"]
    if why and why != "--no-publish":
        lines.append(
            f"  {'trace':13} {why.removeprefix('trace ')}"
            if why.startswith("trace ")
            else f"  {'report':13} not written ({why})"
        )
    lines += [f"  {'next' if i == 0 else '':13} {command}" for i, command in enumerate(then)]
    return lines


def add_publish_option(parser) -> None:
    parser.add_argument(
        "--publish",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the session's HTML report and Perfetto trace under AACO_HOME/reports, as a "
        "Dagster run does (default); --no-publish skips them (aaco report writes one later)",
    )


def add_parser(sub) -> None:
    run = sub.add_parser("run", help="measure one model now, without Dagster")
    path_argument(
        run.add_argument("--model", required=True, help="registry name or path to an .onnx file")
    )
    run.add_argument("--laboratory", action="store_true", help="pinned cores, fixed threads")
    run.add_argument(
        "--laboratory-cores",
        help="laboratory mode on these cores (e.g. 1,3), kept even when busy; default: all "
        "allowed cores but the busiest",
    )
    run.add_argument("--provider", help="cpu, rocm, migraphx or a full provider name")
    run.add_argument(
        "--iterations", type=int, help="exactly N measured iterations (default: the sidecar's)"
    )
    run.add_argument(
        "--memory-limit-mb",
        type=int,
        help="kill the measuring process above this RSS (default: 3 x (weights + inputs) + 4 GiB, "
        "at most 80%% of the host's memory)",
    )
    run.add_argument(
        "--timeout",
        type=float,
        help="kill each measuring process that runs longer than this many seconds (default: "
        "the sidecar's timeout_s, else 600)",
    )
    run.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="profiled pass with the sidecar's count; --no-profile keeps it to 1 iteration",
    )
    run.add_argument(
        "--counters",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also collect hardware counters, in passes under rocprofv3 --pmc (AMD GPU hosts; "
        "said why not elsewhere); default: the sidecar's `counters`",
    )
    add_publish_option(run)
    add_json_option(run, "the session's figures and files (progress stays on stderr)")
    with_examples(
        run,
        "aaco run --model resnet_cnn",
        "aaco run --model ./my_model.onnx --iterations 200 --laboratory --json",
    )
    run.set_defaults(func=cmd_run)

    ingest = sub.add_parser("ingest", help="ingest a trace collected elsewhere as a session")
    path_argument(
        ingest.add_argument(
            "path",
            help="rocprofv3 output directory or trace file (csv, json, rocpd, rpd, rocprof v1)",
        )
    )
    path_argument(
        ingest.add_argument("--model", help="the ONNX model that was traced (adds its graph)")
    )
    ingest.add_argument("--name", help="model name for the session (default: model or trace name)")
    add_publish_option(ingest)
    add_json_option(ingest, "the session and its files (progress stays on stderr)")
    with_examples(
        ingest,
        "aaco ingest ./rocprof_out --model ./my_model.onnx",
        "aaco ingest trace.rpd --name vllm_decode --json",
    )
    ingest.set_defaults(func=cmd_ingest)

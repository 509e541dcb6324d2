"""AACO benchmarks: `make bench` (or `.venv/bin/python benchmarks/run.py [--repeats N]`).

Prints, for this machine:
  1. the wall time of a full zoo sweep, bare pipeline and through Dagster's asset graph, each in a
     fresh AACO_HOME, alternated `--repeats` times: every run, both medians and the median of
     the pairs' ratios;
  2. Dagster's overhead: the asset graph for one model vs. the bare pipeline on the same model,
     alternated `--repeats` times: every run, both medians and the median of the pairs' ratios;
  3. profiling overhead per zoo model: profiled vs. unprofiled median latency;
  4. latency coefficient of variation per zoo model, with and without laboratory mode.
Everything runs in a temporary AACO_HOME; nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.instance import event_log_settings
from aaco_pipelines.registry.scan import scan_registry
from aaco_pipelines.registry.sidecar import load_sidecar
from aaco_pipelines.registry.zoo import build_zoo
from aaco_pipelines.stages.measure import MeasureOptions
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def fresh_paths(root: Path, name: str) -> AacoPaths:
    home = root / name
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "tracelake.duckdb")
    build_zoo(paths.registry)
    return paths


def bare_sweep(
    paths: AacoPaths, options: MeasureOptions | None = None, analyze: bool = True
) -> dict[str, str]:
    """Every zoo model through the pipeline functions, no Dagster: slug -> session id. With
    `analyze`, the same stages as the asset graph (attribution, bottleneck, drift)."""
    return {
        m.slug: measure_model(m, paths, options or MeasureOptions(), analyze=analyze).session_id
        for m in scan_registry(paths.registry)
    }


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def dagster_materialize(paths: AacoPaths, slugs: list[str], instance) -> None:
    """The asset graph for each model's partition on this host's target (cpu)."""
    import dagster as dg

    from aaco_pipelines.assets import (
        MODEL_ASSETS,
        model_target_key,
        models_partitions,
        targets_partitions,
    )
    from aaco_pipelines.resources import (
        BenchmarkRunnerResource,
        ModelRegistryResource,
        RecordIOManager,
        TraceLakeResource,
    )

    resources = {
        "registry": ModelRegistryResource(
            home=str(paths.home), registry=str(paths.registry), tracelake=str(paths.tracelake)
        ),
        "tracelake": TraceLakeResource(database=str(paths.tracelake)),
        "runner": BenchmarkRunnerResource(),
        "io_manager": RecordIOManager(),  # as in aaco_pipelines/definitions.py
    }
    instance.add_dynamic_partitions(models_partitions.name, slugs)
    instance.add_dynamic_partitions(targets_partitions.name, ["cpu"])
    for slug in slugs:
        result = dg.materialize(
            MODEL_ASSETS,
            partition_key=model_target_key(slug, "cpu"),
            instance=instance,
            resources=resources,
            run_config=QUIET,
            raise_on_error=False,  # a blocking drift check may fail: timed all the same
        )
        failed = {e.step_key for e in result.get_step_failure_events()}
        assert failed <= {"performance_drift"}, (slug, failed)


def compare(bare_times: list[float], dagster_times: list[float]) -> dict:
    """Both medians and the median of the pairs' ratios (each pair ran back to back), with every
    run's time: what a ratio printed by this script comes from."""
    ratios = [d / b for b, d in zip(bare_times, dagster_times, strict=True)]
    return {
        "bare": round(statistics.median(bare_times), 3),
        "dagster": round(statistics.median(dagster_times), 3),
        "ratio": round(statistics.median(ratios), 2),
        "bare_runs": [round(t, 3) for t in bare_times],
        "dagster_runs": [round(t, 3) for t in dagster_times],
        "pair_ratios": [round(r, 2) for r in ratios],
    }


# Issue 23's goals for Dagster's cost, quiet host: the zoo sweep and one small model.
ZOO_GOAL, ONE_MODEL_GOAL = 1.2, 1.3


def comparison_lines(c: dict, goal: float) -> str:
    runs = ", ".join(
        f"{b:.2f}/{d:.2f}" for b, d in zip(c["bare_runs"], c["dagster_runs"], strict=True)
    )
    return (
        f"   bare {c['bare']:.2f} s, Dagster {c['dagster']:.2f} s (medians): overhead "
        f"{c['dagster'] - c['bare']:.2f} s, ratio {c['ratio']:.2f}x (median of the pairs' "
        f"ratios; goal <= {goal}x)\n   runs, bare/Dagster s: {runs}"
    )


def session_latencies(paths: AacoPaths, session_id: str) -> dict[str, np.ndarray]:
    table = TraceLake(paths.tracelake).query(
        "SELECT pass, latency_ns FROM iterations WHERE session_id = ? AND pass IN ('measured', 'profiled')",
        [session_id],
    )
    passes = np.asarray(table["pass"].to_pylist())
    latency = table["latency_ns"].to_numpy().astype(np.float64)
    return {name: latency[passes == name] for name in ("measured", "profiled")}


def coefficient_of_variation(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / values.mean())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,  # this host's pairs spread 10-20 %: three pairs' median moved by 0.1x
        help="repeats of each bare/Dagster comparison (zoo sweep and one model), alternated",
    )
    parser.add_argument(
        "--overhead-model", default="mlp", help="zoo model for the Dagster overhead figure"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict = {"cpu_count": os.cpu_count()}

    import dagster as dg

    with (
        tempfile.TemporaryDirectory(prefix="aaco-bench-") as tmp,
        # The embedded instance's event log, as `aaco up` writes it into dagster.yaml.
        dg.instance_for_test(overrides=event_log_settings(Path(tmp) / "dagster")) as instance,
    ):
        root = Path(tmp)
        print(f"1. full zoo sweep (alternated, {args.repeats} pairs)", flush=True)
        bare_times, dagster_times = [], []
        for i in range(args.repeats):  # alternated, each in a fresh home: a busy moment hits both
            paths = fresh_paths(root, f"bare{i}")
            seconds, swept = timed(partial(bare_sweep, paths))
            bare_times.append(seconds)
            if i == 0:
                bare, sessions = paths, swept  # sections 2 to 4 reuse the first bare home
            dagster_paths = fresh_paths(root, f"dagster{i}")
            slugs = [m.slug for m in scan_registry(dagster_paths.registry)]
            dagster_times.append(
                timed(partial(dagster_materialize, dagster_paths, slugs, instance))[0]
            )
            print(
                f"   pair {i + 1}: bare {bare_times[-1]:.1f} s, Dagster {dagster_times[-1]:.1f} s"
            )
        results["zoo_sweep_s"] = {"models": len(slugs), **compare(bare_times, dagster_times)}
        print(
            f"   {len(slugs)} models each:\n" + comparison_lines(results["zoo_sweep_s"], ZOO_GOAL)
        )

        print(
            f"2. Dagster overhead on one model ({args.overhead_model}, {args.repeats} pairs)",
            flush=True,
        )
        registered = {m.slug: m for m in scan_registry(bare.registry)}
        model = registered[args.overhead_model]
        bare_times, dagster_times = [], []
        for _ in range(args.repeats):  # alternated, so a busy moment hits both alike
            bare_times.append(timed(lambda: measure_model(model, bare, analyze=True))[0])
            dagster_times.append(
                timed(lambda: dagster_materialize(dagster_paths, [args.overhead_model], instance))[
                    0
                ]
            )
        results["dagster_overhead_s"] = compare(bare_times, dagster_times)
        print(comparison_lines(results["dagster_overhead_s"], ONE_MODEL_GOAL))

        print("3. profiling overhead (profiled vs unprofiled median latency)", flush=True)
        results["profiling_overhead_pct"] = {}
        generative = {slug for slug, m in registered.items() if load_sidecar(m.path).generation}
        for slug, session_id in sessions.items():
            if slug in generative:  # a request's latency against one decode step's: no ratio
                print(f"   {slug:15} not compared: measured = whole requests, profiled = steps")
                continue
            lat = session_latencies(bare, session_id)
            m, p = np.median(lat["measured"]), np.median(lat["profiled"])
            results["profiling_overhead_pct"][slug] = round((p - m) / m * 100, 1)
            print(
                f"   {slug:15} unprofiled {m / 1e6:8.3f} ms  profiled {p / 1e6:8.3f} ms  {(p - m) / m * 100:+7.1f}%"
            )

        print("4. latency CV, default vs laboratory mode", flush=True)
        lab = fresh_paths(root, "lab")
        lab_sessions = bare_sweep(lab, MeasureOptions(laboratory=True), analyze=False)
        results["latency_cv"] = {}
        for slug in sessions:
            default_cv = coefficient_of_variation(
                session_latencies(bare, sessions[slug])["measured"]
            )
            lab_cv = coefficient_of_variation(
                session_latencies(lab, lab_sessions[slug])["measured"]
            )
            results["latency_cv"][slug] = {
                "default": round(default_cv, 4),
                "laboratory": round(lab_cv, 4),
            }
            print(f"   {slug:15} default CV {default_cv:6.3f}   laboratory CV {lab_cv:6.3f}")

    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())

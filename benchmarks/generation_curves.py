"""LLM generation on this machine: the zoo's Llama decoder under LoadGen's three scenarios and its
latency / throughput curves against batch size and prompt length.

    .venv/bin/python benchmarks/generation_curves.py [--out DIR] [--layers N]

Measures one session (in a fresh AACO_HOME under --out, analysed) and prints, per scenario,
TTFT / TPOT / ITL / end-to-end percentiles, tokens/s, requests/s and goodput (ours, and LoadGen's
own summary beside them), then the curve points; the two plots go to --out as PNG.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import onnx

from aaco_pipelines.config import AacoPaths
from aaco_pipelines.registry.scan import scan_registry
from aaco_pipelines.registry.workload import Curves
from aaco_pipelines.registry.zoo import llama_decoder, zoo_sidecar
from aaco_pipelines.report.generation_plots import generation_curves, token_latencies
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake

FIGURES = ("ttft_p50_ns", "ttft_p99_ns", "tpot_p50_ns", "tpot_p99_ns", "itl_p99_ns",
           "e2e_p50_ns", "e2e_p99_ns", "output_tokens_per_s", "requests_per_s",
           "goodput_per_s", "arrival_rate_per_s")  # fmt: skip
CURVE_FIGURES = ("ttft_p50_ns", "tpot_p50_ns", "e2e_p50_ns", "output_tokens_per_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for the home and plots")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (2: the zoo's)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="aaco-generation-"))
    paths = AacoPaths(home=out / "home", registry=out / "home" / "registry",
                      tracelake=out / "home" / "lake.duckdb")  # fmt: skip
    paths.registry.mkdir(parents=True, exist_ok=True)
    sidecar = zoo_sidecar("llama_decoder")
    workload = dataclasses.replace(
        sidecar.generation,
        scenarios=("single_stream", "server", "offline"),
        requests=64,
        min_duration_s=2.0,
        curves=Curves(batch_sizes=(1, 2, 4, 8, 16), prompt_lengths=(16, 32, 64, 128), repeats=3),
    )
    onnx.save(llama_decoder(layers=args.layers), paths.registry / "llama_decoder.onnx")
    dataclasses.replace(sidecar, generation=workload).save(paths.registry / "llama_decoder.yaml")
    (model,) = scan_registry(paths.registry)
    bundle = measure_model(model, paths, analyze=True, on_progress=lambda m: print(f"  {m}"))
    lake = TraceLake(paths.tracelake)
    metrics = lake.query(
        "SELECT * FROM generation_metrics WHERE session_id = $sid", {"sid": bundle.session_id}
    )
    requests = lake.query(
        "SELECT * FROM requests WHERE session_id = $sid", {"sid": bundle.session_id}
    )
    print_scenarios(metrics.to_pylist(), workload.scenarios)
    print_curves(metrics.to_pylist())
    (out / "generation_curves.png").write_bytes(generation_curves(metrics))
    (out / "token_latencies.png").write_bytes(token_latencies(requests))
    print(f"\nsession {bundle.session_id}; plots in {out}")


def _show(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.3f} ms" if metric.endswith("_ns") else f"{value:.1f}"


def print_scenarios(rows: list[dict], scenarios) -> None:
    figures = {(r["run"], r["metric"], r["source"]): r["value"] for r in rows
               if r["batch_size"] is None}  # fmt: skip
    print(f"\n{'scenario':14} {'metric':22} {'aaco':>14} {'LoadGen':>14}")
    for run in scenarios:
        for metric in FIGURES:
            ours = figures.get((run, metric, "aaco"))
            if ours is None:
                continue
            theirs = figures.get((run, metric, "loadgen"))
            print(f"{run:14} {metric:22} {_show(metric, ours):>14} {_show(metric, theirs):>14}")
        valid = figures.get((run, "result_valid", "loadgen"))
        print(f"{run:14} {'LoadGen result':22} {'VALID' if valid else 'INVALID':>29}")


def print_curves(rows: list[dict]) -> None:
    points: dict[tuple, dict] = {}
    for r in rows:
        if r["run"] == "curve" and r["source"] == "aaco":
            points.setdefault((r["batch_size"], r["prompt_tokens"]), {})[r["metric"]] = r["value"]
    print(f"\n{'batch':>5} {'prompt':>6} " + " ".join(f"{m:>20}" for m in CURVE_FIGURES))
    for (batch, prompt), values in sorted(points.items()):
        cells = " ".join(f"{_show(m, values.get(m)):>20}" for m in CURVE_FIGURES)
        print(f"{batch:>5} {prompt:>6} {cells}")


if __name__ == "__main__":
    main()

"""Share of kernel time attributed to original ONNX nodes, per real model and ORT configuration.

For every model of the real-architecture corpus (tests/data/real_models) and every ONNX Runtime
graph-optimization configuration a user can ask for (basic, extended, all; all without the
NCHWc layout transformer), run the model with ONNX Runtime's profiler on the CPU provider, map
the runtime graph ONNX Runtime saved back to the original graph (analysis.attribution.coverage), and print
the share of node time that lands on an original node; with -v, the share of each attribution
method and the nodes attributed weakly (inserted helpers) or not at all.

    .venv/bin/python benchmarks/real_models/attribution_coverage.py [--only resnet_ts,...] [-v]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from aaco_pipelines.analysis.attribution.coverage import (
    OPTIMIZATION_CONFIGS,
    attribution_coverage,
    profile_model,
)

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "data" / "real_models"
WEAK_METHODS = ("runtime_inserted", "inserted_helper")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    wanted = {n for n in args.only.split(",") if n}
    models = sorted(p for p in CORPUS.glob("*.onnx") if not wanted or p.stem in wanted)
    worst = 1.0
    print(f"{'model':28} " + " ".join(f"{c:>14}" for c in OPTIMIZATION_CONFIGS))
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            results = {
                c: attribution_coverage(profile_model(model, c, Path(tmp)))
                for c in OPTIMIZATION_CONFIGS
            }
            worst = min(worst, *(r["share"] for r in results.values()))
            print(f"{model.stem:28} " + " ".join(f"{r['share']:>14.1%}" for r in results.values()))
            if args.verbose:
                for config, r in results.items():
                    methods = ", ".join(f"{m} {v:.0%}" for m, v in r["by_method"].items())
                    print(f"    {config:12} {methods}")
                    weak = [
                        row for row in r["per_node"].to_pylist() if row["method"] in WEAK_METHODS
                    ]
                    for row in weak[:8]:
                        share = row["ns"] / r["node_ns"]
                        print(
                            f"    {config:12} {share:6.1%} {row['method']:17} {row['op_type']:16} {row['node_name']}"
                        )
    print(f"worst attributed share: {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Can its numbers be trusted on a busy host? `.venv/bin/python benchmarks/trust.py [--busy N]`

Issue 24's measurements, quiet and with N busy loops beside it (`--busy 2`: one spinning process
per core of a 2-core host, for the whole run). Everything runs in a temporary AACO_HOME.

1. The gate (`aaco diff`'s gate_verdict, default baseline: the previous 5 sessions):
   - false alarms on an unchanged model over `--comparisons` repeated comparisons (goal <= 1 %
     quiet, <= 2 % busy), with the metric that raised each and the "uncertain" decisions;
   - detection of a 2x-slower version (goal 100 %) and of a ~10 %-slower one (goal >= 90 %
     quiet), each session against the 5 last sessions of the unchanged one;
   - the same with `aaco diff --paired auto`: side by side wherever the stored sessions cannot
     settle it (a regression, an uncertain one, a p50 interval wider than the threshold);
     `--paired 0` leaves it out.
   The model is a chain of square MatMul+Relu layers (20; 40 for 2x, 22 for ~10 %: the true
   ratio, printed, comes from the side-by-side runs).
2. Class and top-op agreement over 5 runs of every zoo model (goal 100 % quiet; busy: agree, or
   the runs that disagree are labelled: a suspect measurement, for the class the other runs'
   class named as a close call or as another session's class, for the top op a bootstrap
   stability of its rank under 0.9 or another op named first by another session).
   Top ops "agree within ties" when every run's top op is among the ops every other run names
   as tied with its own (analysis/ranking_stability.tied_with_top) or as named first by the
   version's other sessions (analysis/across_sessions); classes "agree within close calls" when
   every run's class is the class or a close call of every other run, or a class the version's
   other sessions gave, which the report names too.
3. Roofline: points above their roof (goal 0) in those runs; the envelope against the host's
   theoretical peak.
4. LLM: ITL/TPOT against a plain ONNX Runtime loop, and server TTFT against LoadGen's own
   (benchmarks/llm_overhead.py, run as it is).
Not a timed test.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
BASELINE_SESSIONS = 5
CHAIN_LAYERS = {"unchanged": 20, "2x slower": 40, "~10% slower": 22}


def chain(layers: int, width: int = 256, batch: int = 32) -> onnx.ModelProto:
    """`layers` square MatMul+Relu layers: its time is nearly proportional to `layers`."""
    rng = np.random.default_rng(0)
    nodes, weights, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [
            helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"layer{i}/matmul"),
            helper.make_node("Relu", [f"m{i}"], [f"h{i}"], name=f"layer{i}/relu"),
        ]
        x = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, width])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@contextlib.contextmanager
def busy_loops(count: int):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# --- 1. the gate -------------------------------------------------------------------------------


def gate_trust(root: Path, comparisons: int, detections: int, paired: int) -> dict:
    from aaco_pipelines.config import AacoPaths
    from aaco_pipelines.governance.gate.decision import gate_verdict
    from aaco_pipelines.governance.gate.paired import judge_side_by_side, unsure
    from aaco_pipelines.registry.scan import registered_model
    from aaco_pipelines.registry.sidecar import ModelSidecar
    from aaco_pipelines.stages.pipeline import measure_model
    from aaco_pipelines.tracelake.store import TraceLake

    home = root / "gate"
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    paths.registry.mkdir(parents=True)
    model_path = paths.registry / "chain.onnx"
    ModelSidecar(
        warmup_iterations=10, measured_iterations=300, profiled_iterations=5,
        min_measured_seconds=0.0,
    ).save(paths.registry / "chain.yaml")  # fmt: skip
    lake = TraceLake(paths.tracelake)

    def sessions(layers: int, count: int, label: str) -> list[str]:
        onnx.save(chain(layers), model_path)
        model = registered_model(model_path)
        ids = []
        for i in range(count):
            ids.append(measure_model(model, paths).session_id)
            print(f"\r   {label}: {i + 1}/{count} sessions", end="", flush=True)
        print()
        return ids

    unchanged = sessions(CHAIN_LAYERS["unchanged"], comparisons + BASELINE_SESSIONS, "unchanged")
    results: dict = {}
    verdicts = [gate_verdict(lake, sid) for sid in unchanged[BASELINE_SESSIONS:]]
    results["unchanged"] = _rates(verdicts)
    baseline = unchanged[-BASELINE_SESSIONS:]
    auto = {"unchanged": verdicts} if paired else {}
    for name in ("2x slower", "~10% slower"):
        ids = sessions(CHAIN_LAYERS[name], detections, name)
        verdicts = [gate_verdict(lake, sid, baseline=baseline) for sid in ids]
        results[name] = _rates(verdicts)
        if paired:
            auto[name] = verdicts
    for name, verdicts in auto.items():  # aaco diff --paired auto
        decided = [judge_side_by_side(v, lake, paths) if unsure(v) else v for v in verdicts]
        side_by_side = [d for d in decided if d.paired is not None]
        results[name]["paired_auto"] = {
            "comparisons": len(decided),
            "side_by_side": len(side_by_side),
            "regressions": sum(d.regression for d in decided),
            "rate": sum(d.regression for d in decided) / len(decided),
            "median_side_by_side_p50_pct": float(
                np.median([d.paired["latency_p50"]["effect_pct"] for d in side_by_side])
            ) if side_by_side else None,
            "alarms": [_paired_alarm(d.paired) for d in side_by_side if d.regression],
        }  # fmt: skip
    return results


def _paired_alarm(paired: dict) -> dict:
    """A side-by-side regression's figures: how far, how sure, on how many rounds."""
    p50 = paired["latency_p50"]
    return {
        "effect_pct": round(p50["effect_pct"], 1),
        "ci": [round(p50["ci_low"], 1), round(p50["ci_high"], 1)],
        "threshold_pct": paired["threshold_pct"],
        "rounds": paired["rounds"],
    }


def _rates(verdicts) -> dict:
    """Regressions among the verdicts, which metrics raised them, and the uncertain ones."""
    raised = collections.Counter(m for v in verdicts for m in v.regressed)
    return {
        "comparisons": len(verdicts),
        "regressions": sum(v.regression for v in verdicts),
        "rate": sum(v.regression for v in verdicts) / len(verdicts),
        "raised_by": dict(raised),
        "uncertain": sum(bool(v.uncertain) and not v.regression for v in verdicts),
        "suspect_sessions": sum(v.session_id in v.suspect_measurements for v in verdicts),
        "median_p50_effect_pct": float(
            np.median([v.latency_delta_pct["effect_pct"] for v in verdicts])
        ),
        "alarms": [
            {
                "metric": m,
                "effect_pct": round(v.metrics[m]["effect_pct"], 1),
                "ci_low": round(v.metrics[m]["ci_low"], 1),
                "suspect": v.session_id in v.suspect_measurements,
            }
            for v in verdicts
            for m in v.regressed
        ],
    }


# --- 2 and 3. diagnosis and roofline -------------------------------------------------------------

AGREEMENT_SQL = """
SELECT s.model_slug, s.session_id, b.bottleneck, b.close_calls_json,
       (SELECT any_value(value) FROM derived_metrics d WHERE d.session_id = s.session_id
        AND d.metric = 'top_op_stability') AS top_op_stability,
       coalesce(q.verdict, 'unknown') AS quality
FROM sessions s JOIN bottleneck_reports b USING (session_id)
LEFT JOIN measurement_quality q USING (session_id)
ORDER BY s.model_slug, s.started_at
"""


def diagnosis_trust(root: Path, runs: int) -> dict:
    sys.path.insert(0, str(HERE))
    from run import bare_sweep, fresh_paths

    from aaco_pipelines.analysis.attribution.ranking_stability import tied_with_top
    from aaco_pipelines.analysis.comparison.across_sessions import rivals
    from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
    from aaco_pipelines.tracelake import queries
    from aaco_pipelines.tracelake.store import TraceLake

    paths = fresh_paths(root, "zoo")
    for i in range(runs):
        t0 = time.perf_counter()
        bare_sweep(paths)
        print(f"   zoo sweep {i + 1}/{runs}: {time.perf_counter() - t0:.1f} s", flush=True)
    lake = TraceLake(paths.tracelake)
    per_model: dict = {}
    for row in lake.query(AGREEMENT_SQL).to_pylist():
        top = queries.top_op(lake, row["session_id"])  # the ranking aaco run's summary reads
        ranked = top["ranked"] if top else []
        row["top_op"] = ranked[0]["name"] if ranked else None
        row["tied"] = [t["name"] for t in tied_with_top(ranked)]
        # ... and the ops other sessions of the version named first (the report names them too)
        row["rivals"] = list(rivals(row["top_op"], top["others"] if top else []))
        row["tied"] += row["rivals"]
        row["close_calls"] = [c["bottleneck"] for c in json.loads(row["close_calls_json"] or "[]")]
        classes = top["other_classes"] if top else []
        row["close_calls"] += rivals(row["bottleneck"], classes)  # said beside the class too
        per_model.setdefault(row["model_slug"], []).append(row)
    agreement = {slug: _agreement(rows) for slug, rows in per_model.items()}
    utilization = lake.query(
        "SELECT utilization FROM roofline_points WHERE utilization IS NOT NULL"
    )["utilization"].to_numpy()
    envelopes = [
        HardwareEnvelope.from_dict(json.loads(r["envelope_json"]))
        for r in lake.query("SELECT envelope_json FROM hardware_envelopes").to_pylist()
    ]
    return {
        "agreement": agreement,
        "roofline": {
            "points": int(utilization.size),
            "above_roof": int((utilization > 1 + 1e-9).sum()),
            "envelopes": [
                {"theoretical_share": e.theoretical_share(), "host_contention": e.host_contention}
                for e in envelopes
            ],
        },
    }


def _agreement(rows: list[dict]) -> dict:
    """Whether the runs agree on class and top op. Where they differ: whether every run's top
    op is tied with every other's (within ranking_stability.TIE of its time, or often first:
    the report names them as one group), every run's class a close call of every other's; for
    both, whether every run off the
    majority was labelled (its measurement judged suspect; for the class, the majority's class
    named as a close call; for the top op, its rank's bootstrap stability under 0.9)."""
    from aaco_pipelines.analysis.attribution.ranking_stability import STABLE

    def labelled(row: dict, key: str, majority: str) -> bool:
        if row["quality"] == "suspect":
            return True
        if key == "bottleneck":
            return majority in row["close_calls"]
        stability = row["top_op_stability"]
        return bool(row["rivals"]) or (stability is not None and stability < STABLE)

    out = {"runs": len(rows), "suspect_runs": sum(r["quality"] == "suspect" for r in rows)}
    for key in ("bottleneck", "top_op"):
        values = collections.Counter(r[key] for r in rows)
        majority, count = values.most_common(1)[0]
        off = [r for r in rows if r[key] != majority]
        out[key] = {
            "values": dict(values),
            "agree": count == len(rows),
            "agree_or_uncertain": all(labelled(r, key, majority) for r in off),
        }
    out["bottleneck"]["close_calls"] = [r["close_calls"] for r in rows]
    out["bottleneck"]["within_close_calls"] = all(
        a["bottleneck"] == b["bottleneck"] or a["bottleneck"] in b["close_calls"]
        for a in rows
        for b in rows
    )
    out["top_op"]["within_ties"] = all(
        a["top_op"] == b["top_op"] or a["top_op"] in b["tied"] for a in rows for b in rows
    )
    out["top_op"]["tied"] = [len(r["tied"]) for r in rows]
    out["top_op"]["stability"] = [r["top_op_stability"] for r in rows]
    return out


def _verdict(agreement: dict) -> str:
    if agreement["agree"]:
        return "agree"
    if agreement.get("within_ties"):
        return "agree within ties"
    if agreement.get("within_close_calls"):
        return "agree within close calls"
    return "DIFFER (" + ("labelled" if agreement["agree_or_uncertain"] else "NOT labelled") + ")"


# --- 4. LLM -----------------------------------------------------------------------------------


def llm_trust() -> str:
    done = subprocess.run(
        [sys.executable, str(HERE / "llm_overhead.py"), "--requests", "20"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return (done.stdout + done.stderr[-2000:] * (done.returncode != 0)).strip()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside it (0: quiet)")
    parser.add_argument("--comparisons", type=int, default=50, help="unchanged-model comparisons")
    parser.add_argument("--detections", type=int, default=20, help="comparisons per slower version")
    parser.add_argument(
        "--paired", type=int, default=1, help="1: also aaco diff --paired auto; 0: stored only"
    )
    parser.add_argument("--runs", type=int, default=5, help="zoo runs for class agreement")
    parser.add_argument("--skip", nargs="*", default=[], choices=["gate", "diagnosis", "llm"])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results: dict = {"busy_loops": args.busy, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="aaco-trust-") as tmp, busy_loops(args.busy):
        root = Path(tmp)
        if "gate" not in args.skip:
            print("1. the gate", flush=True)
            results["gate"] = gate_trust(root, args.comparisons, args.detections, args.paired)
            for name, r in results["gate"].items():
                line = (
                    f"   {name:12} {r['regressions']}/{r['comparisons']} regressions "
                    f"({r['rate']:.0%}; raised by {r['raised_by'] or '-'}; {r['uncertain']} "
                    f"uncertain; {r['suspect_sessions']} suspect sessions; median p50 "
                    f"{r['median_p50_effect_pct']:+.1f} %)"
                )
                for alarm in r["alarms"] if name == "unchanged" else ():
                    line += f"\n   {'':12} alarm: {alarm}"
                if "paired_auto" in r:
                    p = r["paired_auto"]
                    median = p["median_side_by_side_p50_pct"]
                    line += (
                        f"\n   {'':12} --paired auto: {p['regressions']}/{p['comparisons']} "
                        f"({p['rate']:.0%}), {p['side_by_side']} decided side by side"
                        + (f" (median p50 {median:+.1f} %)" if median is not None else "")
                    )
                    for alarm in p["alarms"] if name == "unchanged" else ():
                        line += f"\n   {'':12} side-by-side alarm: {alarm}"
                print(line, flush=True)
        if "diagnosis" not in args.skip:
            print(f"2. class and top op over {args.runs} runs of every zoo model", flush=True)
            results["diagnosis"] = diagnosis_trust(root, args.runs)
            for slug, a in results["diagnosis"]["agreement"].items():
                cells = [
                    f"{key} {_verdict(a[key])}"
                    + ("" if a[key]["agree"] else f" {a[key]['values']}")
                    for key in ("bottleneck", "top_op")
                ]
                print(
                    f"   {slug:14} {'; '.join(cells)}; {a['suspect_runs']} suspect runs; "
                    f"close calls {a['bottleneck']['close_calls']}; tied {a['top_op']['tied']}"
                )
            roof = results["diagnosis"]["roofline"]
            print(
                f"3. roofline: {roof['above_roof']}/{roof['points']} points above their roof; "
                "envelopes (GEMM share of the theoretical peak, contention): "
                + ", ".join(
                    f"{e['theoretical_share'] or 0:.0%} ({e['host_contention'] or 0:.0%})"
                    for e in roof["envelopes"]
                )
            )
        if "llm" not in args.skip:
            print("4. LLM timings (benchmarks/llm_overhead.py)", flush=True)
            results["llm"] = llm_trust()
            print("   " + results["llm"].replace("\n", "\n   "))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())

"""Nightly drift benchmark: false alarms and detection delay of the real verdict path.

`.venv/bin/python benchmarks/drift_nightly.py [--series N] [--nights M] [--step-series K]`

A simulated fleet is measured once a night: per series, latency p50 is a log-normal draw around
the series' level (sd `--noise`, 1% by default), a shared host makes `--outlier-rate` of the
nights 10-60% slow, and the first nights run slow by a warm-up drift that decays. In-control
series stay there; step series get a sustained +3%, +5% or +10% from a random night on. Every
night every series is judged by `judge_series` (its two-session confirmation included) with
latency_p50_ns's policy from series.py, exactly as the performance_drift asset does (without
per-iteration samples: they only widen the CI). The in-control fleet's verdicts of a night go
through Benjamini-Hochberg together (`sweep_verdicts`); each step series is swept with that
fleet, one true regression among N quiet series, the hardest case for FDR. Reported: false
alarms per 1000 in-control series-nights, and per step size the delay in nights from the first
slow night to the first reported regression (1 = reported that night; with confirmation the
earliest is 2), its median and 90th percentile, and the share detected within 3 nights.
Default size: ~1-2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from aaco_pipelines.governance.drift.fdr import benjamini_hochberg, sweep_verdicts
from aaco_pipelines.governance.drift.series import judge_series, metric_policy
from aaco_pipelines.governance.drift.verdict import DriftVerdict, VerdictPolicy

METRIC = "latency_p50_ns"
STEPS_PCT = (3.0, 5.0, 10.0)
ALARMS = ("regression", "improvement")
COUNTED = (*ALARMS, "unstable_series")


@dataclass(frozen=True)
class Fleet:
    noise: float = 0.01  # sd of log latency, night to night
    outlier_rate: float = 0.02  # share of nights a shared host makes slow...
    outlier_slowdown: tuple[float, float] = (0.10, 0.60)  # ...by this much, uniformly
    warmup_pct: float = 3.0  # the first night is this much slow...
    warmup_nights: float = 2.0  # ...decaying with this time constant


def simulate(
    steps_pct: np.ndarray, step_night: np.ndarray, nights: int, fleet: Fleet, seed: int
) -> np.ndarray:
    """Latency in ns, (series, nights): level x noise x warm-up x outliers x step."""
    rng = np.random.default_rng(seed)
    shape = (steps_pct.size, nights)
    level = np.exp(rng.uniform(np.log(1e5), np.log(5e7), (shape[0], 1)))  # 0.1 to 50 ms
    noise = np.exp(rng.normal(0.0, fleet.noise, shape))
    warmup = 1.0 + fleet.warmup_pct / 100.0 * np.exp(-np.arange(nights) / fleet.warmup_nights)
    slow = rng.random(shape) < fleet.outlier_rate
    outlier = 1.0 + slow * rng.uniform(*fleet.outlier_slowdown, shape)
    after = np.arange(nights) >= step_night[:, None]
    step = 1.0 + after * steps_pct[:, None] / 100.0
    return level * noise * warmup * outlier * step


def judge_nights(values: np.ndarray, policy: VerdictPolicy, first: int = 0) -> list[DriftVerdict]:
    """judge_series on the series as it stood each night from `first` on, parameters dropped
    (only verdict, decided_by and p_value matter to the sweep)."""
    verdicts = []
    for night in range(first, values.size):
        entry = {
            "values": values[: night + 1],
            "higher_is_worse": True,
            "markers": [[] for _ in range(night + 1)],
        }
        verdict = judge_series(entry, None, policy)
        verdicts.append(dataclasses.replace(verdict, parameters={}, baseline=None))
    return verdicts


def _judge_chunk(args: tuple[np.ndarray, VerdictPolicy, int]) -> list[list[DriftVerdict]]:
    chunk, policy, first = args
    return [judge_nights(row, policy, first) for row in chunk]


def judge_fleet(
    latency: np.ndarray, policy: VerdictPolicy, workers: int = 1, first: int = 0
) -> list[list[DriftVerdict]]:
    """Per series, per night from `first` on: the verdict, series spread over `workers`."""
    chunks = [(c, policy, first) for c in np.array_split(latency, max(1, workers * 4))]
    if workers <= 1:
        return [v for c in chunks for v in _judge_chunk(c)]
    with ProcessPoolExecutor(workers) as pool:
        return [v for part in pool.map(_judge_chunk, chunks) for v in part]


def verdict_matrix(judged: list[list[DriftVerdict]]) -> tuple[np.ndarray, np.ndarray]:
    """(verdict strings, p-values with NaN for none), each (series, nights)."""
    verdicts = np.array([[v.verdict for v in row] for row in judged], dtype=object)
    p = np.array([[np.nan if v.p_value is None else v.p_value for v in row] for row in judged])
    return verdicts, p


def swept_fleet(judged: list[list[DriftVerdict]], q: float) -> np.ndarray:
    """The verdicts after each night's `sweep_verdicts` over the whole fleet."""
    nights = len(judged[0])
    night_sweeps = [sweep_verdicts([row[t] for row in judged], q) for t in range(nights)]
    return np.array([[v.verdict for v in sweep] for sweep in night_sweeps], dtype=object).T


def swept_alone_in(
    verdicts: np.ndarray, p: np.ndarray, fleet_p: np.ndarray, q: float
) -> np.ndarray:
    """Each series' verdicts after BH over the fleet's p-values of the night plus its own: one
    regression in a quiet fleet, the hardest case for FDR. The same rule as sweep_verdicts
    (a change whose adjusted p is above q becomes no_change), vectorized over the series."""
    family = np.broadcast_to(fleet_p[None], (p.shape[0], *fleet_p.shape))
    reject, _ = benjamini_hochberg(np.concatenate([family, p[..., None]], axis=-1), q)
    kept = reject[..., -1] | ~np.isin(verdicts, ALARMS)
    return np.where(kept, verdicts, "no_change")


def delays(outcome: np.ndarray, step_night: np.ndarray) -> np.ndarray:
    """Nights from the step to the first regression at or after it (1 = the step's night);
    inf when never."""
    nights = np.arange(outcome.shape[1])
    hit = (outcome == "regression") & (nights >= step_night[:, None])
    first_hit = np.where(hit.any(axis=1), nights[hit.argmax(axis=1)], np.inf)
    return first_hit - step_night + 1


def run(args: argparse.Namespace) -> dict:
    """Simulate, judge every series-night, sweep, and count."""
    fleet, policy = Fleet(args.noise, args.outlier_rate), metric_policy(METRIC)
    if args.floor is not None:
        policy = dataclasses.replace(policy, floor_fraction=args.floor)
    n, k = args.series, args.step_series
    late = np.random.default_rng(args.seed).integers(args.nights // 3, args.nights - 10, 3 * k)
    steps = np.concatenate([np.zeros(n), np.repeat(STEPS_PCT, k)])
    step_night = np.concatenate([np.full(n, args.nights), late])  # >= 10 nights to detect
    latency = simulate(steps, step_night, args.nights, fleet, args.seed)
    t0 = time.perf_counter()
    judged = judge_fleet(latency, policy, args.workers)
    verdicts, p = verdict_matrix(judged)
    in_control = {"before FDR": verdicts[:n], "after FDR": swept_fleet(judged[:n], args.q)}
    stepped = swept_alone_in(verdicts[n:], p[n:], p[:n].T, args.q)
    return {
        "fleet": fleet,
        "policy": policy,
        "elapsed": time.perf_counter() - t0,
        "series_nights": verdicts[:n, policy.min_history :].size,  # nights with enough history
        "in_control": {
            label: {v: int(np.count_nonzero(o[:, policy.min_history :] == v)) for v in COUNTED}
            for label, o in in_control.items()
        },
        "delays": {
            pct: delays(stepped[i * k : (i + 1) * k], late[i * k : (i + 1) * k])
            for i, pct in enumerate(STEPS_PCT)
        },
    }


def report(r: dict, args: argparse.Namespace) -> None:
    f, p = r["fleet"], r["policy"]
    print(
        f"fleet: noise {f.noise:.1%} (log-normal), {f.outlier_rate:.0%} of nights "
        f"{f.outlier_slowdown[0]:.0%}-{f.outlier_slowdown[1]:.0%} slow, warm-up "
        f"+{f.warmup_pct:g}% decaying over {f.warmup_nights:g} nights"
    )
    print(
        f"policy ({METRIC}): floor {p.floor_fraction:.1%}, min effect {p.min_effect_pct:g}%, "
        f"z {p.z_threshold:g}, confirmation 2 sessions, BH q = {args.q:g} per night; "
        f"{r['elapsed']:.0f} s on {args.workers} worker(s)"
    )
    per_k = 1000.0 / r["series_nights"]
    print(f"\nin-control: {args.series} series x {args.nights} nights, {r['series_nights']} judged")
    print(f"{'':18}{'regressions':>12}{'improvements':>14}{'per 1000':>10}{'unstable':>10}")
    for label, c in r["in_control"].items():
        alarms = c["regression"] + c["improvement"]
        print(
            f"{label:18}{c['regression']:>12}{c['improvement']:>14}{alarms * per_k:>10.2f}"
            f"{c['unstable_series']:>10}"
        )
    print("  target: <= 1 false alarm per 1000 series-nights\n")
    print(
        f"step regressions: {args.step_series} series each, step on a random night from "
        f"{args.nights // 3}; each night swept with the {args.series} in-control series"
    )
    print(f"{'step':>6}{'detected':>10}{'median':>8}{'p90':>8}{'<= 3 nights':>13}")
    for pct, d in r["delays"].items():
        median, p90 = np.quantile(d, [0.5, 0.9], method="inverted_cdf")  # inf-safe
        print(
            f"{pct:>5g}%{np.isfinite(d).mean():>10.0%}{_nights(median):>8}{_nights(p90):>8}"
            f"{np.mean(d <= 3):>13.0%}"
        )
    print("  delay in nights, 1 = reported on the first slow night; target: 5% within 3 nights")


def _nights(value: float) -> str:
    return "never" if not np.isfinite(value) else f"{value:g}"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=500, help="in-control series")
    parser.add_argument("--nights", type=int, default=60)
    parser.add_argument("--step-series", type=int, default=50, help="series per step size")
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--outlier-rate", type=float, default=0.02)
    parser.add_argument("--floor", type=float, help="override the metric's noise floor")
    parser.add_argument("--q", type=float, default=0.05, help="BH false discovery rate")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    report(run(arguments), arguments)

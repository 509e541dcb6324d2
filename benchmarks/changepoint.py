"""Change-point detection on series nobody on this project wrote: `.venv/bin/python benchmarks/changepoint.py`.

Prints, for E-divisive (the default) and PELT:
  1. TCPD's five quality-control series: detections, F1 (margin 5) and covering against the
     human annotations, and the runtime per series;
  2. Apache Otava's Tigerbeetle throughput series: the detections, whether each documented
     change (16, 71, 97 in Otava's test docstring; ~150 named by this project's brief) has one
     within 5 points, and that the lone outlier at 10 has none within 3;
  3. MongoDB signal-processing-algorithms' series: the detections, next to the number of change
     points their own (seeded) E-divisive tests expect, and the check that our q statistic
     reproduces their "proper division" q values on `robust_series`.
The data live in ../shared/samples/changepoint (see its README.md for origins and licences).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

from aaco_pipelines.governance.drift.changepoint import (
    ChangePoint,
    detect_change_points,
    q_statistics,
)
from aaco_pipelines.governance.drift.changepoint_score import covering, f_measure

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "samples" / "changepoint"
METHODS = ("e_divisive", "pelt")
TIGERBEETLE_CHANGES = (16, 71, 97, 150)
TIGERBEETLE_OUTLIER = 10
MONGODB_SERIES = ("real_series", "robust_series", "mad_series", "long_series")
MONGODB_PROFILING = ("profiling_short", "profiling_small", "profiling_medium", "profiling_large")


def tcpd_series(i: int) -> tuple[np.ndarray, dict[str, list[int]]]:
    doc = json.loads((DATA / "tcpd" / "datasets" / f"quality_control_{i}.json").read_text())
    annotations = json.loads((DATA / "tcpd" / "annotations.json").read_text())
    return np.asarray(doc["series"][0]["raw"], dtype=float), annotations[f"quality_control_{i}"]


def tigerbeetle() -> np.ndarray:
    with (DATA / "otava" / "tigerbeetle_series.csv").open() as f:
        return np.asarray([float(row["value"]) for row in csv.DictReader(f)])


def timed_detect(values: np.ndarray, method: str, permutations: int):
    t0 = time.perf_counter()
    points = detect_change_points(values, method=method, permutations=permutations)
    return time.perf_counter() - t0, points


def brief(points: list[ChangePoint]) -> str:
    return ", ".join(f"{p.index} ({p.shift_pct:+.1f}%, p={p.p_value:.3f})" for p in points) or "-"


def tcpd_section(permutations: int) -> None:
    print("== TCPD quality-control series (F1 with margin 5, covering; mean over annotators)")
    for method in METHODS:
        scores = []
        for i in range(1, 6):
            values, annotations = tcpd_series(i)
            seconds, points = timed_detect(values, method, permutations)
            found = [p.index for p in points]
            f1, precision, recall = f_measure(annotations, found)
            cover = covering(annotations, found, values.size)
            scores.append((f1, cover))
            truth = sorted({t for v in annotations.values() for t in v})
            print(
                f"  {method:10s} QC{i} n={values.size:3d} {seconds:5.2f}s  F1={f1:.3f} "
                f"(P={precision:.2f} R={recall:.2f}) cover={cover:.3f}  "
                f"found={found} annotated={truth}"
            )
        f1s, covers = zip(*scores, strict=True)
        print(f"  {method:10s} mean F1={np.mean(f1s):.3f} mean cover={np.mean(covers):.3f}")


def tigerbeetle_section(permutations: int) -> None:
    values = tigerbeetle()
    expected = json.loads((DATA / "otava" / "tigerbeetle_expected_otava_outputs.json").read_text())
    print(f"== Otava Tigerbeetle throughput (n={values.size})")
    for entry in expected["otava_test_expectations"]:
        if entry["test"] in ("test_tb_old_defaults_p05", "test_tb_magnitude0_p0001"):
            print(f"  Otava {entry['test']}: {entry['expected_change_point_indexes']}")
    for method in METHODS:
        seconds, points = timed_detect(values, method, permutations)
        found = np.array([p.index for p in points])
        near = {c: bool(np.any(np.abs(found - c) <= 5)) for c in TIGERBEETLE_CHANGES}
        outlier = bool(np.any(np.abs(found - TIGERBEETLE_OUTLIER) <= 3))
        print(f"  {method:10s} {seconds:5.2f}s  {brief(points)}")
        print(f"  {method:10s} within 5 of {near}; outlier at 10 reported: {outlier}")


def mongodb_section(permutations: int) -> None:
    print("== MongoDB signal-processing-algorithms series")
    robust = np.asarray(json.loads((DATA / "mongodb_spa" / "robust_series.json").read_text()))
    theirs = json.loads(
        (DATA / "mongodb_spa" / "expected_result_robust_series_proper_division.json").read_text()
    )
    ours = q_statistics(robust, 2)[0]
    error = np.max(np.abs(ours - np.asarray(theirs[2 : robust.size - 1])) / np.max(theirs))
    print(f"  q statistic vs their proper-division q on robust_series: max rel. error {error:.1e}")
    for name in (*MONGODB_SERIES, *MONGODB_PROFILING):
        doc = json.loads((DATA / "mongodb_spa" / f"{name}.json").read_text())
        values = np.asarray(doc["series"] if isinstance(doc, dict) else doc, dtype=float)
        note = f" (their test expects {doc['expected']})" if isinstance(doc, dict) else ""
        for method in METHODS:
            seconds, points = timed_detect(values, method, permutations)
            print(
                f"  {name:17s} {method:10s} n={values.size:4d} {seconds:5.2f}s "
                f"{len(points):2d} changes{note}: {[p.index for p in points]}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--permutations", type=int, default=199)
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"no reference data at {DATA}")
    tcpd_section(args.permutations)
    tigerbeetle_section(args.permutations)
    mongodb_section(args.permutations)


if __name__ == "__main__":
    main()

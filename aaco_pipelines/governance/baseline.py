"""A robust baseline: median and MAD, so one outlier session does not move the reference.

The scale has a floor proportional to the median: a perfectly quiet history (MAD 0) would
otherwise turn any change into an infinite z, and a 0.1% wobble into a "significant" one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MAD_TO_SD = 1.4826  # MAD of a normal distribution times this is its standard deviation
EPSILON = 1e-12  # last-resort scale when the median itself is 0


@dataclass(frozen=True)
class RobustBaseline:
    median: float
    mad: float
    scale: float  # the robust standard deviation actually used to standardize
    floor: float  # floor_fraction * |median|: the smallest scale allowed
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def robust_baseline(values: np.ndarray, floor_fraction: float = 0.01) -> RobustBaseline:
    """Median, MAD and scale = max(1.4826 * MAD, floor_fraction * |median|, epsilon)."""
    x = _finite_1d(values)
    median = float(np.median(x))
    mad = float(np.median(np.abs(x - median)))
    floor = floor_fraction * abs(median)
    scale = max(MAD_TO_SD * mad, floor, EPSILON)
    return RobustBaseline(median=median, mad=mad, scale=scale, floor=floor, n=int(x.size))


def standardize(values: np.ndarray, baseline: RobustBaseline) -> np.ndarray:
    """(x - median) / scale: in-control points come out with mean about 0 and sd about 1."""
    return (np.asarray(values, dtype=float) - baseline.median) / baseline.scale


def _finite_1d(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("a baseline needs at least one value")
    if not np.all(np.isfinite(x)):
        raise ValueError("a baseline needs finite values (got NaN or inf)")
    return x

"""Average run length (ARL) of the EWMA and CUSUM detectors on standardized normal data.

The ARL is the mean number of points until a chart signals: at shift 0 the spacing of false
alarms, after a mean shift of `shift` sd the detection delay. Numerical ARLs reproduce the
published tables (Lucas & Crosier 1982, Lucas & Saccucci 1990), which is how the detector
parameters are justified; `simulate_arl` runs the real `detectors` code to check that the
numerics describe the detectors that actually judge sessions. All ARLs are zero-state: the
shift is present from the first point and the statistic starts at 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr

from aaco_pipelines.governance.drift.detectors import CusumParams, EwmaParams, cusum, ewma

CUSUM_STATES = 300  # Brook-Evans cells: within 1e-4 (relative) of the integral equation
EWMA_NODES = (100, 600)  # Gauss-Legendre nodes, 4 per kernel sd between: ~1e-9 for lam >= 1e-3
SIM_BATCH = 1024  # runs simulated together
SIM_FIRST_LENGTH = 256  # points simulated first; unsignalled runs are extended by doubling
SIM_MAX_ELEMENTS = 1 << 22  # data points held at once (32 MB); uncensored up to ARL ~5000


@dataclass(frozen=True)
class ArlEstimate:
    """A Monte Carlo ARL with its standard error, so a comparison can be made in SEs."""

    mean: float
    se: float
    runs: int
    censored: int  # runs stopped unsignalled at the memory bound: `mean` is then a lower bound


def cusum_arl(
    k: float, h: float, shift: float = 0.0, sides: int = 2, states: int = CUSUM_STATES
) -> float:
    """Zero-state ARL of `detectors.cusum` (signal when a sum exceeds h).

    Each side is a Brook & Evans (1972) Markov chain; two sides combine as
    1/ARL = 1/ARL+ + 1/ARL- (Siegmund; Lucas & Crosier 1982), ARL- being the upper chart at
    the negated shift. That is exact while the two sums are never positive together and close
    otherwise: for k = 0.5 the real two-sided detector, simulated, agrees within its SE.
    """
    CusumParams(k=k, h=h, sides=sides)  # the detector's own validation
    upper = _upper_cusum_arl(k, h, shift, states)
    if sides == 1:
        return upper
    lower = upper if shift == 0.0 else _upper_cusum_arl(k, h, -shift, states)
    return 1.0 / (1.0 / upper + 1.0 / lower)


def _upper_cusum_arl(k: float, h: float, shift: float, states: int) -> float:
    """C+ alone on `states` cells: cell 0 is [0, w/2] (the atom at 0), cell j has centre j*w.

    w = 2h / (2 states - 1) makes the last cell end at h, so leaving the cells is the signal,
    and the ARL vector solves (I - R) ARL = 1 for the transient transition matrix R.
    """
    width = 2.0 * h / (2 * states - 1)
    centre = np.arange(states) * width
    # P(max(0, c_i + z - k) <= upper edge of cell j), z ~ N(shift, 1)
    below = ndtr(centre[None, :] + width / 2 - centre[:, None] + k - shift)
    transient = np.diff(below, axis=1, prepend=0.0)
    return _zero_state_arl(transient)


def ewma_arl(
    lam: float,
    L: float,
    shift: float = 0.0,
    limits: str = "asymptotic",
    *,
    runs: int = 10_000,
    seed: int = 0,
) -> float:
    """Zero-state ARL of the two-sided `detectors.ewma` chart.

    Asymptotic limits +-L sqrt(lam / (2 - lam)): Crowder's (1987) integral equation, solved by
    Nystrom with Gauss-Legendre nodes (more accurate than the Lucas & Saccucci chain for the same
    size). Exact limits vary with time, so no time-homogeneous chain applies: their ARL is the
    mean of `simulate_arl` (`runs`, `seed`); call that directly for its standard error.
    """
    params = EwmaParams(lam=lam, L=L, limits=limits)
    if limits == "exact":
        return simulate_arl("ewma", params, shift, runs=runs, seed=seed).mean
    half = L * math.sqrt(lam / (2.0 - lam))
    nodes = int(np.clip(math.ceil(4.0 * half / lam), *EWMA_NODES))  # the kernel's sd is lam
    x, w = _gauss_legendre(nodes)
    y, w = half * x, half * w

    def density(start: np.ndarray) -> np.ndarray:
        """Weighted density of moving from `start` to each node in one step."""
        return w / lam * _normal_pdf((y - (1.0 - lam) * start[..., None]) / lam - shift)

    transient = density(y)
    arl_at_nodes = np.linalg.solve(np.eye(nodes) - transient, np.ones(nodes))
    return float(1.0 + density(np.zeros(())) @ arl_at_nodes)


def simulate_arl(
    chart: str,
    params: CusumParams | EwmaParams,
    shift: float = 0.0,
    *,
    runs: int = 4000,
    seed: int = 0,
    max_elements: int = SIM_MAX_ELEMENTS,
) -> ArlEstimate:
    """Monte Carlo ARL of the real `detectors.cusum` / `detectors.ewma` on N(shift, 1) data.

    Runs go through the detector in batches of `SIM_BATCH` (memory stays bounded); see
    `_run_lengths` for how long runs are followed. Seeded, so a test is reproducible.
    """
    detect = _detector(chart, params)
    if runs < 2:
        raise ValueError(f"need at least 2 runs for a standard error, got {runs}")
    rng = np.random.default_rng(seed)
    batches = [
        _run_lengths(detect, min(SIM_BATCH, runs - start), shift, rng, max_elements)
        for start in range(0, runs, SIM_BATCH)
    ]
    lengths = np.concatenate([b[0] for b in batches])
    censored = int(sum(b[1] for b in batches))
    return ArlEstimate(
        mean=float(lengths.mean()),
        se=float(lengths.std(ddof=1) / math.sqrt(runs)),
        runs=runs,
        censored=censored,
    )


def design_cusum(target_arl: float, k: float = 0.5, sides: int = 2) -> float:
    """The h whose in-control ARL is `target_arl`: the false-alarm rate is what one chooses."""
    return _solve_limit(lambda h: cusum_arl(k, h, 0.0, sides), target_arl, "h")


def design_ewma(target_arl: float, lam: float = 0.1) -> float:
    """The L (asymptotic limits) whose in-control ARL is `target_arl`."""
    return _solve_limit(lambda width: ewma_arl(lam, width, 0.0), target_arl, "L")


def _solve_limit(arl_of: Callable[[float], float], target: float, name: str) -> float:
    """Root of arl_of(x) = target by brentq; the ARL grows with the limit, so bracket by doubling."""
    low, high = 1e-3, 1.0
    if not target > arl_of(low):
        raise ValueError(f"target ARL {target:g} is below the shortest possible {arl_of(low):.3g}")
    while arl_of(high) < target:
        low, high = high, 2.0 * high
        if high > 64.0:
            raise ValueError(f"target ARL {target:g} needs {name} > 64: too large to compute")
    return float(brentq(lambda x: arl_of(x) - target, low, high, xtol=1e-6))


def _zero_state_arl(transient: np.ndarray) -> float:
    """ARL from state 0 of a chain with transient matrix R: solve (I - R) ARL = 1."""
    n = transient.shape[0]
    arl = float(np.linalg.solve(np.eye(n) - transient, np.ones(n))[0])
    return arl if math.isfinite(arl) and arl > 0.0 else math.inf  # too large for doubles


@lru_cache(maxsize=8)
def _gauss_legendre(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights on [-1, 1]; cached, as computing them costs more than the solve."""
    return np.polynomial.legendre.leggauss(nodes)


def _normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _detector(chart: str, params: CusumParams | EwmaParams) -> Callable[[np.ndarray], np.ndarray]:
    """The signal array of the named detector, checked against the type of `params`."""
    if chart == "cusum" and isinstance(params, CusumParams):
        return lambda z: cusum(z, params).signal
    if chart == "ewma" and isinstance(params, EwmaParams):
        return lambda z: ewma(z, params).signal
    raise ValueError(f"chart {chart!r} does not take {type(params).__name__}")


def _run_lengths(
    detect: Callable[[np.ndarray], np.ndarray],
    runs: int,
    shift: float,
    rng: np.random.Generator,
    max_elements: int,
) -> tuple[np.ndarray, int]:
    """1-based index of each run's first signal, and how many runs were censored.

    An unsignalled run gets its history doubled and goes through the detector again from the
    start: slower than carrying state, but it keeps the real detector in the loop (exact-limit
    indices included), and the geometric tail of the run length keeps the rework small. A run
    still unsignalled when doubling would hold more than `max_elements` points is censored.
    """
    lengths = np.zeros(runs, dtype=np.int64)
    pending = np.arange(runs)
    z = rng.normal(shift, 1.0, (runs, SIM_FIRST_LENGTH))
    while True:
        fired = detect(z) != 0
        hit = fired.any(axis=1)
        lengths[pending[hit]] = fired[hit].argmax(axis=1) + 1
        pending, z = pending[~hit], z[~hit]
        if pending.size == 0:
            return lengths, 0
        if 2 * z.size > max_elements:
            lengths[pending] = z.shape[1]
            return lengths, int(pending.size)
        z = np.concatenate([z, rng.normal(shift, 1.0, z.shape)], axis=1)

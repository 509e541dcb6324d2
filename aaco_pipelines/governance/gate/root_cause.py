"""Root cause of a latency change: what differs between baseline sessions and the current one,
and how probable each difference is as the cause.

Model. D = current p50 - baseline median p50 (per iteration), sigma = the baseline's robust
session-to-session sd (1.4826 MAD, at least `noise_floor` of the median) widened by the
median's own error, tau = `effect_scale` * median: the typical size of a real change. Each
suspect k (a binary change: model file, runtime, provider; or a measured one: op time, kernels,
a kernel's counted work or occupancy, a fusion lost or gained, clocks) is a hypothesis "k alone caused D", with prior
PRIORS[kind] shared equally by the suspects of that kind, and likelihood
Cauchy(D; 0, hypot(sigma, tau)) * fit_k (real changes are heavy-tailed: a model swap that is 5x slower is rare but nothing like a 9-sigma noise
draw; a Gaussian of scale tau would score it as improbable as noise), where fit_k =
clip(share_k, min_fit, 1) is the fraction of D the suspect accounts for (binary changes can
account for any amount: share 1; unknown magnitude: unknown_fit). "noise" has likelihood
N(D; 0, sigma^2) (no real change); "unexplained" (real, but none of the suspects) has
fit 1 - the largest share. Posteriors are normalized over all of them, so they sum to 1.

The suspects are gathered by environment_suspects (what the session ran with) and
kernel_suspects (what the device ran); this module measures D and ranks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.gate.environment_suspects import (
    clock_suspects,
    contention_suspects,
    environment_suspects,
)
from aaco_pipelines.governance.gate.kernel_suspects import (
    fusion_suspects,
    kernel_suspects,
    op_suspects,
)
from aaco_pipelines.governance.gate.suspect import Delta, RootCauseParams, Suspect
from aaco_pipelines.tracelake.store import TraceLake

MAD_TO_SD = 1.4826
# One default, made once (as a default argument it was): suspect.py defines the class, and
# ruff cannot see from here that a frozen dataclass is immutable.
DEFAULT_PARAMS = RootCauseParams()


def explain_change(
    lake: TraceLake,
    baseline_session_ids: Sequence[str],
    current_session_id: str,
    params: RootCauseParams = DEFAULT_PARAMS,
) -> list[Suspect]:
    """The suspects for the latency change of the current session, most probable first, with
    the "noise" and "unexplained" hypotheses among them."""
    sessions, base_ids = _sessions(lake, baseline_session_ids, current_session_id)
    delta = _delta(sessions, current_session_id, params)
    ids = {"base": base_ids, "cur": current_session_id}
    newest = [r["session_id"] for r in sessions if r["session_id"] != current_session_id][-1]
    suspects = [
        *environment_suspects(sessions, current_session_id, delta),
        *op_suspects(lake, ids, delta, params),
        *fusion_suspects(lake, newest, current_session_id, delta),
        *kernel_suspects(lake, ids, delta, params),
        *clock_suspects(lake, ids, delta, params),
        *contention_suspects(lake, ids, params),
    ]
    return _score(suspects, delta, params)


# --- scoring ---------------------------------------------------------------------------------


def _score(suspects: list[Suspect], delta: Delta, params: RootCauseParams) -> list[Suspect]:
    d, sigma = delta.measured, delta.sigma
    tau = params.effect_scale * abs(delta.reference)
    log_change, log_noise = _log_cauchy(d, np.hypot(sigma, tau)), _log_normal(d, sigma)
    kinds = [s.kind for s in suspects]
    fits = [_fit(s.share, params) for s in suspects]
    largest = max((min(max(s.share or 0.0, 0.0), 1.0) for s in suspects), default=0.0)
    hypotheses = [
        *suspects,
        Suspect("noise", "session-to-session noise", None, None, d / 1e6, None),
        Suspect("unexplained", "a change none of the suspects explains", None, None, None, None),
    ]
    priors = np.array([_prior(h.kind, kinds, params) for h in hypotheses])
    fits += [1.0, max(1.0 - largest, params.min_fit)]
    log_like = np.array([log_change] * len(suspects) + [log_noise, log_change]) + np.log(fits)
    log_post = np.log(np.maximum(priors, 1e-300)) + log_like
    posterior = np.exp(log_post - np.logaddexp.reduce(log_post))
    scale = np.exp(log_like - log_like.max())  # likelihoods relative to the best one
    context = {"delta_ms": d / 1e6, "sigma_ms": sigma / 1e6, "tau_ms": tau / 1e6}
    scored = [
        replace(
            h, prior=float(pr), likelihood=float(lk), posterior=float(p), detail=h.detail | context
        )
        for h, pr, lk, p in zip(hypotheses, priors, scale, posterior, strict=True)
    ]
    return sorted(scored, key=lambda s: -s.posterior)


def _fit(share: float | None, params: RootCauseParams) -> float:
    if share is None:
        return params.unknown_fit
    return float(np.clip(share, params.min_fit, 1.0))


def _prior(kind: str, kinds: list[str], params: RootCauseParams) -> float:
    """The kind's prior mass, shared by its suspects (40 op suspects do not get 40 priors)."""
    return float(params.priors.get(kind, 0.0)) / max(kinds.count(kind), 1)


def _log_normal(x: float, sd: float) -> float:
    return float(-0.5 * (x / sd) ** 2 - np.log(sd) - 0.5 * np.log(2.0 * np.pi))


def _log_cauchy(x: float, scale: float) -> float:
    return float(-np.log(np.pi * scale) - np.log1p((x / scale) ** 2))


# --- the change to explain -------------------------------------------------------------------


def _sessions(
    lake: TraceLake, baseline_session_ids: Sequence[str], current: str
) -> tuple[list[dict], list[str]]:
    base_ids = [s for s in dict.fromkeys(baseline_session_ids) if s != current]
    if not base_ids:
        raise AacoInputError(
            "root cause needs at least one baseline session other than the current one",
            fix="pass the session ids of a baseline",
        )
    rows = lake.query(
        "SELECT * FROM sessions WHERE session_id IN (SELECT unnest($ids)) "
        "ORDER BY started_at, session_id",
        {"ids": [*base_ids, current]},
    ).to_pylist()
    missing = sorted({*base_ids, current} - {r["session_id"] for r in rows})
    if missing:
        raise AacoInputError(
            f"unknown sessions {missing}", fix="pass ids of sessions ingested in this TraceLake"
        )
    if len({r["model_slug"] for r in rows}) > 1:
        raise AacoInputError(
            "root cause compares sessions of one model; got "
            f"{sorted({r['model_slug'] for r in rows})}",
            fix="pass baseline sessions of the current session's model",
        )
    return rows, base_ids


def _delta(sessions: list[dict], current: str, params: RootCauseParams) -> Delta:
    base = [r for r in sessions if r["session_id"] != current]
    cur = next(r for r in sessions if r["session_id"] == current)
    if cur["latency_p50_ns"] is None or any(r["latency_p50_ns"] is None for r in base):
        raise AacoInputError(
            "root cause needs measured sessions; some have no latency_p50_ns",
            fix="pass sessions that ran a measured pass (not ingested traces alone)",
        )
    p50 = np.array([r["latency_p50_ns"] for r in base], dtype=float)
    median = float(np.median(p50))
    mad = float(np.median(np.abs(p50 - median)))
    scale = max(MAD_TO_SD * mad, params.noise_floor * abs(median), 1.0)
    sigma = scale * np.sqrt(1.0 + np.pi / (2.0 * p50.size))  # plus the median's own error
    prof = np.array([r["profiled_latency_p50_ns"] for r in base], dtype=float)
    prof_median = float(np.nanmedian(prof)) if np.isfinite(prof).any() else np.nan
    cur_prof = cur["profiled_latency_p50_ns"]
    measured = float(cur["latency_p50_ns"]) - median
    profiled = (
        measured
        if cur_prof is None or not np.isfinite(prof_median)
        else float(cur_prof) - prof_median
    )
    ref_prof = prof_median if np.isfinite(prof_median) else median
    return Delta(measured, profiled, median, ref_prof, float(sigma))

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
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pyarrow as pa

from aaco_pipelines.analysis.comparison.structural_diff import FusionTotal, structural_diff
from aaco_pipelines.analysis.envelope.measure import CONTENDED_SHARE
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.tracelake.store import TraceLake

# How often each kind of change is the cause of a performance regression, before looking at the
# evidence: a judgment from release triage (model and runtime upgrades dominate; a kernel or op
# regressing on its own, with nothing else changed, is rarer), not a measured frequency. Pass
# RootCauseParams(priors=...) to use your own history. They sum to 1: the other kinds were
# scaled down, roughly in proportion, to make room for fusion_change's 0.05 (they had drifted to
# 1.15 as kinds were added; posteriors are normalized, so only the ratios matter, and those
# barely moved).
PRIORS: dict[str, float] = {
    "model_version": 0.25,  # the model file changed (model_sha256)
    "runtime": 0.17,  # ONNX Runtime / ROCm / driver (runtime_fingerprint)
    "execution_provider": 0.08,  # the providers that actually ran (providers_used)
    "clocks": 0.08,  # lower CPU / GPU clocks, power or thermal throttling (telemetry)
    # other processes held the host's CPUs on one side only (measurement_quality)
    "host_contention": 0.08,
    "op_time": 0.07,  # one op type's time per iteration (op_breakdown)
    "kernel_count": 0.04,  # kernels per iteration of a family (kernel_events)
    # a kernel whose counted work per dispatch or occupancy moved with its time (kernel_diagnoses)
    "kernel_hardware": 0.04,
    # ONNX Runtime fused the nodes of a pattern on one side only (analysis/structural_diff): the
    # usual way a runtime upgrade, another optimisation level or a re-exported model slows a
    # model ("Graph Optimizations in ONNX Runtime", onnxruntime.ai/docs/performance/
    # model-optimizations/graph-optimizations.html: the fusions differ by level and provider).
    # Between op_time and kernel_count: it is what often lies behind both, but needs a fusion
    # the runtime applies to change, which a plain kernel regression does not.
    "fusion_change": 0.05,
    "new_kernels": 0.03,  # kernels the baseline never ran
    "vanished_kernels": 0.01,  # kernels the current session no longer runs
    "noise": 0.085,  # no real change: session-to-session noise
    "unexplained": 0.015,  # a real change none of the suspects accounts for
}
RUNTIME_KEYS = (
    "onnxruntime_version",
    "rocm_version",
    "gpu_driver_version",
    "onnxruntime_providers",
)
CLOCK_METRICS = ("cpu_frequency", "gfx_clock", "memory_clock")
VIOLATION_METRICS = ("power_violation", "thermal_violation")
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class RootCauseParams:
    priors: Mapping[str, float] = field(default_factory=lambda: dict(PRIORS))
    noise_floor: float = 0.02  # least session-to-session sd of p50, as a fraction of its median
    effect_scale: float = 0.10  # tau: scale of a real change, as a fraction of the baseline median
    min_change: float = 0.05  # relative change for an op / clock to become a suspect
    min_latency_share: float = 0.01  # ... and at least this fraction of the baseline latency
    min_kernel_count_change: float = 0.5  # kernels per iteration
    min_violation_change: float = 5.0  # percent of time in power / thermal violation
    min_contention_change: float = 0.10  # other processes' share of the host's CPU
    min_fit: float = 0.02  # fit of a suspect that explains nothing, or the wrong direction
    unknown_fit: float = 0.5  # fit of a suspect whose size cannot be measured

    def to_dict(self) -> dict:
        return asdict(self) | {"priors": dict(self.priors)}


@dataclass(frozen=True)
class Suspect:
    kind: str
    name: str
    before: str | None
    after: str | None
    explained_ms: float | None  # per-iteration slowdown it accounts for (negative: speed-up)
    share: float | None  # explained / total latency delta (None: not measurable)
    prior: float = 0.0
    likelihood: float = 0.0  # relative to the most likely hypothesis (1.0)
    posterior: float = 0.0
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Delta:
    """The change to explain, in ns per iteration."""

    measured: float  # current p50 - baseline median p50
    profiled: float  # the same in the profiled pass (op and kernel times are measured there)
    reference: float  # the baseline median p50
    reference_profiled: float
    sigma: float


def explain_change(
    lake: TraceLake,
    baseline_session_ids: Sequence[str],
    current_session_id: str,
    params: RootCauseParams = RootCauseParams(),
) -> list[Suspect]:
    """The suspects for the latency change of the current session, most probable first, with
    the "noise" and "unexplained" hypotheses among them."""
    sessions, base_ids = _sessions(lake, baseline_session_ids, current_session_id)
    delta = _delta(sessions, current_session_id, params)
    ids = {"base": base_ids, "cur": current_session_id}
    newest = [r["session_id"] for r in sessions if r["session_id"] != current_session_id][-1]
    suspects = [
        *_environment_suspects(sessions, current_session_id, delta),
        *_op_suspects(lake, ids, delta, params),
        *_fusion_suspects(lake, newest, current_session_id, delta),
        *_kernel_suspects(lake, ids, delta, params),
        *_clock_suspects(lake, ids, delta, params),
        *_contention_suspects(lake, ids, params),
    ]
    return _score(suspects, delta, params)


# --- scoring ---------------------------------------------------------------------------------


def _score(suspects: list[Suspect], delta: _Delta, params: RootCauseParams) -> list[Suspect]:
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


def _delta(sessions: list[dict], current: str, params: RootCauseParams) -> _Delta:
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
    return _Delta(measured, profiled, median, ref_prof, float(sigma))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.4g} ms"


def _share(explained_ns: float, total_ns: float) -> float:
    return explained_ns / total_ns if total_ns else (1.0 if explained_ns else 0.0)


# --- binary changes ----------------------------------------------------------------------------


def _environment_suspects(sessions: list[dict], current: str, delta: _Delta) -> list[Suspect]:
    """Model file, runtime and providers: a change when the current value is none of the
    baseline's; "before" is the newest baseline session's. They are credited the whole delta."""
    base = [r for r in sessions if r["session_id"] != current]
    cur, newest = next(r for r in sessions if r["session_id"] == current), base[-1]
    suspects = []
    for kind, value in (
        ("model_version", lambda r: r["model_sha256"]),
        ("runtime", lambda r: r["runtime_fingerprint"]),
        ("execution_provider", lambda r: ",".join(r["providers_used"] or [])),
    ):
        if value(cur) in {value(r) for r in base}:
            continue
        before, after, detail = value(newest), value(cur), {}
        if kind == "model_version":
            before, after = (before or "")[:12] or None, (after or "")[:12] or None
            detail = {"model_sha256": [value(newest), value(cur)]}
        if kind == "runtime":
            before, after, detail = _runtime_difference(newest, cur)
        suspects.append(
            Suspect(kind, kind, before, after, delta.measured / 1e6, 1.0, detail=detail)
        )
    return suspects


def _runtime_difference(before: dict, after: dict) -> tuple[str, str, dict]:
    """The runtime parts that differ (ORT, ROCm, driver, providers), else the fingerprints."""
    env_before = json.loads(before["env_json"] or "{}")
    env_after = json.loads(after["env_json"] or "{}")
    changed = {
        key: (env_before.get(key), env_after.get(key))
        for key in RUNTIME_KEYS
        if env_before.get(key) != env_after.get(key)
    }
    if not changed:
        fp = (before["runtime_fingerprint"] or "")[:12], (after["runtime_fingerprint"] or "")[:12]
        return f"fingerprint {fp[0]}", f"fingerprint {fp[1]}", {"changed": {}}
    text = [", ".join(f"{k}={v[i]}" for k, v in changed.items()) for i in (0, 1)]
    return text[0], text[1], {"changed": {k: list(v) for k, v in changed.items()}}


# --- measured changes ----------------------------------------------------------------------------

OP_SQL = """
WITH base_sessions AS (
    SELECT DISTINCT session_id FROM op_breakdown
    WHERE level = 'op_type' AND session_id IN (SELECT unnest($base))),
names AS (
    SELECT DISTINCT name FROM op_breakdown WHERE level = 'op_type'
      AND (session_id = $cur OR session_id IN (SELECT session_id FROM base_sessions))),
base AS (
    SELECT n.name, median(coalesce(o.p50_ns, o.mean_ns, 0)) AS base_ns
    FROM base_sessions b CROSS JOIN names n
    LEFT JOIN op_breakdown o ON o.session_id = b.session_id AND o.level = 'op_type'
         AND o.name = n.name
    GROUP BY n.name)
SELECT base.name, base.base_ns, coalesce(c.p50_ns, c.mean_ns, 0) AS cur_ns
FROM base LEFT JOIN op_breakdown c ON c.session_id = $cur AND c.level = 'op_type'
     AND c.name = base.name
WHERE (SELECT count(*) FROM op_breakdown WHERE session_id = $cur AND level = 'op_type') > 0
"""


def _op_suspects(
    lake: TraceLake, ids: dict, delta: _Delta, params: RootCauseParams
) -> list[Suspect]:
    """Op types whose median time per profiled iteration moved (median over the baseline):
    the median, like the p50 delta it explains, so one preempted iteration makes no suspect."""
    ops = lake.query(OP_SQL, ids)
    base, cur = ops["base_ns"].to_numpy(), ops["cur_ns"].to_numpy()
    change = cur - base
    keep = _material(change, np.maximum(base, cur), delta, params)
    return [
        Suspect(
            "op_time",
            name,
            _ms(b),
            _ms(c),
            d / 1e6,
            _share(d, delta.profiled),
        )
        for name, b, c, d in zip(
            np.asarray(ops["name"].to_pylist())[keep],
            base[keep],
            cur[keep],
            change[keep],
            strict=True,
        )
    ]


def _material(
    change: np.ndarray, magnitude: np.ndarray, delta: _Delta, params: RootCauseParams
) -> np.ndarray:
    """A change large relative to itself and to the latency: jitter of tiny ops is no suspect."""
    relative = np.abs(change) >= params.min_change * np.maximum(magnitude, 1e-9)
    return relative & (np.abs(change) >= params.min_latency_share * abs(delta.reference_profiled))


def _fusion_suspects(lake: TraceLake, newest: str, current: str, delta: _Delta) -> list[Suspect]:
    """Fusions the current session runs otherwise than the baseline's newest session
    (analysis/structural_diff): one suspect per kind of change and fused op, since a
    LayerNormalization fusion lost in 24 layers is one cause, credited its members' time
    difference per profiled iteration with its CI."""
    try:
        diff = structural_diff(lake, newest, current)
    except AacoInputError:  # a side not analysed: nothing to align
        return []
    return [
        Suspect(
            "fusion_change",
            fusion_suspect_name(t, diff.confidence),
            *_fusion_sides(t),
            t.delta_ms,
            _share(t.delta_ms * 1e6, delta.profiled),
            detail={"fusion": t.to_dict(), "sessions": [newest, current]},
        )
        for t in diff.fusion_totals
    ]


def fusion_suspect_name(t: FusionTotal, confidence: float) -> str:
    """'LayerNormalization fusion lost at /encoder/layer.3/LayerNorm: +0.4 ms (95% CI 0.3..0.5)'."""
    more = f" and {t.count - 1} more" if t.count > 1 else ""
    ci = ""
    if t.ci_low_ms is not None:
        ci = f" ({confidence:.0%} CI {t.ci_low_ms:+.3g}..{t.ci_high_ms:+.3g})"
    return f"{t.label} fusion {t.change} at {t.where}{more}: {t.delta_ms:+.3g} ms{ci}"


def _fusion_sides(t: FusionTotal) -> tuple[str, str]:
    """Before and after: the fused op(s) or 'run apart', with kernels per iteration."""
    fused = t.label.split(" -> ") if " -> " in t.label else [t.label, t.label]
    if t.change == "lost":
        fused[1] = "run apart"
    if t.change == "gained":
        fused[0] = "run apart"
    return tuple(
        f"{what}, {kernels:.3g} kernels/iteration"
        for what, kernels in zip(fused, (t.kernels_a, t.kernels_b), strict=True)
    )


KERNEL_SQL = """
WITH ev AS (
    SELECT session_id, category, iteration, duration_ns,
           coalesce(kernel_name, event_name) AS kernel,
           coalesce(kernel_family, op_type, 'other') AS family
    FROM kernel_events_with_family
    WHERE category IN ('Kernel', 'Node') AND iteration >= 0
      AND (session_id = $cur OR session_id IN (SELECT unnest($base)))),
pick AS (  -- device kernels when the session traced them, else the host's op nodes
    SELECT session_id, CASE WHEN bool_or(category = 'Kernel') THEN 'Kernel' ELSE 'Node' END
           AS category
    FROM ev GROUP BY session_id),
chosen AS (SELECT ev.* FROM ev JOIN pick USING (session_id, category)),
iters AS (SELECT session_id, count(DISTINCT iteration) AS n FROM chosen GROUP BY session_id),
per_session AS (
    SELECT session_id, kernel, any_value(family) AS family,
           count(*) / any_value(n) AS per_iteration,
           sum(duration_ns) / any_value(n) AS ns_per_iteration
    FROM chosen JOIN iters USING (session_id) GROUP BY session_id, kernel),
base_n AS (SELECT count(*) AS n FROM iters WHERE session_id <> $cur)
SELECT kernel, any_value(family) AS family,
       coalesce(sum(per_iteration) FILTER (WHERE session_id <> $cur), 0)
           / greatest(any_value(base_n.n), 1) AS base_count,
       coalesce(sum(ns_per_iteration) FILTER (WHERE session_id <> $cur), 0)
           / greatest(any_value(base_n.n), 1) AS base_ns,
       coalesce(sum(per_iteration) FILTER (WHERE session_id = $cur), 0) AS cur_count,
       coalesce(sum(ns_per_iteration) FILTER (WHERE session_id = $cur), 0) AS cur_ns
FROM per_session CROSS JOIN base_n
WHERE (SELECT count(*) FROM iters WHERE session_id = $cur) > 0 AND base_n.n > 0
GROUP BY kernel ORDER BY kernel
"""


def _kernel_suspects(
    lake: TraceLake, ids: dict, delta: _Delta, params: RootCauseParams
) -> list[Suspect]:
    """Kernels per iteration by family, and kernels that appeared or vanished."""
    kernels = lake.query(KERNEL_SQL, ids)
    if kernels.num_rows == 0:
        return []
    return [
        *_family_suspects(kernels, delta, params),
        *_appeared(kernels, delta, params, new=True),
        *_appeared(kernels, delta, params, new=False),
        *_hardware_suspects(lake, ids, kernels, delta, params),
    ]


# Per kernel (name) and session: counted work per dispatch and occupancy, from each session's
# kernel diagnosis (analysis/kernels/diagnosis.py); the baseline's median beside the current.
HARDWARE_SQL = """
WITH per_session AS (
    SELECT session_id, kernel_name AS kernel,
           sum(flops_per_s * total_ns * 1e-9) / sum(dispatches) AS flops,
           sum(bytes_per_s * total_ns * 1e-9) / sum(dispatches) AS bytes,
           arg_max(achievable_waves, total_ns) AS waves, arg_max(max_waves, total_ns) AS max_waves,
           arg_max(limiter, total_ns) AS limiter
    FROM kernel_diagnoses
    WHERE session_id = $cur OR session_id IN (SELECT unnest($base))
    GROUP BY session_id, kernel_name)
SELECT kernel,
       median(flops) FILTER (WHERE session_id <> $cur) AS base_flops,
       any_value(flops) FILTER (WHERE session_id = $cur) AS cur_flops,
       median(bytes) FILTER (WHERE session_id <> $cur) AS base_bytes,
       any_value(bytes) FILTER (WHERE session_id = $cur) AS cur_bytes,
       mode(waves) FILTER (WHERE session_id <> $cur) AS base_waves,
       any_value(waves) FILTER (WHERE session_id = $cur) AS cur_waves,
       any_value(max_waves) AS max_waves,
       mode(limiter) FILTER (WHERE session_id <> $cur) AS base_limiter,
       any_value(limiter) FILTER (WHERE session_id = $cur) AS cur_limiter
FROM per_session GROUP BY kernel
HAVING count(*) FILTER (WHERE session_id = $cur) > 0
   AND count(*) FILTER (WHERE session_id <> $cur) > 0
"""


def _hardware_suspects(
    lake: TraceLake, ids: dict, kernels: pa.Table, delta: _Delta, params: RootCauseParams
) -> list[Suspect]:
    """Kernels run on both sides whose time per iteration moved materially and whose counted
    work per dispatch (FLOPs, HBM bytes) moved by min_change or more, or whose occupancy
    changed: the hardware's evidence of what changed inside the kernel."""
    hardware = {row["kernel"]: row for row in lake.query(HARDWARE_SQL, ids).to_pylist()}
    if not hardware:
        return []
    names = kernels["kernel"].to_pylist()
    change = kernels["cur_ns"].to_numpy() - kernels["base_ns"].to_numpy()
    magnitude = np.maximum(kernels["base_ns"].to_numpy(), kernels["cur_ns"].to_numpy())
    material = _material(change, magnitude, delta, params)
    suspects = []
    for name, moved, explained in zip(names, material, change, strict=True):
        row = hardware.get(name)
        if not moved or row is None or not _hardware_moved(row, params.min_change):
            continue
        suspects.append(
            Suspect(
                "kernel_hardware",
                name,
                _hardware_text(row, "base"),
                _hardware_text(row, "cur"),
                explained / 1e6,
                _share(explained, delta.profiled),
                detail={k: v for k, v in row.items() if k != "kernel"},
            )
        )
    return suspects


def _hardware_moved(row: dict, min_change: float) -> bool:
    """Counted work per dispatch moved by min_change or more, or the occupancy changed."""
    for what in ("flops", "bytes"):
        base, cur = row[f"base_{what}"], row[f"cur_{what}"]
        if (
            base is not None
            and cur is not None
            and abs(cur - base) >= min_change * max(abs(base), abs(cur), 1e-9)
        ):
            return True
    return row["base_waves"] is not None and row["base_waves"] != row["cur_waves"]


def _hardware_text(row: dict, side: str) -> str:
    """'occupancy 4 of 8 waves (vgpr), 1.02e+12 FLOP and 1.28e+08 B per dispatch'."""
    parts = []
    if row[f"{side}_waves"] is not None:
        parts.append(
            f"occupancy {row[f'{side}_waves']} of {row['max_waves']} waves "
            f"({row[f'{side}_limiter']})"
        )
    work = [
        f"{row[f'{side}_{what}']:.3g} {unit}"
        for what, unit in (("flops", "FLOP"), ("bytes", "B"))
        if row[f"{side}_{what}"] is not None
    ]
    if work:
        parts.append(" and ".join(work) + " per dispatch")
    return ", ".join(parts) or "not counted"


def _family_suspects(kernels: pa.Table, delta: _Delta, params: RootCauseParams) -> list[Suspect]:
    families = kernels.group_by("family").aggregate(
        [(c, "sum") for c in ("base_count", "base_ns", "cur_count", "cur_ns")]
    )
    base_count, cur_count = (
        families["base_count_sum"].to_numpy(),
        families["cur_count_sum"].to_numpy(),
    )
    base_ns, cur_ns = families["base_ns_sum"].to_numpy(), families["cur_ns_sum"].to_numpy()
    # The extra launches at the family's old time per kernel (its new one when it is new).
    per_kernel = np.where(
        base_count > 0, base_ns / np.maximum(base_count, 1e-9), cur_ns / np.maximum(cur_count, 1e-9)
    )
    change = cur_count - base_count
    explained = change * per_kernel
    keep = np.abs(change) >= params.min_kernel_count_change
    return [
        Suspect(
            "kernel_count",
            family,
            f"{b:.1f} kernels/iteration",
            f"{c:.1f} kernels/iteration",
            e / 1e6,
            _share(e, delta.profiled),
        )
        for family, b, c, e in zip(
            np.asarray(families["family"].to_pylist())[keep],
            base_count[keep],
            cur_count[keep],
            explained[keep],
            strict=True,
        )
    ]


def _appeared(
    kernels: pa.Table, delta: _Delta, params: RootCauseParams, new: bool
) -> list[Suspect]:
    """One suspect for all kernels only the current session runs (or only the baseline ran)."""
    base_count, cur_count = kernels["base_count"].to_numpy(), kernels["cur_count"].to_numpy()
    mask = (base_count == 0) & (cur_count > 0) if new else (base_count > 0) & (cur_count == 0)
    if not mask.any():
        return []
    names = np.asarray(kernels["kernel"].to_pylist())[mask]
    time_ns = kernels["cur_ns" if new else "base_ns"].to_numpy()[mask]
    explained = float(time_ns.sum()) * (1 if new else -1)
    order = np.argsort(-time_ns)
    top = names[order][:5].tolist()
    counts = f"{mask.sum()} kernels"
    before, after = ("none", counts) if new else (counts, "none")
    return [
        Suspect(
            "new_kernels" if new else "vanished_kernels",
            ", ".join(top) + (" ..." if mask.sum() > 5 else ""),
            before,
            after,
            explained / 1e6,
            _share(explained, delta.profiled),
            detail={"kernels": names[order][:50].tolist()},
        )
    ]


CLOCK_SQL = """
WITH per_session AS (
    SELECT session_id, metric,
           CASE WHEN metric IN (SELECT unnest($violations)) THEN max(value) ELSE avg(value) END
           AS value
    FROM telemetry
    WHERE metric IN (SELECT unnest($metrics)) AND value IS NOT NULL
      AND (session_id = $cur OR session_id IN (SELECT unnest($base)))
    GROUP BY session_id, metric)
SELECT metric, median(value) FILTER (WHERE session_id <> $cur) AS base,
       any_value(value) FILTER (WHERE session_id = $cur) AS cur
FROM per_session GROUP BY metric ORDER BY metric
"""


def _clock_suspects(
    lake: TraceLake, ids: dict, delta: _Delta, params: RootCauseParams
) -> list[Suspect]:
    """Clocks that moved (explaining latency * (f_before / f_after - 1), as if compute-bound)
    and power / thermal violation that rose (of unknown size)."""
    rows = lake.query(
        CLOCK_SQL,
        ids
        | {"metrics": [*CLOCK_METRICS, *VIOLATION_METRICS], "violations": list(VIOLATION_METRICS)},
    ).to_pylist()
    suspects = []
    for row in rows:
        base, cur = row["base"], row["cur"]
        if base is None or cur is None:
            continue
        if row["metric"] in VIOLATION_METRICS:
            if cur - base >= params.min_violation_change:
                suspects.append(
                    Suspect("clocks", row["metric"], f"{base:.0f}%", f"{cur:.0f}%", None, None)
                )
        elif cur > 0 and abs(cur - base) >= params.min_change * base:
            explained = delta.reference * (base / cur - 1.0)
            suspects.append(
                Suspect(
                    "clocks",
                    row["metric"],
                    f"{base:.0f} MHz",
                    f"{cur:.0f} MHz",
                    explained / 1e6,
                    _share(explained, delta.measured),
                )
            )
    return suspects


CONTENTION_SQL = """
SELECT (SELECT median(host_contention) FROM measurement_quality
        WHERE list_contains($base, session_id)) AS base,
       (SELECT any_value(host_contention) FROM measurement_quality
        WHERE session_id = $cur) AS cur
"""


def _contention_suspects(lake: TraceLake, ids: dict, params: RootCauseParams) -> list[Suspect]:
    """Other processes' share of the host's CPU while measuring, when it differs between the
    sides by min_contention_change and one side was contended (of unknown size: it slows what
    it preempts). A contended baseline makes an unchanged session look faster, too."""
    [row] = lake.query(CONTENTION_SQL, ids).to_pylist()
    base, cur = row["base"], row["cur"]
    if base is None or cur is None or abs(cur - base) < params.min_contention_change:
        return []
    if max(base, cur) <= CONTENDED_SHARE:
        return []
    return [
        Suspect(
            "host_contention",
            "other processes' share of the host's CPU",
            f"{base:.0%}",
            f"{cur:.0%}",
            None,
            None,
            detail={"measured_pass_contention": {"baseline_median": base, "current": cur}},
        )
    ]

"""Root cause suspects in what the device ran: op types whose time moved (op_breakdown), fusions
run on one side only (analysis/comparison/structural_diff), kernels per iteration by family,
kernels new or vanished, and kernels whose counted work or occupancy moved with their time
(kernel_diagnoses)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aaco_pipelines.analysis.comparison.stored_structure import structure_between
from aaco_pipelines.analysis.comparison.structure_records import FusionTotal
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.gate.suspect import Delta, RootCauseParams, Suspect, share
from aaco_pipelines.tracelake.store import TraceLake

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


def op_suspects(lake: TraceLake, ids: dict, delta: Delta, params: RootCauseParams) -> list[Suspect]:
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
            share(d, delta.profiled),
        )
        for name, b, c, d in zip(
            np.asarray(ops["name"].to_pylist())[keep],
            base[keep],
            cur[keep],
            change[keep],
            strict=True,
        )
    ]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.4g} ms"


def _material(
    change: np.ndarray, magnitude: np.ndarray, delta: Delta, params: RootCauseParams
) -> np.ndarray:
    """A change large relative to itself and to the latency: jitter of tiny ops is no suspect."""
    relative = np.abs(change) >= params.min_change * np.maximum(magnitude, 1e-9)
    return relative & (np.abs(change) >= params.min_latency_share * abs(delta.reference_profiled))


def fusion_suspects(lake: TraceLake, newest: str, current: str, delta: Delta) -> list[Suspect]:
    """Fusions the current session runs otherwise than the baseline's newest session
    (analysis/comparison/structural_diff): one suspect per kind of change and fused op, since a
    LayerNormalization fusion lost in 24 layers is one cause, credited its members' time
    difference per profiled iteration with its CI."""
    try:
        diff = structure_between(lake, newest, current)  # kept when newest came just before
    except AacoInputError:  # a side not analysed: nothing to align
        return []
    return [
        Suspect(
            "fusion_change",
            fusion_suspect_name(t, diff.confidence),
            *_fusion_sides(t),
            t.delta_ms,
            share(t.delta_ms * 1e6, delta.profiled),
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


def kernel_suspects(
    lake: TraceLake, ids: dict, delta: Delta, params: RootCauseParams
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
    lake: TraceLake, ids: dict, kernels: pa.Table, delta: Delta, params: RootCauseParams
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
                share(explained, delta.profiled),
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


def _family_suspects(kernels: pa.Table, delta: Delta, params: RootCauseParams) -> list[Suspect]:
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
            share(e, delta.profiled),
        )
        for family, b, c, e in zip(
            np.asarray(families["family"].to_pylist())[keep],
            base_count[keep],
            cur_count[keep],
            explained[keep],
            strict=True,
        )
    ]


def _appeared(kernels: pa.Table, delta: Delta, params: RootCauseParams, new: bool) -> list[Suspect]:
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
            share(explained, delta.profiled),
            detail={"kernels": names[order][:50].tolist()},
        )
    ]

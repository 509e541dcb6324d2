"""False discovery rate across a sweep: with hundreds of series judged each night, a per-series
test at a fixed level pages someone for noise every night; Benjamini-Hochberg keeps the expected
share of false regressions among those reported at `q`.

Every series judged in the sweep is one hypothesis (no_change verdicts included, or the family
shrinks to the suspicious ones and the control is lost). BH holds for independent series and
for positively dependent ones (metrics of one model, models on one host), the usual case here.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco_pipelines.governance.drift.verdict import DriftVerdict
from aaco_pipelines.tracelake.journal import FDR_SWEEP, LakeJournal

CHANGES = ("regression", "improvement")
FDR_Q = 0.05  # expected share of false changes among those a sweep reports


def benjamini_hochberg(p_values: np.ndarray, q: float = FDR_Q) -> tuple[np.ndarray, np.ndarray]:
    """(reject mask, BH-adjusted p) along the last axis; NaN p (no test) is left out of the
    family, never rejected, and adjusted to NaN.

    adjusted_(i) = min over j >= i of p_(j) * m / j on the sorted p, capped at 1; reject where
    adjusted <= q, which is the step-up rule "the largest i with p_(i) <= i q / m, and all below".

    Written here rather than called from scipy.stats.false_discovery_control, whose adjusted p it
    matches (tests/governance/test_fdr.py): a night's families are the rows of one array, each
    leaving out its series with no test (NaN), and scipy's takes a NaN for a p-value; row by row
    in Python would be a loop over thousands of series-nights.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be in (0, 1), got {q}")
    p = np.asarray(p_values, dtype=float)
    finite = ~np.isnan(p)
    if np.any((p[finite] < 0.0) | (p[finite] > 1.0)):
        raise ValueError("p-values must be in [0, 1]")
    m = np.count_nonzero(finite, axis=-1)[..., None]
    order = np.argsort(np.where(finite, p, np.inf), axis=-1, kind="stable")  # NaN last
    ranked = np.take_along_axis(p, order, axis=-1) * m / np.arange(1, p.shape[-1] + 1)
    stepped = np.fmin.accumulate(ranked[..., ::-1], axis=-1)[..., ::-1]  # fmin skips the NaNs
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, np.minimum(stepped, 1.0), axis=-1)
    adjusted[~finite] = np.nan
    return adjusted <= q, adjusted


def sweep_verdicts(verdicts: list[DriftVerdict], q: float = FDR_Q) -> list[DriftVerdict]:
    """The verdicts of one sweep with BH applied: a regression or improvement whose adjusted p
    is above `q` becomes no_change, decided_by "fdr_controlled". Every verdict gets the raw and
    adjusted p, q and the family size in parameters["fdr"]; a downgraded one keeps what it was
    in parameters["fdr"]["over"]."""
    p = [v.p_value for v in verdicts]
    swept = _sweep(p, [(v.verdict, v.decided_by) for v in verdicts], q)
    return [
        dataclasses.replace(
            v, verdict=verdict, decided_by=by, parameters={**v.parameters, "fdr": fdr}
        )
        for v, (verdict, by, fdr) in zip(verdicts, swept, strict=True)
    ]


def sweep_rows(rows: pa.Table, q: float = FDR_Q) -> pa.Table:
    """`sweep_verdicts` on DRIFT_VERDICTS rows; the p-value is read from parameters_json.

    Rows swept before are swept from what they were before ("over"), so judging a sweep twice
    (a re-run of a night's review) gives the same verdicts."""
    records = rows.to_pylist()
    params = [json.loads(r["parameters_json"]) for r in records]
    outcomes = []
    for r, pm in zip(records, params, strict=True):
        earlier = (pm.pop("fdr", None) or {}).get("over")
        outcomes.append(
            (earlier["verdict"], earlier["decided_by"])
            if earlier
            else (r["verdict"], r["decided_by"])
        )
    swept = _sweep([pm.get("p_value") for pm in params], outcomes, q)
    for r, pm, (verdict, by, fdr) in zip(records, params, swept, strict=True):
        r["verdict"], r["decided_by"] = verdict, by
        r["parameters_json"] = json.dumps({**pm, "fdr": fdr}, default=str)
    return pa.Table.from_pylist(records, schema=rows.schema)


def control_sweep(lake, session_ids: list[str], q: float = FDR_Q) -> pa.Table:
    """Benjamini-Hochberg over every drift series of these sessions (one sweep, or one night),
    written back to the TraceLake; returns the swept rows."""
    rows = lake.query(
        "SELECT * FROM drift_verdicts WHERE session_id IN (SELECT unnest($ids))",
        {"ids": list(session_ids)},
    )
    swept = sweep_rows(rows, q)
    for sid in session_ids:
        lake.replace_session_rows(
            sid, {"drift_verdicts": swept.filter(pc.equal(swept["session_id"], sid))}
        )
    # Which sessions were judged together is no bundle's: `aaco restore` sweeps them again.
    LakeJournal(lake.path).record(FDR_SWEEP, session_ids=list(session_ids), q=q)
    return swept


def _sweep(
    p_values: list[float | None], outcomes: list[tuple[str, str]], q: float
) -> list[tuple[str, str, dict]]:
    """Per test: (verdict, decided_by, fdr record) after BH over the whole family."""
    p = np.array([np.nan if v is None else v for v in p_values], dtype=float)
    reject, adjusted = benjamini_hochberg(p, q)
    family = int(np.count_nonzero(~np.isnan(p)))
    swept = []
    for (verdict, by), raw, rej, adj in zip(outcomes, p_values, reject, adjusted, strict=True):
        fdr = {"q": q, "p_value": raw, "p_adjusted": None if np.isnan(adj) else float(adj)}
        fdr["family_size"] = family
        if verdict in CHANGES and not rej:
            fdr["over"] = {"verdict": verdict, "decided_by": by}
            verdict, by = "no_change", "fdr_controlled"
        swept.append((verdict, by, fdr))
    return swept

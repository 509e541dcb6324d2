"""Review a night (nightly_review): one night's sweep judged as a whole, with the false
discovery rate controlled.

Each model's run judges its own series; a night judges hundreds at once, and at a per-series
level a few of them are noise every night. After the last run of a night, its drift verdicts go
through Benjamini-Hochberg (q = 0.05, `governance.drift.fdr.control_sweep`): a regression whose
adjusted p-value is above q becomes no_change ("fdr_controlled") in the TraceLake, and the
night fails only on the regressions that remain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aaco_pipelines.governance.drift.fdr import CHANGES, control_sweep
from aaco_pipelines.governance.drift.series import GATED_METRICS
from aaco_pipelines.tracelake.store import TraceLake


@dataclass(frozen=True)
class NightReview:
    verdicts: list[dict]  # every drift verdict of the night, with `before` FDR and p-values

    @property
    def changes(self) -> list[dict]:
        """Verdicts that were, or still are, a regression or an improvement."""
        return [v for v in self.verdicts if v["before"] in CHANGES or v["verdict"] in CHANGES]

    @property
    def surviving(self) -> list[dict]:
        """Gated regressions that survive the control."""
        return [
            v for v in self.changes if v["verdict"] == "regression" and v["metric"] in GATED_METRICS
        ]

    @property
    def series_judged(self) -> int:
        return max((v["family_size"] for v in self.verdicts), default=0)


def review_night(lake: TraceLake, session_ids: list[str]) -> NightReview:
    """Control the false discovery rate over the drift verdicts of a night's sessions; stored."""
    return NightReview(_with_fdr(control_sweep(lake, session_ids).to_pylist()))


def _with_fdr(verdicts: list[dict]) -> list[dict]:
    """Drift verdict rows with what each was before FDR, its p-values and the family size."""
    for v in verdicts:
        fdr = json.loads(v["parameters_json"]).get("fdr", {})
        v["before"] = (fdr.get("over") or {}).get("verdict", v["verdict"])
        v["p_value"], v["p_adjusted"] = fdr.get("p_value"), fdr.get("p_adjusted")
        v["family_size"] = fdr.get("family_size", 0)
    return verdicts

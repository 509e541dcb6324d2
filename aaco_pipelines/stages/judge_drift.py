"""Judge drift (performance_drift): each metric's history and the verdict on the new session.

One point per session of the model and target, with model version and runtime change markers;
the newest session judged regression, improvement, no change or insufficient history, with
effect size and interval (governance.drift.series). Its verdicts and the session's completion commit
together: from then on readers see the session. A confirmed regression of a gated metric also
gets the CI gate's verdict: what changed, the ranked suspects and a recommendation. The
session's objectives (SLOs, recorded in its request) are judged in the same transaction.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from aaco_pipelines.analysis.comparison.stored_structure import since_previous, structure_row
from aaco_pipelines.analysis.comparison.structure_records import StructuralDiff
from aaco_pipelines.bundle.session_bundle import SessionBundle
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.execution.session_folders import session_folder_held
from aaco_pipelines.governance.alerts.lifecycle import sync_alerts
from aaco_pipelines.governance.alerts.objectives import judge_objectives
from aaco_pipelines.governance.drift.series import GATED_METRICS, drift_verdict_rows
from aaco_pipelines.governance.gate.decision import gate_verdict
from aaco_pipelines.governance.gate.paired import settle
from aaco_pipelines.tracelake.store import TraceLake


@dataclass(frozen=True)
class DriftJudgement:
    session_id: str
    verdicts: list[dict]  # one drift_verdicts row per metric
    gate: dict | None  # the gate's verdict, when a gated metric regressed and there is history
    # what changed in the compiled graph since the model's previous session on this target
    # (analysis.comparison.structural_diff): None for its first session
    structure: StructuralDiff | None = None
    objectives: list[dict] = dataclasses.field(default_factory=list)  # objective_verdicts rows
    alerts: list[dict] = dataclasses.field(default_factory=list)  # alert events it caused
    alerts_error: str | None = None  # why its alerts could not be updated (it is stored anyway)

    @property
    def breaches(self) -> list[dict]:
        """Objectives confirmed breached: the interval beyond the limit, measured on a host
        the quality check did not suspect."""
        return [o for o in self.objectives if o["verdict"] == "breached" and not o["suspect"]]

    @property
    def suspect_breaches(self) -> list[dict]:
        return [o for o in self.objectives if o["verdict"] == "breached" and o["suspect"]]

    @property
    def regressions(self) -> list[dict]:
        """Confirmed regressions of the gated metrics (p50, p99, throughput)."""
        return [
            v
            for v in self.verdicts
            if v["metric"] in GATED_METRICS and v["verdict"] == "regression"
        ]

    @property
    def gated(self) -> dict[str, str]:
        """{gated metric: verdict}."""
        return {v["metric"]: v["verdict"] for v in self.verdicts if v["metric"] in GATED_METRICS}

    @property
    def by_metric(self) -> dict[str, str]:
        return {v["metric"]: v["verdict"] for v in self.verdicts}

    def series(self, metric: str) -> dict:
        """A metric's history as judged: session ids, values and change markers."""
        row = next(v for v in self.verdicts if v["metric"] == metric)
        return json.loads(row["series_json"])


def judge_drift(
    lake: TraceLake, bundle: SessionBundle, alerts: bool = True, paths: AacoPaths | None = None
) -> DriftJudgement:
    """Judge the session against its model's history on its target; stored, and the session
    made complete. `alerts`: open, update or fix its alerts now (governance.alerts.lifecycle); a sweep's
    run leaves them to the sweep's review, after its false discovery control. With `paths` (the
    registry's: where the versions' snapshots are) a regression's gate verdict is settled side by
    side where the stored sessions cannot settle it, as `aaco diff` does (paired.settle)."""
    session_id = bundle.session_id
    with session_folder_held(bundle.path, session_id):
        rows = drift_verdict_rows(lake, bundle.session["model_slug"], session_id)
        objectives = session_objectives(lake, bundle)
        lake.replace_session_rows(
            session_id, {"drift_verdicts": rows, "objective_verdicts": objectives}, complete=True
        )
    judgement = DriftJudgement(session_id, rows.to_pylist(), gate=None)
    judgement = dataclasses.replace(judgement, objectives=objectives.to_pylist())
    judgement = dataclasses.replace(judgement, structure=_structure(lake, session_id))
    if judgement.regressions:
        judgement = dataclasses.replace(judgement, gate=_gate(lake, session_id, paths))
    if alerts:
        judgement = _with_alerts(lake, judgement)
    return judgement


def _structure(lake: TraceLake, session_id: str) -> StructuralDiff | None:
    """What the compiled graph ran differently from the model's previous session, computed
    once and kept (analysis.comparison.stored_structure): the report, the asset pages and
    `aaco diff --structure` read it back. The session is complete by now (the diff reads
    complete sessions); a run that dies before this leaves no row, and readers diff again."""
    structure = since_previous(lake, session_id)
    lake.replace_session_rows(
        session_id, {"structural_diffs": structure_row(session_id, structure)}
    )
    return structure


def _with_alerts(lake: TraceLake, judgement: DriftJudgement) -> DriftJudgement:
    """The session's alerts opened, updated or fixed. The session is stored and complete by
    now: a failure here is said (`alerts_error`), never a reason to lose the measurement."""
    try:
        events = sync_alerts(lake, [judgement.session_id])
    except Exception as exc:  # noqa: BLE001 - said with the judgement; a stop signal passes
        return dataclasses.replace(judgement, alerts_error=f"{type(exc).__name__}: {exc}")
    return dataclasses.replace(judgement, alerts=events)


def session_objectives(lake: TraceLake, bundle: SessionBundle):
    """The session's objectives judged (governance.alerts.objectives): the limits its request
    recorded, its measuring process's peak memory and its generation SLO."""
    request = bundle.request
    observed = bundle.read_json("observed.json") if bundle.file("observed.json").is_file() else {}
    slo = ((request.get("generation") or {}).get("workload") or {}).get("slo") or {}
    return judge_objectives(
        lake,
        bundle.session_id,
        request.get("objectives") or {},
        peak_memory_bytes=observed.get("worker_peak_rss_bytes"),
        slo_ns=(slo.get("ttft_ms", float("inf")) * 1e6, slo.get("tpot_ms", float("inf")) * 1e6),
        context={"model_slug": bundle.session["model_slug"], "target": request.get("target")},
    )


def _gate(lake: TraceLake, session_id: str, paths: AacoPaths | None) -> dict | None:
    """What changed, for a regression: the CI gate's verdict against the model's pinned
    baseline or its previous sessions, settled side by side where `paths` allow. The session is
    stored by now: a side-by-side measurement that fails leaves the stored verdict, and says so."""
    try:
        verdict = gate_verdict(lake, session_id)
    except AacoInputError:
        return None  # no earlier session of this model and target to compare with
    notes: list[str] = []
    if paths is not None:
        try:
            verdict = settle(verdict, lake, paths, say=notes.append)
        except Exception as exc:  # noqa: BLE001 - said with the verdict; a stop signal passes
            notes.append(
                f"side by side failed ({type(exc).__name__}: {exc}): the stored verdict stands"
            )
    return verdict.to_dict() | {"side_by_side_notes": notes}

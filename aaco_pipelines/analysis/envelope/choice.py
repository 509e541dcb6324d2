"""Which hardware envelope judges a session, and the envelopes kept in the TraceLake.

- A session measured here: the measured envelope of the target (reused while the runtime
  fingerprint is unchanged, measured when there is none; one measured while other work held the
  host's CPUs is measured again an hour later, and any quiet one is preferred to it).
- A trace ingested from a GPU (target "external"): never this host's. The GPU that ran most of
  its kernel time (its agent info: gfx arch, product name, CUs) picks, in order, the newest
  envelope measured on that GPU model in this TraceLake, else that GPU's datasheet
  (analysis.envelope.datasheets; stored with source "datasheet" and its reference), else none: no
  roofline verdicts, and a note that says why.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import time
from dataclasses import dataclass

import pyarrow as pa

from aaco_pipelines.analysis.envelope.datasheets import GpuAgent, agent_arch
from aaco_pipelines.analysis.envelope.measure import measure_envelope
from aaco_pipelines.analysis.envelope.record import (
    CONTENDED_SHARE,
    HardwareEnvelope,
    datasheet_envelope,
)
from aaco_pipelines.execution.environment import capture_environment, runtime_fingerprint
from aaco_pipelines.execution.providers import host_default_providers
from aaco_pipelines.tracelake.journal import ENVELOPE, LakeJournal
from aaco_pipelines.tracelake.store import TraceLake, reads_together

EXTERNAL_TARGET = "external"  # the target of sessions ingested from a trace (aaco ingest)


def save_envelope(
    lake: TraceLake, envelope: HardwareEnvelope, envelope_id: str | None = None
) -> str:
    envelope_id = envelope_id or (
        f"{envelope.target}-{envelope.runtime_fingerprint[:12]}-{secrets.token_hex(3)}"
    )
    device = envelope.device or {}
    row = {
        "envelope_id": envelope_id,
        "target": envelope.target,
        "runtime_fingerprint": envelope.runtime_fingerprint,
        "measured_at": dt.datetime.fromtimestamp(envelope.measured_at_ns / 1e9, dt.timezone.utc),
        "providers": envelope.providers,
        "gemm_flops_per_s": envelope.gemm.peak,
        "gemm_low": envelope.gemm.spread_low,
        "gemm_high": envelope.gemm.spread_high,
        "bandwidth_bytes_per_s": envelope.bandwidth.peak,
        "bandwidth_low": envelope.bandwidth.spread_low,
        "bandwidth_high": envelope.bandwidth.spread_high,
        "envelope_json": json.dumps(envelope.to_dict()),
        "source": envelope.source,
        "device_arch": device.get("arch"),
        "device_name": device.get("product_name"),
        "compute_units": device.get("compute_units"),
        "gemm_peaks_json": json.dumps(envelope.gemm_peaks()),
        "reference": json.dumps(envelope.reference) if envelope.reference else None,
    }
    lake.append_rows("hardware_envelopes", pa.Table.from_pylist([row]))
    LakeJournal(lake.path).record(ENVELOPE, row=row)  # no bundle holds it: `aaco restore` reads it
    return envelope_id


def stored_envelope(lake: TraceLake, envelope_id: str) -> HardwareEnvelope | None:
    """The stored envelope of this id, or None."""
    found = lake.query(
        "SELECT envelope_json FROM hardware_envelopes WHERE envelope_id = $eid",
        {"eid": envelope_id},
    ).to_pylist()
    return HardwareEnvelope.from_dict(json.loads(found[0]["envelope_json"])) if found else None


# Whether a stored envelope was measured while other work held the host's CPUs
# (HardwareEnvelope.contended); envelopes stored before that was recorded count as quiet.
CONTENDED_SQL = (
    "coalesce(TRY_CAST(json_extract_string(envelope_json, '$.host_contention') AS DOUBLE), 0) "
    "> $contended"
)
RECHECK_CONTENDED_S = 3600


def latest_envelope(
    lake: TraceLake, target: str, fingerprint: str | None = None
) -> tuple[str, HardwareEnvelope] | None:
    """The newest envelope measured for a target (for one runtime fingerprint when given), one
    measured while no other work held the host's CPUs before any contended one."""
    rows = lake.query(
        "SELECT envelope_id, envelope_json FROM hardware_envelopes WHERE target = $target "
        "AND ($fp IS NULL OR runtime_fingerprint = $fp) "
        "AND coalesce(source, 'measured') = 'measured' "
        f"ORDER BY {CONTENDED_SQL}, measured_at DESC LIMIT 1",
        {"target": target, "fp": fingerprint, "contended": CONTENDED_SHARE},
    ).to_pylist()
    if not rows:
        return None
    return rows[0]["envelope_id"], HardwareEnvelope.from_dict(json.loads(rows[0]["envelope_json"]))


def current_envelope(
    lake: TraceLake, target: str, providers: list[str] | None = None
) -> tuple[str, HardwareEnvelope]:
    """The envelope for today's runtime: stored if measured under this fingerprint, else measured
    now and stored (a new ROCm / driver / ONNX Runtime means new peaks). One measured while
    other work held the host's CPUs (its peaks too low) is used, but measured again by the
    first session an hour later, and a quiet one is always preferred: a busy host is not
    re-measured at every session, and one quiet moment gives it its peaks for good."""
    return reusable_envelope(lake, target) or measure_and_save(lake, target, providers)


def reusable_envelope(lake: TraceLake, target: str) -> tuple[str, HardwareEnvelope] | None:
    """The stored envelope of today's runtime that may still judge a session (see
    current_envelope), or None when one must be measured."""
    fingerprint = runtime_fingerprint(capture_environment())
    found = latest_envelope(lake, target, fingerprint)
    if found is not None:
        age_s = (time.time_ns() - found[1].measured_at_ns) / 1e9
        if not found[1].contended or age_s < RECHECK_CONTENDED_S:
            return found
    return None


def measure_and_save(
    lake: TraceLake, target: str, providers: list[str] | None = None
) -> tuple[str, HardwareEnvelope]:
    """The target's envelope measured now, and stored."""
    envelope = measure_envelope(target, providers or host_default_providers())
    return save_envelope(lake, envelope), envelope


@dataclass(frozen=True)
class EnvelopeChoice:
    """The envelope a session is judged against, or why there is none."""

    envelope_id: str | None
    envelope: HardwareEnvelope | None
    source: str  # measured | datasheet | none
    note: str  # how it was chosen, in a sentence (the reason when there is none)
    agent: GpuAgent | None = None  # the GPU of an ingested trace
    measured_now: bool = False  # measured (and stored) for this session: nobody had yet


# The GPU agents of a session, with the kernel time each ran (kernel_events.device_id is the
# agent's logical index, which the agents table names "Agent <index>").
SESSION_AGENTS_SQL = """
WITH busy AS (
    SELECT device_id, sum(duration_ns) AS busy_ns FROM kernel_events
    WHERE session_id = $sid AND category = 'Kernel' AND device_id IS NOT NULL GROUP BY device_id
)
SELECT a.agent_id, a.name, a.product_name, a.compute_units, a.max_clock_mhz, a.details_json,
       b.busy_ns
FROM agents a LEFT JOIN busy b ON a.agent_id = 'Agent ' || b.device_id
WHERE a.session_id = $sid AND upper(a.agent_type) = 'GPU'
ORDER BY b.busy_ns DESC NULLS LAST, a.agent_id
"""


def session_gpu(lake: TraceLake, session_id: str) -> tuple[GpuAgent | None, str]:
    """The GPU that ran the session's kernels, from the trace's agent info, and how it was
    found: the agent with the most kernel time, else the one GPU model of the trace."""
    rows = lake.query(SESSION_AGENTS_SQL, {"sid": session_id}).to_pylist()
    agents = [
        (
            GpuAgent(
                arch=agent_arch(row["name"], row["details_json"]),
                product_name=row["product_name"] or None,
                compute_units=row["compute_units"] or None,
                max_clock_mhz=row["max_clock_mhz"] or None,
                agent_id=row["agent_id"],
            ),
            row["busy_ns"] or 0,
        )
        for row in rows
    ]
    if not agents:
        return None, "the trace names no GPU (no agent info: RPD and rocprof v1 traces have none)"
    busy = [(agent, ns) for agent, ns in agents if ns > 0]
    if busy:
        agent, ns = busy[0]
        share = ns / sum(n for _, n in busy)
        other = {a.arch for a, _ in busy[1:]} - {agent.arch}
        note = f"{agent.agent_id} ran {share:.0%} of the kernel time"
        if other:
            note += f" (kernels also ran on {', '.join(sorted(map(str, other)))})"
        return agent, note
    models = {(a.arch, a.product_name, a.compute_units) for a, _ in agents}
    if len(models) == 1:
        return agents[0][0], "its kernels name no agent; every GPU of the trace is this one"
    return None, (
        "its kernels name no agent and the trace has several GPU models ("
        + ", ".join(sorted(a.describe() for a, _ in agents))
        + ")"
    )


def measured_gpu_envelope(lake: TraceLake, agent: GpuAgent) -> tuple[str, HardwareEnvelope] | None:
    """The newest envelope measured on a GPU of the agent's model: same gfx architecture and,
    when both are known, the same CU count (a partition is not the whole GPU); one measured on
    a quiet host first, then one with the same product name."""
    rows = lake.query(
        "SELECT envelope_id, envelope_json FROM hardware_envelopes "
        "WHERE coalesce(source, 'measured') = 'measured' AND device_arch = $arch "
        "AND ($cus IS NULL OR compute_units IS NULL OR compute_units = $cus) "
        f"ORDER BY {CONTENDED_SQL}, coalesce(device_name = $name, false) DESC, "
        "measured_at DESC LIMIT 1",
        {
            "arch": agent.arch,
            "cus": agent.compute_units,
            "name": agent.product_name,
            "contended": CONTENDED_SHARE,
        },
    ).to_pylist()
    if not rows:
        return None
    return rows[0]["envelope_id"], HardwareEnvelope.from_dict(json.loads(rows[0]["envelope_json"]))


def stored_datasheet_envelope(
    lake: TraceLake, agent: GpuAgent
) -> tuple[str, HardwareEnvelope] | None:
    """The datasheet envelope of the agent's GPU, stored once per product, architecture and CU
    count (its id says which), so reports and roofline points can refer to it."""
    envelope = datasheet_envelope(agent)
    if envelope is None:
        return None
    reference = envelope.reference or {}
    product = re.sub(r"[^a-z0-9]+", "-", reference.get("product", "").lower()).strip("-")
    cus = agent.compute_units or reference.get("compute_units")
    envelope_id = f"datasheet-{agent.arch}-{product}-{cus}cu"
    found = stored_envelope(lake, envelope_id)
    if found is not None:
        return envelope_id, found
    return save_envelope(lake, envelope, envelope_id), envelope


@reads_together
def session_envelope(
    lake: TraceLake, session_id: str, target: str = "cpu", providers: list[str] | None = None
) -> EnvelopeChoice:
    """The envelope to judge a session against (see the module docstring): this host's
    measured one for a session measured here; for a trace ingested from elsewhere the GPU's
    measured envelope, else its datasheet, else none, and never this host's."""
    rows = lake.query(
        "SELECT target FROM session_records WHERE session_id = $sid", {"sid": session_id}
    ).to_pylist()
    if not rows or rows[0]["target"] != EXTERNAL_TARGET:
        found = reusable_envelope(lake, target)
        envelope_id, envelope = found or measure_and_save(lake, target, providers)
        note = f"{envelope.describe()} (this host)"
        return EnvelopeChoice(envelope_id, envelope, envelope.source, note, measured_now=not found)
    agent, found = session_gpu(lake, session_id)
    not_here = "this host, which only ingested the trace, is not the GPU that ran it"
    if agent is None:
        return EnvelopeChoice(
            None,
            None,
            "none",
            f"No hardware envelope: {found}, and {not_here}. "
            "Roofline and utilization are not judged.",
        )
    if agent.arch is None:
        return EnvelopeChoice(
            None,
            None,
            "none",
            f"No hardware envelope: {found}, but its agent info gives no "
            f"gfx architecture, and {not_here}. Roofline and utilization are not judged.",
            agent,
        )
    measured = measured_gpu_envelope(lake, agent)
    if measured is not None:
        envelope_id, envelope = measured
        return EnvelopeChoice(
            envelope_id,
            envelope,
            "measured",
            f"{envelope.describe()}: measured on this GPU model ({agent.describe()}; {found})",
            agent,
        )
    sheet = stored_datasheet_envelope(lake, agent)
    if sheet is not None:
        envelope_id, envelope = sheet
        reference = envelope.reference or {}
        notes = "; ".join(reference.get("notes") or [])
        return EnvelopeChoice(
            envelope_id,
            envelope,
            "datasheet",
            f"datasheet peaks of the {reference.get('product')} ({reference.get('url')}), "
            f"matched by {reference.get('matched_by')} for {agent.describe()} ({found}); "
            "no envelope measured on this GPU model is in the TraceLake"
            + (f"; {notes}" if notes else ""),
            agent,
        )
    return EnvelopeChoice(
        None,
        None,
        "none",
        f"No hardware envelope: {agent.describe()} ({found}) has no envelope measured in this "
        f"TraceLake and no datasheet here, and {not_here}. Roofline and utilization are not "
        "judged.",
        agent,
    )

"""A measured hardware envelope as people read it: its memory ceilings as a table, for the
hardware_envelope asset's page."""

from __future__ import annotations

from aaco_pipelines.analysis.envelope.kernels import ADD
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.report.markdown_tables import markdown_table, num


def memory_ceilings_table(envelope: HardwareEnvelope) -> str:
    """The hierarchical roofline's bandwidth ceilings, smallest cache first, DRAM last: each
    level's capacity, the working set it was measured at, the measured peak and the ceiling
    used (raised to a larger level's when measured below it)."""
    rows = []
    for level, capacity, ceiling in envelope.memory_ceilings():
        peak = envelope.cache_bandwidth.get(level, envelope.bandwidth)
        entry = peak.peak_entry() if peak.sweep else {}
        working_set = entry.get("working_set_bytes")
        if working_set is None and "size" in entry and level == "DRAM":
            working_set = ADD.feed_bytes(entry["size"])
        rows.append(
            {
                "level": level,
                "capacity": capacity / 2**20 if capacity else None,
                "working_set": working_set / 2**20 if working_set else None,
                "measured": peak.peak / 1e9,
                "spread": f"{peak.spread_low / 1e9:.1f} – {peak.spread_high / 1e9:.1f}",
                "ceiling": ceiling / 1e9,
                "raised_to": entry.get("clamped_to"),
            }
        )
    return markdown_table(
        rows,
        [
            ("level", "level", None),
            ("capacity", "capacity (MiB)", num),
            ("working_set", "working set (MiB)", num),
            ("measured", "measured (GB/s)", num),
            ("spread", "spread (GB/s)", None),
            ("ceiling", "ceiling (GB/s)", num),
            ("raised_to", "raised to", None),
        ],
    )

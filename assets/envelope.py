"""hardware_envelope: the measured peak GEMM FLOP/s and streaming bandwidth of the target."""

import dagster as dg

from aaco_pipelines.analysis.envelope.choice import measure_and_save
from aaco_pipelines.analysis.envelope.record import HardwareEnvelope
from aaco_pipelines.config import device_pool
from aaco_pipelines.report.envelope_text import memory_ceilings_table
from aaco_pipelines.resources import BenchmarkRunnerResource, TraceLakeResource


@dg.asset(
    group_name="analysis",
    kinds={"onnxruntime"},
    pool=device_pool(),  # calibration needs the device to itself too
    description="Microbenchmarks through ONNX Runtime on the target's execution provider: GEMM "
    "sizes swept until FLOP/s saturates, and large streaming adds for bandwidth; medians of "
    "repeats with their spread, stored with the runtime fingerprint. Refreshed on demand and "
    "when the runtime fingerprint changes.",
)
def hardware_envelope(
    context: dg.AssetExecutionContext, runner: BenchmarkRunnerResource, tracelake: TraceLakeResource
) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        metadata=envelope_metadata(*measure_and_save(tracelake.lake, runner.target))
    )


def envelope_metadata(envelope_id: str, envelope: HardwareEnvelope) -> dict:
    """What the asset's page shows of one measured envelope: peaks, spreads, sweeps and the
    host's contention meanwhile (also for one measured on demand by a session's diagnosis)."""
    theoretical, share = envelope.theoretical, envelope.theoretical_share()
    return {
        "envelope_id": envelope_id,
        "target": envelope.target,
        "providers": ", ".join(envelope.providers),
        "peak_gemm_gflops": round(envelope.gemm.peak / 1e9, 2),
        "gemm_spread_gflops": f"{envelope.gemm.spread_low / 1e9:.1f} – {envelope.gemm.spread_high / 1e9:.1f}",
        "peak_bandwidth_gbs": round(envelope.bandwidth.peak / 1e9, 2),
        "bandwidth_spread_gbs": f"{envelope.bandwidth.spread_low / 1e9:.1f} – {envelope.bandwidth.spread_high / 1e9:.1f}",
        "ridge_point_flop_per_byte": round(envelope.ridge_point(), 3),
        # The host CPU's theoretical fp32 peak (analysis.envelope.host_peak) and the share of it the
        # measured fp32 GEMM reached; None on a GPU or where cpuinfo does not say.
        "theoretical_peak_gflops": round(theoretical["flops_per_s"] / 1e9, 2)
        if theoretical
        else None,
        "theoretical_share": round(share, 4) if share is not None else None,
        "theoretical_how": theoretical.get("how") if theoretical else None,
        "memory_ceilings": dg.MetadataValue.md(memory_ceilings_table(envelope)),
        "runtime_fingerprint": envelope.runtime_fingerprint[:16],
        "source": envelope.source,  # always measured here; datasheets serve ingested traces
        # Other processes' share of the host's CPU time meanwhile: above 0.2 the peaks
        # are suspect, and the next session an hour later measures them again.
        "host_contention": envelope.host_contention,
        "measured": envelope.describe(),
        "device_arch": (envelope.device or {}).get("arch"),
        "gemm_peaks_gflops": dg.MetadataValue.json(
            {d: round(p / 1e9, 2) for d, p in envelope.gemm_peaks().items()}
        ),
        "dtypes_not_measured": dg.MetadataValue.json(envelope.dtype_notes),
        "gemm_sweep": dg.MetadataValue.json(envelope.gemm.sweep),
        "bandwidth_sweep": dg.MetadataValue.json(envelope.bandwidth.sweep),
        "cache_sweeps": dg.MetadataValue.json(
            {level: peak.sweep for level, peak in envelope.cache_bandwidth.items()}
        ),
    }

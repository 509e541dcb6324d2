"""Hardware counters of the profiled workload, in passes that fit the GPU's counter blocks.

A GPU counts events in blocks (SQ, TA, TCP, TCC or GL2C, SPI, ...), each with a few counter
registers, and rocprofv3 refuses a `--pmc` group that needs more registers of a block than it
has. So the counters `execution.gpu_counters` asks for an architecture are split into the fewest
passes that fit, each a separate run of the measuring process under rocprofv3.

Entry points: `plan_counters` (the passes to run, or why none can be), `split_into_passes`,
`counter_command` (one pass's command line), `trace_output_format` (rocpd or CSV for this host's
ROCm) and `gpu_architecture` (the gfx target of the first GPU of the KFD topology).

Concepts: docs/concepts/kernel-diagnosis.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from aaco_pipelines.execution import environment
from aaco_pipelines.execution.amd_gpus import KFD_NODES, gfx_name, kfd_gpu_nodes
from aaco_pipelines.execution.gpu_counters import counters_for

# Under the trace folder, as rocprofv3 names its passes ("Kernel counter collection output":
# "For each pmc row, a directory pmc_n").
COUNTER_PASS_FOLDER = "pmc_{}"
COUNTER_OUTPUT_FILE = "counters"
COUNTER_PASS_PREFIX = "counters_"  # the measuring process's name of counter pass k: counters_<k>
# rocpd is rocprofv3's default output since ROCm 7.0 ("Using rocpd output format",
# rocprofiler-sdk docs-7.0.1), whose documentation now calls direct CSV "deprecated and might
# omit data" (rocprofv3 I/O control options, docs-10.2.0). Before 7.0 there is no rocpd output,
# and every rocprofv3 writes CSV: the format when the ROCm version is unknown.
ROCPD_SINCE = (7, 0)

# Counter registers per block, per architecture:
# - gfx908, gfx90a, gfx940-942, gfx950: rocprofiler-compute's `perfmon_config`, "copy from
#   ROCm/aqlprofile gfxip/gfx9/gfx9_block_info.h" (ROCm/rocm-systems@
#   78265b59f69f346bebe6ef6de1d25266c453a768:
#   projects/rocprofiler-compute/src/utils/mi_gpu_spec.yaml).
# - gfx1100-1103: the counter registers aqlprofile programs per block (ROCm/rocm-systems@
#   b318449db5302648ef40d154ce747943e759515c:projects/aqlprofile/gfxip/gfx11/gfx11_block_table.h,
#   one CounterRegInfo per register; rocprofiler-compute's gfx115x entries in mi_gpu_spec.yaml
#   give the same numbers).
# - gfx1200-1201: `*CounterBlockNumCounters` of aqlprofile's gfx12 block info ("Radeon RX 9070",
#   gc_12_0_1; ROCm/rocm-systems@c50a8225ae822ff03db77bb0d6c8f948cf329820:
#   projects/aqlprofile/gfxip/gfx12/gfx12_block_info.h); SQ counters use the SQG block's 8.
_CDNA = {"SQ": 8, "TA": 2, "TD": 2, "TCP": 4, "TCC": 4, "CPC": 2, "CPF": 2, "SPI": 6, "GRBM": 2,
         "GDS": 4}  # fmt: skip
_RDNA3 = {"SQ": 8, "SPI": 6, "GRBM": 2, "CPC": 2, "CPF": 2, "GDS": 4, "SX": 4, "GCEA": 2,
          "GCR": 2, "TCP": 4, "TA": 2, "GL1A": 4, "GL1C": 4, "GL2A": 4, "GL2C": 4,
          "GUS": 2}  # fmt: skip
_RDNA4 = {"SQ": 8, "SQC": 16, "TA": 2, "TD": 2, "TCP": 4, "SPI": 6, "GRBM": 2, "GRBMH": 2,
          "CPC": 2, "CPF": 2, "CPG": 2, "GCR": 2, "GL1A": 4, "GL1C": 4, "GL2A": 4, "GL2C": 4,
          "GCEA": 2, "CHA": 4, "CHC": 4, "RLC": 2, "SDMA": 2, "UTCL1": 4}  # fmt: skip
BLOCK_REGISTERS: dict[str, dict[str, int]] = {
    **dict.fromkeys(("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"), _CDNA),
    **dict.fromkeys(("gfx1100", "gfx1101", "gfx1102", "gfx1103"), _RDNA3),
    **dict.fromkeys(("gfx1200", "gfx1201"), _RDNA4),
}
# Blocks whose counters are read through another block's registers, per architecture: on gfx9
# and gfx11 the SQC counters use the SQ block's (their aqlprofile tables have no SQC block);
# gfx12 has an SQC block of its own.
SHARED_BLOCKS: dict[str, dict[str, str]] = {
    gfx: {"SQC": "SQ"} for gfx, table in BLOCK_REGISTERS.items() if "SQC" not in table
}


@dataclass(frozen=True)
class CounterPlan:
    """What `--counters` asked, and what will be collected: the passes (empty when none, with
    the reason) and the GPU they were chosen for."""

    asked: bool
    gfx: str | None = None
    passes: tuple[tuple[str, ...], ...] = ()
    reason: str | None = None  # why no counters are collected, when asked

    def to_json(self) -> dict:
        data = asdict(self)
        data["passes"] = [
            {"pass": number, "folder": COUNTER_PASS_FOLDER.format(number), "counters": list(p)}
            for number, p in enumerate(self.passes, start=1)
        ]
        return data


def counter_block(counter: str, gfx: str) -> str:
    """The block whose registers a counter uses: its name's prefix, or the block it shares."""
    prefix = re.split(r"[_\[]", counter, maxsplit=1)[0].upper()
    return SHARED_BLOCKS.get(gfx, {}).get(prefix, prefix)


def split_into_passes(counters: Sequence[str], gfx: str) -> tuple[tuple[str, ...], ...]:
    """The counters in the fewest passes that fit every block's registers on `gfx`; each counter
    once, in the order given within a pass. Counters are grouped by block in the order given, and
    pass k takes the k-th run of `registers` counters of every block: max over blocks of
    ceil(counters / registers) passes, the fewest any split can have. A counter of a block the
    table does not know (a derived metric's name, a block of another kind) gets a pass of its
    own, and rocprofv3 says itself whether it fits."""
    registers = BLOCK_REGISTERS[gfx]
    blocks: dict[str, list[str]] = {}
    alone: list[str] = []
    for counter in dict.fromkeys(counters):
        block = counter_block(counter, gfx)
        (blocks.setdefault(block, []) if block in registers else alone).append(counter)
    count = max((math.ceil(len(c) / registers[b]) for b, c in blocks.items()), default=0)
    passes = [
        tuple(c for b, names in blocks.items() for c in names[k * registers[b] :][: registers[b]])
        for k in range(count)
    ]
    return (*passes, *((counter,) for counter in alone))


def counter_command(
    rocprofv3: str, counters: Sequence[str], output_format: str, folder: Path, argv: list[str]
) -> list[str]:
    """One counter pass: rocprofv3 collecting these counters of every dispatch of `argv` (the
    measuring process's command line), one `--pmc` group per call, not several groups in one
    call: each pass is one measuring process the runner watches."""
    return [
        rocprofv3,
        "--pmc",
        *counters,
        "--output-format",
        output_format,
        "--output-directory",
        str(folder),
        "--output-file",
        COUNTER_OUTPUT_FILE,
        "--",
        *argv,
    ]


def gpu_architecture(topology: Path = KFD_NODES) -> tuple[str | None, str]:
    """The gfx target of the first GPU the KFD topology lists (the device ONNX Runtime's ROCm and
    MIGraphX providers use by default), and where it was read; None and why not when there is
    none."""
    if not topology.is_dir():
        return None, f"no KFD topology at {topology} to tell the GPU's architecture"
    for node, properties in kfd_gpu_nodes(topology):
        gfx = gfx_name(properties.get("gfx_target_version"))
        if gfx:
            return gfx, f"KFD topology node {node}"
    return None, f"no GPU node with a gfx_target_version under {topology}"


def trace_output_format() -> tuple[str, str]:
    """rocprofv3's output format for this host's ROCm, and why (see ROCPD_SINCE)."""
    version, where = environment.rocm_version()
    parsed = _version_numbers(version)
    if parsed is None:
        return "csv", f"ROCm version unknown ({where}): CSV, which every rocprofv3 writes"
    if parsed >= ROCPD_SINCE:
        return "rocpd", f"ROCm {version}: rocpd, rocprofv3's default since ROCm 7.0"
    return "csv", f"ROCm {version}: CSV (rocpd output came with ROCm 7.0)"


def _version_numbers(version: str | None) -> tuple[int, int] | None:
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(found[1]), int(found[2])) if found else None


def plan_counters(
    asked: bool, rocprofv3: str | None, tracer_reason: str, generation: bool
) -> CounterPlan:
    """The counter passes to run, or why none can be (no rocprofv3 or AMD GPU, an LLM
    generation workload, an architecture without a counter set)."""
    plan = CounterPlan(asked)
    if not asked:
        return plan
    if rocprofv3 is None:
        return replace(plan, reason=f"counters need rocprofv3 on an AMD GPU host: {tracer_reason}")
    if generation:
        return replace(plan, reason="counter passes run forward-pass workloads; a generation "
                       "session is measured without them")  # fmt: skip
    gfx, where = gpu_architecture()
    if gfx is None:
        return replace(plan, reason=f"the GPU's architecture is unknown: {where}")
    counters = counters_for(gfx)
    if not counters or gfx not in BLOCK_REGISTERS:
        lacking = "a counter set" if not counters else "a table of its counter blocks"
        return replace(plan, gfx=gfx, reason=f"no {lacking} for {gfx} ({where})")
    return replace(plan, gfx=gfx, passes=split_into_passes(counters, gfx))

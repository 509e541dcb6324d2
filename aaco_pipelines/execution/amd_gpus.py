"""AMD GPUs by name: a gfx target from a KFD version number or an agent string, and this host's
GPUs as the amdgpu driver's KFD topology lists them. One place for the datasheet matching
(analysis.envelope.datasheets), the counter formulas (execution.gpu_counters) and the runner's counter
passes (execution.counter_passes)."""

from __future__ import annotations

import re
from pathlib import Path

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
_GFX = re.compile(r"gfx[0-9a-f]+", re.IGNORECASE)


def gfx_name(gfx_target_version: int | str | None) -> str | None:
    """The LLVM target of a KFD / rocprofv3 Gfx_Target_Version: 90402 -> gfx942, 90010 ->
    gfx90a, 100300 -> gfx1030, 120001 -> gfx1201 (major, minor, stepping in hex)."""
    try:
        version = int(gfx_target_version)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if version <= 0:
        return None
    major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor}{stepping:x}"


def gfx_target(name: str | None) -> str | None:
    """The gfx target in an agent name or target string ("gfx942:sramecc+:xnack-" -> gfx942)."""
    match = _GFX.search(name or "")
    return match.group(0).lower() if match else None


def kfd_gpu_nodes(nodes: Path = KFD_NODES) -> list[tuple[str, dict[str, int]]]:
    """(node name, its integer properties) of every GPU node (SIMDs > 0), in node order;
    empty without a KFD topology."""
    try:
        found = [p for p in nodes.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    gpus = []
    for node in sorted(found, key=lambda p: int(p.name)):
        properties = kfd_properties(node / "properties")
        if properties.get("simd_count", 0) > 0:
            gpus.append((node.name, properties))
    return gpus


def kfd_properties(path: Path) -> dict[str, int]:
    """A KFD node's `properties` file: `name value` lines, the integer ones."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            found[key] = int(value)
    return found

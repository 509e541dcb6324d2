"""Where AACO keeps its data, read from the environment with sensible defaults.

AACO_HOME (default ./.aaco) holds the model registry, the session bundles, the content-addressed
graph store and the DuckDB TraceLake; AACO_REGISTRY and AACO_TRACELAKE move those two elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AacoPaths:
    home: Path
    registry: Path
    tracelake: Path

    @property
    def sessions(self) -> Path:
        """Immutable session bundles: sessions/<date>/<session_id>/."""
        return self.home / "sessions"

    @property
    def failed_sessions(self) -> Path:
        """Evidence of runs that failed, kept for diagnosis but never ingested."""
        return self.home / "failed"

    @property
    def graphs(self) -> Path:
        """Graph extractions keyed by model content hash (immutable, shared across sessions)."""
        return self.home / "graphs"

    @property
    def scratch(self) -> Path:
        """Temporary files of one command (a gzip trace inflated for SQLite), removed when it
        ends: on AACO_HOME's disk, whose free space aaco checks, not in TMPDIR."""
        return self.home / "scratch"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> AacoPaths:
        env = os.environ if environ is None else environ
        home = Path(env.get("AACO_HOME") or ".aaco").expanduser().absolute()
        registry = Path(env.get("AACO_REGISTRY") or home / "registry").expanduser().absolute()
        tracelake = Path(env.get("AACO_TRACELAKE") or home / "tracelake.duckdb").expanduser()
        return cls(home=home, registry=registry, tracelake=tracelake.absolute())


def default_target() -> str:
    """The execution target this deployment measures on (AACO_TARGET, default cpu): also the
    device whose run queue a device worker takes."""
    return os.environ.get("AACO_TARGET", "cpu")


# Dagster pools (one step at a time each): a device measures one model at a time, and the
# TraceLake admits one writer.
TRACELAKE_WRITER_POOL = "aaco_duckdb_writer"


def device_pool(target: str | None = None) -> str:
    """The pool of a device's benchmark and calibration steps."""
    return f"aaco_device_{target or default_target()}"

"""Where AACO keeps its data, read from the environment with sensible defaults.

AACO_HOME holds the model registry, the session bundles, the content-addressed graph store and
the DuckDB TraceLake; AACO_REGISTRY and AACO_TRACELAKE move those two elsewhere. Unset, it is
one place per user whatever the current folder ($XDG_DATA_HOME/aaco when XDG_DATA_HOME is set,
else ~/.aaco): a default that followed the current folder (./.aaco, before) gave two shells in
two folders two observatories without a word.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AacoPaths:
        env = os.environ if environ is None else environ
        home = Path(env.get("AACO_HOME") or default_home(env)).expanduser().absolute()
        registry = Path(env.get("AACO_REGISTRY") or home / "registry").expanduser().absolute()
        tracelake = Path(env.get("AACO_TRACELAKE") or home / "tracelake.duckdb").expanduser()
        return cls(home=home, registry=registry, tracelake=tracelake.absolute())


OLD_DEFAULT_HOME = ".aaco"  # the default until AACO_HOME stopped following the current folder


def default_home(environ: Mapping[str, str] | None = None) -> Path:
    """AACO_HOME when it is unset: $XDG_DATA_HOME/aaco (an absolute XDG_DATA_HOME only, as the
    XDG spec says), else ~/.aaco."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "aaco"
    return (Path(env["HOME"]) if env.get("HOME") else Path.home()) / ".aaco"


def old_home_notice(
    paths: AacoPaths, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> str | None:
    """One line to say, when AACO_HOME is unset and the current folder holds an AACO_HOME of
    the old default (./.aaco) other than the one in use, that its sessions are not the ones
    shown, and how to use them; None otherwise."""
    env = os.environ if environ is None else environ
    try:
        old = (cwd or Path.cwd()) / OLD_DEFAULT_HOME
        if env.get("AACO_HOME") or not old.is_dir() or old.resolve() == paths.home.resolve():
            return None
    except OSError:  # the current folder was removed, or cannot be looked in
        return None
    return (
        f"aaco: note: {old} is an AACO_HOME of the old default; aaco now uses {paths.home} "
        f"(set AACO_HOME={old} to keep using that one, or move it to {paths.home})"
    )


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

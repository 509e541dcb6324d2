"""Fixtures of the trace-reader tests: the real RPD sample, decompressed once per module."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from tests.helpers import SHARED

RPD_GZ = SHARED / "samples" / "profilers" / "rocmProfileData_vllm_fp8_mytrace.rpd.gz"


@pytest.fixture(scope="module")
def rpd_file(tmp_path_factory) -> Path:
    """rocmProfileData's vLLM trace as its .rpd (SQLite) file; tests change copies of it."""
    target = tmp_path_factory.mktemp("rpd") / "mytrace.rpd"
    with gzip.open(RPD_GZ, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target

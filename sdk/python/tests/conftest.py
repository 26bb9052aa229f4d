"""Fixtures: a real rewindfs daemon mounted over a temp project (needs REWINDFS_BIN, root and
/dev/fuse; outside CI a missing one skips, with CI=true it fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _required() -> bool:
    return os.environ.get("CI") in ("true", "1") or os.environ.get("REQUIRE_FUSE") == "1"


@pytest.fixture
def mounted(tmp_path: Path):
    binary = os.environ.get("REWINDFS_BIN")
    problem = None
    if not binary or not Path(binary).exists():
        problem = "REWINDFS_BIN is not set to a built rewindfs binary"
    elif not Path("/dev/fuse").exists() or os.geteuid() != 0:
        problem = "/dev/fuse is missing or we are not root"
    if problem:
        if _required():
            pytest.fail(f"a real daemon is required (CI=true or REQUIRE_FUSE=1): {problem}")
        pytest.skip(problem)
    proj, store = tmp_path / "proj", tmp_path / "store"
    proj.mkdir()
    subprocess.run([binary, "mount", str(proj), "--store", str(store)], check=True)
    try:
        yield proj, store
    finally:
        subprocess.run([binary, "umount", str(proj)], check=False)

"""The scripted Qoder CLI's file history is the oracle for rewindfs's tool scope with Qoder
(test_qoder.py), so it must behave as qodercli 1.1.76's own: ``qoder/crosscheck_history.py``
cuts the file-history class and jsdiff's ``diffLines`` out of the binary that the real
``qoder-agent-sdk`` wheel bundles (verbatim, nothing executed as qodercli), runs them under Node
beside the Python port, applies the same random turns, edits, mode changes, deletions, mtime
tricks and rewinds to both, and compares every answer and tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_the_scripted_clis_file_history_is_the_binarys_own() -> None:
    import importlib.util

    problem = None
    spec = importlib.util.find_spec("qoder_agent_sdk")
    if spec is None or not spec.origin:
        problem = "qoder-agent-sdk is not importable: run tests/clients/install.sh and use its venv's python"
    elif shutil.which("node") is None:
        problem = "node is not installed (Node >= 18 runs the binary's own file-history code)"
    if problem:
        if os.environ.get("CI") in ("true", "1"):
            pytest.fail(f"required (CI=true): {problem}")
        pytest.skip(problem)
    binary = Path(spec.origin).parent / "_bundled" / "qodercli"
    seeds = os.environ.get("QODER_CROSSCHECK_SEEDS", "60")
    p = subprocess.run(
        [sys.executable, str(HERE / "qoder" / "crosscheck_history.py"), "--binary", str(binary),
         "--seeds", seeds, "--steps", "40"],
        capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert f"{seeds}/{seeds} seeds agree" in p.stdout, p.stdout[-2000:]

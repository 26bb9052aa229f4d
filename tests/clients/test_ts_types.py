"""The TypeScript adapter's declarations fit the real @anthropic-ai/claude-agent-sdk's types
(issue 20 §3): ``sdk/typescript/test/claude.types.ts`` uses ``withRewindfs``, ``registerCli``,
``PromptStream``, ``sendPrompt`` and ``receiveResponse`` with the SDK's own ``Options`` and
``query``, and must compile with ``tsc --strict`` against the pinned SDK (versions.env).

    bash tests/clients/install.sh
    target/clients/venv/bin/python -m pytest -q -p no:cacheprovider tests/clients/test_ts_types.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _required() -> bool:
    return os.environ.get("CI") in ("true", "1") or os.environ.get("REQUIRE_FUSE") == "1"


def _node_modules() -> Path:
    d = Path(os.environ.get("REWINDFS_CLIENTS_DIR", REPO / "target" / "clients"))
    return d / "npm" / "node_modules"


def test_the_typescript_adapter_type_checks_against_the_sdks_own_types(tmp_path: Path) -> None:
    nm = _node_modules()
    tsc = nm / "typescript" / "bin" / "tsc"
    problem = None
    if shutil.which("node") is None:
        problem = "node is not installed"
    elif not tsc.exists() or not (nm / "@anthropic-ai" / "claude-agent-sdk").exists():
        problem = f"no typescript or SDK under {nm}: run tests/clients/install.sh"
    if problem:
        if _required():
            pytest.fail(f"required (CI=true): {problem}")
        pytest.skip(problem)
    # The package as it is published (its files beside each other), with the clients' modules.
    pkg = tmp_path / "rewindfs"
    (pkg / "test").mkdir(parents=True)
    for f in ("package.json", "index.js", "index.d.ts", "claude.js", "claude.d.ts"):
        shutil.copy(REPO / "sdk" / "typescript" / f, pkg / f)
    shutil.copy(REPO / "sdk" / "typescript" / "test" / "claude.types.ts", pkg / "test")
    (pkg / "node_modules").symlink_to(nm)
    out = subprocess.run(
        ["node", str(tsc), "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
         "--target", "es2022", "--types", "node", "test/claude.types.ts"],
        cwd=pkg, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, f"tsc found type errors:\n{out.stdout}\n{out.stderr}"

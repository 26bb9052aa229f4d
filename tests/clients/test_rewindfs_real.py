"""rewindfs with the real Claude Code CLI and Agent SDKs (versions.env), through a real mount:
for each scenario and each integration path — the Python adapter (``py``), the TypeScript
adapter (``ts``), the plain CLI with ``rewindfs hook`` (``hook``) — the tool scope must give
the SDK's own ``rewind_files`` answers and trees for every turn, and the agent scope the tree
as it was before each turn (see rewindfs_compare.py for how).

    bash tests/clients/install.sh
    REWINDFS_BIN=target/debug/rewindfs target/clients/venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/clients/test_rewindfs_real.py

Needs root and /dev/fuse, node for ``ts``. A missing prerequisite skips with its reason, and
fails instead with CI=true or REQUIRE_FUSE=1. ``REWINDFS_COMPARE_ALL=1`` runs every scenario
file (the default set covers the ones issue 20 names); ``REWINDFS_COMPARE_PATHS=py,ts`` chooses
paths; ``REWINDFS_COMPARE_REPORT=FILE`` appends each run's summary as a JSON line.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# Write/Edit chains and NotebookEdit; Bash and Edit in one turn; mv by Bash then Edit; Writes
# into new nested dirs; binary content; the exec bit; an Edit refused on a symlink then Bash
# writes; Writes refused as stale; several tools in one response; a last turn without tools;
# a resumed session; a change by someone else between turns.
DEFAULT = [
    "basic_tools", "bash_then_edit_same_turn", "mv_then_edit", "nested_dirs", "bash_rm_tracked",
    "binary_by_bash", "exec_bit", "chmod_only", "edit_symlink_then_bash", "write_refused_stale",
    "parallel_tools", "last_turn_no_tools", "resume", "stale_external_change",
]
# Scenario files whose point is in steps this comparison leaves out (host-chosen uuid forms,
# error answers to raw control requests).
NOT_SESSIONS = {"custom_uuid_forms", "errors"}


def scenarios() -> list[str]:
    if os.environ.get("REWINDFS_COMPARE_ALL") == "1":
        return sorted(p.stem for p in (HERE / "scenarios").glob("*.json") if p.stem not in NOT_SESSIONS)
    return DEFAULT


def paths() -> list[str]:
    return [p for p in os.environ.get("REWINDFS_COMPARE_PATHS", "py,ts,hook").split(",") if p]


def _required() -> bool:
    return os.environ.get("CI") in ("true", "1") or os.environ.get("REQUIRE_FUSE") == "1"


def missing_prerequisite(path: str) -> str | None:
    from rewindfs_compare import rewindfs_bin

    if importlib.util.find_spec("claude_agent_sdk") is None:
        return "claude-agent-sdk is not importable: run tests/clients/install.sh and use its venv's python"
    if not Path(rewindfs_bin()).exists():
        return f"no rewindfs binary at {rewindfs_bin()}: cargo build --features fault-injection (or set REWINDFS_BIN)"
    if os.geteuid() != 0 or not Path("/dev/fuse").exists():
        return "mounting needs root and /dev/fuse"
    if path == "ts":
        if shutil.which("node") is None:
            return "node is not installed (the TypeScript SDK needs Node >= 18)"
        clients = Path(os.environ.get("REWINDFS_CLIENTS_DIR") or HERE.parent.parent / "target" / "clients")
        if not (clients / "npm" / "node_modules" / "@anthropic-ai" / "claude-agent-sdk").is_dir():
            return f"@anthropic-ai/claude-agent-sdk is not installed under {clients}/npm: run tests/clients/install.sh"
    return None


@pytest.mark.parametrize("path", paths())
@pytest.mark.parametrize("scenario", scenarios())
def test_rewindfs_gives_the_sdks_answers_and_trees(scenario: str, path: str, tmp_path: Path) -> None:
    problem = missing_prerequisite(path)
    if problem:
        if _required():
            pytest.fail(f"required (CI=true or REQUIRE_FUSE=1): {problem}")
        pytest.skip(problem)
    from rewindfs_compare import compare, load

    report = asyncio.run(compare(load(HERE / "scenarios" / f"{scenario}.json"), scenario, path, str(tmp_path)))
    out = os.environ.get("REWINDFS_COMPARE_REPORT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(report.summary()) + "\n")
    if report.failed:
        pytest.fail(report.text(), pytrace=False)

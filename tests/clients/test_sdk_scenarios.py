"""Each scenario in scenarios/ run against the real Claude Agent SDK (CLI pinned in
versions.env), offline through fake_api.py, must give the answers recorded in it.

    bash tests/clients/install.sh
    target/clients/venv/bin/python -m pytest -q tests/clients/test_sdk_scenarios.py

This checks the harness and the recordings themselves (a new CLI version that answers
differently shows up here). To check rewindfs against the same recordings, pass a
``rewinder`` to :class:`run_session.Session` (see run_session.py's module doc).
Skipped when claude-agent-sdk is not importable (run install.sh first).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

pytest.importorskip("claude_agent_sdk")

from run_session import Session  # noqa: E402

SCENARIOS = sorted((HERE / "scenarios").glob("*.json"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_matches_recording(path: Path, tmp_path: Path) -> None:
    scenario = json.loads(path.read_text())
    s = Session(scenario, str(tmp_path / "ws"), home=str(tmp_path / "home"),
                log_dir=str(tmp_path / "logs"), emit=lambda e: None)
    results = asyncio.run(asyncio.wait_for(s.run(), 120))
    bad = [(i, r["mismatch"]) for i, r in enumerate(results) if r.get("mismatch")]
    assert not bad, json.dumps(bad, indent=1)

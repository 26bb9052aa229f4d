"""``rewindfs mcp`` used by the real Claude Code CLI: set up by ``rewindfs setup claude`` alone
(hooks, the project's ``.mcp.json`` and its approval in the project settings), in a real mount.
The model is scripted (fake_api.py): in its second turn it calls the server's tools as a model
would, by the names the CLI gives them (``mcp__rewindfs__<tool>``); the CLI starts the server,
passes the calls and hands the answers back to the model.

Checked: the answers the model gets (its session's turns with their prompts and who changed
what; a dry run; the rewind) and the tree: the agent takes its own first turn back, shell work
included, and a user's edit since is a conflict that stays as the user made it.

    bash tests/clients/install.sh
    REWINDFS_BIN=target/debug/rewindfs target/clients/venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/clients/test_mcp_claude.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fake_api import FakeAPI  # noqa: E402
from rewindfs_compare import Mount, rewindfs_bin  # noqa: E402
from rewindfs_compare import require as need  # noqa: E402
from run_session import offline_env  # noqa: E402
from test_plugin import _cli  # noqa: E402


def require() -> str:
    """The Claude Code CLI; skips (outside CI) or fails (CI=true), naming what is missing."""
    cli = _cli()
    need(None if cli else "no Claude Code CLI: run bash tests/clients/install.sh (or set CLAUDE_CLI)")
    assert cli
    return cli


def tool_results(api: FakeAPI) -> dict[str, str]:
    """The text of every tool result the model was sent, by tool_use id."""
    out: dict[str, str] = {}
    for req in api.requests:
        body = req.get("body")
        if not isinstance(body, dict):
            continue
        for m in body.get("messages") or []:
            for b in m.get("content") if isinstance(m.get("content"), list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    c = b.get("content")
                    text = c if isinstance(c, str) else "\n".join(
                        x.get("text", "") for x in c or [] if isinstance(x, dict))
                    out[b["tool_use_id"]] = text
    return out


def test_claude_code_calls_rewindfs_mcp_to_take_back_its_own_turn(tmp_path: Path) -> None:
    cli = require()
    ws, home, store = tmp_path / "ws", tmp_path / "home", tmp_path / "store"
    ws.mkdir()
    home.mkdir()
    (ws / "a.txt").write_text("a0\n")
    (ws / "mine.txt").write_text("m0\n")
    env_setup = {**os.environ, "HOME": str(home)}
    out = subprocess.run([rewindfs_bin(), "setup", "claude", "--project", str(ws)], env=env_setup,
                         capture_output=True, text=True, check=True).stdout
    assert "registered the rewindfs MCP server" in out, out
    assert json.loads((ws / ".mcp.json").read_text())["mcpServers"]["rewindfs"]["args"] == ["mcp"]

    script: dict[str, Any] = {"turns": [
        {"match": "TURN-A", "responses": [
            [{"tool": "Write", "input": {"file_path": str(ws / "a.txt"), "content": "a1\n"}}],
            [{"tool": "Bash", "input": {"command": "echo b1 > b.txt && echo m1 > mine.txt"}}],
        ]},
        {"match": "TURN-B", "responses": [
            [{"tool": "mcp__rewindfs__checkpoints", "input": {}, "id": "toolu_list"}],
            [{"tool": "mcp__rewindfs__rewind_preview", "input": {"turn": "1"}, "id": "toolu_dry"}],
            [{"tool": "mcp__rewindfs__rewind", "input": {"turn": "1", "scope": "agent"}, "id": "toolu_refused"}],
            [{"tool": "mcp__rewindfs__rewind", "input": {"turn": "1", "scope": "tool"}, "id": "toolu_rewind"}],
        ]},
    ], "default_text": "Done."}
    api = FakeAPI(script, log_path=str(tmp_path / "api.jsonl")).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "ANTHROPIC", "REWINDFS"))}
        env.update(offline_env(api.base_url, str(home)))

        def claude(*args: str) -> dict[str, Any]:
            cmd = [cli, "-p", *args, "--output-format", "json", "--dangerously-skip-permissions"]
            r = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, f"{cmd}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            return json.loads(r.stdout)

        with Mount(str(ws), str(store)):
            sid = claude("TURN-A: write a.txt and build")["session_id"]
            assert (ws / "a.txt").read_text() == "a1\n" and (ws / "b.txt").exists()
            # The user edits a file the agent's shell changed: the agent may not overwrite it.
            subprocess.run(["setsid", "-w", "sh", "-c", "echo user > mine.txt"], cwd=ws, check=True)
            claude("--resume", sid, "TURN-B: take your first turn back")
            results = tool_results(api)
            listed = results.get("toolu_list", "")
            assert f"Session {sid} has 2 turn(s)" in listed and '#1 (' in listed, results
            assert '"TURN-A: write a.txt and build"' in listed and "tool 1" in listed, listed
            assert "A person would type: rewindfs list" in listed, listed
            dry = results.get("toolu_dry", "")
            assert "This rewind would be refused" in dry and "mine.txt (external)" in dry, dry
            refused = results.get("toolu_refused", "")
            assert "Refused, nothing was changed" in refused, refused
            assert (ws / "mine.txt").read_text() == "user\n" and (ws / "b.txt").exists()
            done = results.get("toolu_rewind", "")
            assert "restored 1 path(s)" in done and "a.txt" in done, done
            assert (ws / "a.txt").read_text() == "a0\n", "the Write taken back"
            assert (ws / "mine.txt").read_text() == "user\n", "the user's edit kept"
    finally:
        api.stop()

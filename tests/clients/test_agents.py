"""rewindfs with the real Codex CLI and Gemini CLI (npm, pinned in versions.env), set up by
``rewindfs setup codex|gemini`` alone, through a real mount.

What is real and what is scripted: both CLIs are the published, unmodified packages, run as a
user runs them (``codex exec`` / ``codex exec resume``, ``gemini -p`` / ``--resume``); their
hooks are the ones ``rewindfs setup`` writes, trusted the way setup trusts them (no
``--dangerously-bypass-hook-trust``). Only the model is scripted: ``agents/fake_models.py``
answers on 127.0.0.1 through the provider settings each CLI offers (a Codex custom provider's
``base_url``, Gemini's ``GOOGLE_GEMINI_BASE_URL``), and each run is in its own network
namespace when ``unshare -n`` works, so nothing leaves the machine.

Each session has three turns that use the CLI's own file tool (Codex ``apply_patch``, Gemini
``write_file``/``replace``) and shell commands. The tree is snapshotted before each turn. Then:
- ``rewindfs list`` has one checkpoint per turn, numbered, with its prompt; Codex's under its
  ``turn_id``;
- every change a turn made is tagged with that turn's checkpoint, the file tool's as ``tool``,
  the shell's as ``shell``;
- for every turn, ``rewind --turn N --scope agent`` gives the tree as it was before the turn
  (shell work included) and ``undo`` gives the end tree back; ``--scope tool`` restores exactly
  what the file tool wrote since, and leaves the shell's work; ``--last`` is the last turn.

    bash tests/clients/install.sh
    REWINDFS_BIN=target/debug/rewindfs target/clients/venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/clients/test_agents.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "agents"))
sys.path.insert(0, str(HERE.parent.parent / "sdk" / "python"))

from rewindfs_compare import Entry, Mount, rewindfs_bin, snapshot, tree_diff  # noqa: E402
from rewindfs_compare import require as need  # noqa: E402
from run_agent import (  # noqa: E402
    CODEX_BIN,
    GEMINI_BIN,
    Models,
    new_session_id,
    run_codex,
    run_gemini,
    write_codex_config,
    write_gemini_settings,
)

from rewindfs import RewindfsClient  # noqa: E402

# What each turn does: the file tool's writes and the shell's, on paths kept apart so what a
# tool-scope rewind must restore is plain. Paths are relative to the workspace.
PATCH_1 = "*** Begin Patch\n*** Add File: notes.txt\n+one\n+two\n*** Update File: src/app.py\n@@\n-print('v1')\n+print('v2')\n*** End Patch\n"
PATCH_2 = "*** Begin Patch\n*** Update File: notes.txt\n@@\n one\n-two\n+TWO\n*** End Patch\n"
PATCH_3 = "*** Begin Patch\n*** Delete File: src/app.py\n*** Add File: src/lib.py\n+X = 1\n*** End Patch\n"
SHELL_1 = "echo built > build.log && rm keep.txt"
SHELL_2 = "mkdir -p gen && printf 'a\\nb\\n' > gen/out.txt && chmod 600 gen/out.txt"
# Not `rm -rf`: Codex answers that one itself, without running it.
SHELL_3 = "rm gen/out.txt && rmdir gen && echo 3 >> build.log"

CODEX_SCRIPT = {"turns": [
    {"match": "TURN-1", "responses": [[{"apply_patch": PATCH_1}], [{"exec": SHELL_1}]], "final": "Turn 1 done."},
    {"match": "TURN-2", "responses": [[{"exec": SHELL_2}], [{"apply_patch": PATCH_2}]], "final": "Turn 2 done."},
    {"match": "TURN-3", "responses": [[{"apply_patch": PATCH_3}], [{"exec": SHELL_3}]], "final": "Turn 3 done."},
]}
GEMINI_SCRIPT = {"turns": [
    {"match": "TURN-1", "responses": [
        [{"call": "write_file", "args": {"file_path": "notes.txt", "content": "one\ntwo\n"}}],
        [{"call": "replace", "args": {"file_path": "src/app.py", "old_string": "print('v1')",
                                      "new_string": "print('v2')", "instruction": "bump"}}],
        [{"exec": SHELL_1}]], "final": "Turn 1 done."},
    {"match": "TURN-2", "responses": [
        [{"exec": SHELL_2}],
        [{"call": "replace", "args": {"file_path": "notes.txt", "old_string": "two",
                                      "new_string": "TWO", "instruction": "shout"}}]], "final": "Turn 2 done."},
    {"match": "TURN-3", "responses": [
        [{"call": "write_file", "args": {"file_path": "src/lib.py", "content": "X = 1\n"}}],
        [{"exec": SHELL_3}]], "final": "Turn 3 done."},
]}
PROMPTS = ["TURN-1: write the notes and bump the app\nthen build",
           "TURN-2: generate and shout",
           "TURN-3: move to lib"]
# The paths each turn's file tool writes, per CLI (Gemini's turn 3 keeps src/app.py).
TOOL_PATHS = {
    "codex": [{"notes.txt", "src/app.py"}, {"notes.txt"}, {"src/app.py", "src/lib.py"}],
    "gemini": [{"notes.txt", "src/app.py"}, {"notes.txt"}, {"src/lib.py"}],
}
SHELL_PATHS = [{"build.log", "keep.txt"}, {"gen", "gen/out.txt"}, {"gen", "gen/out.txt", "build.log"}]
# The CLIs' own settings in the workspace, written by `rewindfs setup` before the mount.
SKIP = (".claude", ".codex", ".gemini")


def require(binary: str) -> None:
    """Skips (outside CI) or fails (CI=true), naming what is missing."""
    missing = not Path(binary).exists()
    need(f"no {binary}: run tests/clients/install.sh (it installs the pinned Codex and Gemini CLIs)"
         if missing else None)


def rewindfs(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([rewindfs_bin(), *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"rewindfs {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def seed(ws: Path) -> None:
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('v1')\n")
    (ws / "keep.txt").write_text("keep me\n")


def tool_scope_tree(end: dict[str, Entry], before: dict[str, Entry], tool_paths: set[str]) -> dict[str, Entry]:
    """The tree a tool-scope rewind must leave: the end tree, with every path the file tool
    wrote since the checkpoint as it was then."""
    want = dict(end)
    for p in tool_paths:
        if p in before:
            want[p] = before[p]
        else:
            want.pop(p, None)
    return want


def check_session(cli: str, ws: Path, sock: str, snaps: list[dict[str, Entry]], end: dict[str, Entry],
                  session: str, turn_ids: list[str] | None) -> None:
    rw = RewindfsClient(sock)
    listed = [c for c in rw.request("list_checkpoints", session_id=session)["checkpoints"]
              if c["kind"] == "message"]
    assert [c["prompt"] for c in listed] == [p.splitlines()[0] for p in PROMPTS], listed
    assert all(c["bound"] for c in listed), listed
    ids = [c["uuid"] for c in listed]
    if turn_ids is not None:
        assert ids == turn_ids, f"{cli}'s checkpoints are its turn ids: {ids} vs {turn_ids}"
    table = rewindfs("list", "--socket", sock).stdout
    for n, (u, p) in enumerate(zip(ids, PROMPTS), 1):
        row = next((l for l in table.splitlines() if l.startswith(u)), "")
        assert f"#{n} {p.splitlines()[0]}" in row, table

    # Every change of turn N is tagged with turn N, by the actor that made it.
    log = rw.request("log", limit=10000)["entries"]
    for n, u in enumerate(ids):
        mine = [e for e in log if e["checkpoint"] == u]
        touched = {e["path"] for e in mine}
        changed = {p for p in set(snaps[n]) | set(snaps[n + 1] if n + 1 < len(snaps) else end)
                   if snaps[n].get(p) != (snaps[n + 1] if n + 1 < len(snaps) else end).get(p)}
        assert changed <= touched, f"{cli} turn {n + 1}: changed {changed - touched} untagged: {mine}"
        tool, shell = TOOL_PATHS[cli][n], SHELL_PATHS[n]
        assert touched <= tool | shell, f"{cli} turn {n + 1} tagged {touched - tool - shell}: {mine}"
        for e in mine:
            want = "tool" if e["path"] in tool else "shell"
            assert e["actor"] == want, f"{cli} turn {n + 1}: {e}"

    # Every turn, both scopes; undo gives the end tree back each time.
    for n in range(len(ids)):
        rewindfs("rewind", "--turn", str(n + 1), "--scope", "agent", "--socket", sock)
        got = snapshot(str(ws), SKIP)
        assert not tree_diff(snaps[n], got, f"before turn {n + 1}", "agent-scope rewind"), \
            tree_diff(snaps[n], got, f"before turn {n + 1}", "agent-scope rewind")
        rewindfs("undo", "--socket", sock)
        assert not tree_diff(end, snapshot(str(ws), SKIP), "end", "undo")

        since = set().union(*TOOL_PATHS[cli][n:])
        want = tool_scope_tree(end, snaps[n], since)
        rewindfs("rewind", ids[n], "--scope", "tool", "--socket", sock)
        got = snapshot(str(ws), SKIP)
        assert not tree_diff(want, got, "tool paths as before the turn", "tool-scope rewind"), \
            tree_diff(want, got, "tool paths as before the turn", "tool-scope rewind")
        rewindfs("undo", "--socket", sock)
        assert not tree_diff(end, snapshot(str(ws), SKIP), "end", "undo")

    rewindfs("rewind", "--last", "--scope", "agent", "--socket", sock)
    assert not tree_diff(snaps[-1], snapshot(str(ws), SKIP), "before the last turn", "--last")


def test_codex_turns_rewind_after_setup_codex(tmp_path: Path) -> None:
    require(CODEX_BIN)
    ws, home, store = tmp_path / "ws", tmp_path / "home", tmp_path / "store"
    seed(ws)
    write_codex_config(home)
    codex_home = home / "codex"
    env = {"HOME": str(home), "CODEX_HOME": str(codex_home)}
    rewindfs("setup", "codex", "--project", str(ws), env=env)
    config = (codex_home / "config.toml").read_text()
    assert "trusted_hash" in config and 'trust_level = "trusted"' in config, config
    with Models(CODEX_SCRIPT, log_path=tmp_path / "models.jsonl") as models, \
            Mount(str(ws), str(store)) as m:
        snaps, thread = [], None
        for prompt in PROMPTS:
            snaps.append(snapshot(str(ws), SKIP))
            r = run_codex(ws, home, prompt, models, thread_id=thread)
            thread = r.session_id
        end = snapshot(str(ws), SKIP)
        assert end["notes.txt"][2] == b"one\nTWO\n" and "gen" not in end, end
        # The turn ids Codex gave its hooks: in its rollout, one `turn_context` per turn.
        rollout = next((codex_home / "sessions").rglob(f"rollout-*{thread}.jsonl"))
        turn_ids = []
        for line in rollout.read_text().splitlines():
            v = json.loads(line)
            t = v.get("payload", {}).get("turn_id")
            if v.get("type") == "turn_context" and t and t not in turn_ids:
                turn_ids.append(t)
        assert len(turn_ids) == len(PROMPTS), f"one turn_context per turn in {rollout}: {turn_ids}"
        check_session("codex", ws, m.socket, snaps, end, thread, turn_ids)
    rewindfs("setup", "codex", "--project", str(ws), "--remove", env=env)
    assert "trusted_hash" not in (codex_home / "config.toml").read_text()


def test_gemini_turns_rewind_after_setup_gemini(tmp_path: Path) -> None:
    require(GEMINI_BIN)
    ws, home, store = tmp_path / "ws", tmp_path / "home", tmp_path / "store"
    seed(ws)
    write_gemini_settings(home)
    rewindfs("setup", "gemini", "--project", str(ws), env={"HOME": str(home), "GEMINI_CLI_HOME": str(home)})
    with Models(GEMINI_SCRIPT, log_path=tmp_path / "models.jsonl") as models, \
            Mount(str(ws), str(store)) as m:
        snaps, session = [], new_session_id()
        for n, prompt in enumerate(PROMPTS):
            snaps.append(snapshot(str(ws), SKIP))
            run_gemini(ws, home, prompt, models, session_id=session, resume=n > 0)
        end = snapshot(str(ws), SKIP)
        assert end["notes.txt"][2] == b"one\nTWO\n" and "gen" not in end, end
        check_session("gemini", ws, m.socket, snaps, end, session, None)


def mcp_texts(requests: list[dict]) -> str:
    """Every MCP answer the model was sent, as text (Codex's function_call_output parts, Gemini's
    functionResponse output), in order."""
    out: list[str] = []
    last = [q.get("body") or {} for q in requests if (q.get("body") or {}).get("tools")]
    body = last[-1] if last else {}
    for it in body.get("input") or []:          # Codex (Responses API)
        if it.get("type") == "function_call_output":
            o = it.get("output")
            out.append(o if isinstance(o, str) else "\n".join(p.get("text", "") for p in o or []))
    for c in body.get("contents") or []:        # Gemini
        for p in c.get("parts") or []:
            r = p.get("functionResponse")
            if r and r.get("name", "").startswith("mcp_rewindfs_"):
                out.append(json.dumps(r.get("response")))
    return "\n".join(out)


@pytest.mark.parametrize("cli", ["codex", "gemini"])
def test_the_agent_lists_and_takes_back_its_own_turn_through_rewindfs_mcp(cli: str, tmp_path: Path) -> None:
    """The MCP server `rewindfs setup` registers, started by the real CLI and called by a
    scripted model as a model calls MCP tools (Codex: search its deferred tools, then call in
    the `mcp__rewindfs` namespace; Gemini: `mcp_rewindfs_<tool>`)."""
    require(CODEX_BIN if cli == "codex" else GEMINI_BIN)
    ws, home, store = tmp_path / "ws", tmp_path / "home", tmp_path / "store"
    seed(ws)
    env = {"HOME": str(home)}
    if cli == "codex":
        write_codex_config(home)
        env["CODEX_HOME"] = str(home / "codex")
        made = [{"apply_patch": "*** Begin Patch\n*** Add File: made.txt\n+turn 1\n*** End Patch\n"}]
    else:
        write_gemini_settings(home)
        env["GEMINI_CLI_HOME"] = str(home)
        made = [{"call": "write_file", "args": {"file_path": "made.txt", "content": "turn 1\n"}}]
    out = rewindfs("setup", cli, "--project", str(ws), env=env).stdout
    assert "registered the rewindfs MCP server" in out, out
    script = {"turns": [
        {"match": "TURN-1", "responses": [made, [{"exec": "echo built > build.log"}]], "final": "Made."},
        {"match": "TURN-2", "responses": [
            [{"tool_search": "rewindfs checkpoints rewind"}],
            [{"mcp": "rewindfs", "tool": "checkpoints", "args": {}}],
            [{"mcp": "rewindfs", "tool": "rewind_preview", "args": {"turn": "1"}}],
            [{"mcp": "rewindfs", "tool": "rewind", "args": {"turn": "1", "scope": "agent"}}]],
         "final": "Taken back."}]}
    with Models(script, log_path=tmp_path / "models.jsonl") as models, Mount(str(ws), str(store)):
        before = snapshot(str(ws), SKIP)
        if cli == "codex":
            r = run_codex(ws, home, "TURN-1: make a file and build", models)
            run_codex(ws, home, "TURN-2: take turn 1 back", models, thread_id=r.session_id)
        else:
            session = new_session_id()
            run_gemini(ws, home, "TURN-1: make a file and build", models, session_id=session)
            run_gemini(ws, home, "TURN-2: take turn 1 back", models, session_id=session, resume=True)
        answers = mcp_texts(models.requests())
        assert "has 2 turn(s)" in answers and "TURN-1: make a file and build" in answers, answers
        # (the timeline's order: tool, shell, external, rewind, as `rewindfs ui` shows them)
        assert "changed: tool 1, shell 1" in answers, answers
        assert "would restore 2 path(s)" in answers and "restored 2 path(s)" in answers, answers
        assert "A person would type: rewindfs rewind" in answers, answers
        assert not tree_diff(before, snapshot(str(ws), SKIP), "before turn 1", "after the agent's rewind")

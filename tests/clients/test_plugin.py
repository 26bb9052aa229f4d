"""The Claude Code plugin (plugin/, listed in .claude-plugin/marketplace.json), loaded into the
real CLI against the scripted API (fake_api.py), in a real rewindfs mount: its hooks make a
checkpoint per prompt and tell tool writes from shell writes, and its command lists the
checkpoints with their prompts, dry-runs a rewind and rewinds.

Needs root, /dev/fuse, a built rewindfs ($REWINDFS_BIN, else target/debug/rewindfs) and the CLI
(`bash tests/clients/install.sh`; $CLAUDE_CLI, else target/clients/env.sh). Outside CI a missing
one skips, saying what; with CI=true (or REQUIRE_FUSE=1) it fails. The plugin finds rewindfs on
PATH, as a user's install puts it there.

Run: target/clients/venv/bin/python -m pytest -q tests/clients/test_plugin.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from fake_api import FakeAPI  # noqa: E402
from run_session import offline_env  # noqa: E402

PLUGIN = REPO / "plugin"
COMMAND = "/rewindfs:rewindfs"  # a plugin's commands are named <plugin>:<command>


def _required() -> bool:
    return os.environ.get("CI") in ("true", "1") or os.environ.get("REQUIRE_FUSE") == "1"


def _cli() -> Optional[str]:
    cli = os.environ.get("CLAUDE_CLI")
    env_sh = Path(os.environ.get("REWINDFS_CLIENTS_DIR") or REPO / "target" / "clients") / "env.sh"
    if not cli and env_sh.exists():
        for line in env_sh.read_text().splitlines():
            if line.startswith("CLAUDE_CLI="):
                cli = line.split("=", 1)[1].strip("'\"")
    return cli if cli and os.access(cli, os.X_OK) else None


@pytest.fixture
def env(tmp_path: Path):
    """A mounted workspace, the CLI's offline environment and the tools to drive it."""
    binary = os.environ.get("REWINDFS_BIN") or str(REPO / "target" / "debug" / "rewindfs")
    cli = _cli()
    problem = None
    if not os.access(binary, os.X_OK):
        problem = f"no rewindfs binary at {binary} (cargo build, or set REWINDFS_BIN)"
    elif not Path("/dev/fuse").exists() or os.geteuid() != 0:
        problem = "/dev/fuse is missing or we are not root"
    elif not cli:
        problem = "no Claude Code CLI: run bash tests/clients/install.sh (or set CLAUDE_CLI)"
    if problem:
        if _required():
            pytest.fail(f"the plugin test needs it (CI=true or REQUIRE_FUSE=1): {problem}")
        pytest.skip(problem)
    ws, store, home = tmp_path / "ws", tmp_path / "store", tmp_path / "home"
    for d in (ws, home):
        d.mkdir()
    (ws / "a.txt").write_text("a0\n")
    (ws / "b.txt").write_text("b0\n")
    subprocess.run([binary, "mount", str(ws), "--store", str(store)], check=True)
    try:
        yield Env(cli, binary, ws, home, tmp_path)
    finally:
        subprocess.run([binary, "umount", str(ws)], check=False)


class Env:
    def __init__(self, cli: str, binary: str, ws: Path, home: Path, tmp: Path):
        self.cli, self.binary, self.ws, self.home, self.tmp = cli, binary, ws, home, tmp
        self.api: Optional[FakeAPI] = None

    def serve(self, script: dict) -> None:
        self.api = FakeAPI(script, log_path=str(self.tmp / "api.jsonl")).start()

    def cli_env(self) -> dict[str, str]:
        assert self.api
        e = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "ANTHROPIC", "REWINDFS"))}
        e.update(offline_env(self.api.base_url, str(self.home)))
        # The plugin finds rewindfs on PATH, as an installed one is.
        e["PATH"] = f"{Path(self.binary).parent}:{e.get('PATH', '/usr/bin:/bin')}"
        return e

    def claude(self, *args: str, plugin_dir: bool = True, bypass: bool = True) -> dict[str, Any]:
        """`claude -p ARGS`; `bypass=False` runs in the default permission mode, where a shell line
        of a command runs only if the command's allowed-tools allow it."""
        cmd = [self.cli, "-p", *args, "--output-format", "json"]
        if bypass:
            cmd.append("--dangerously-skip-permissions")
        if plugin_dir:
            cmd += ["--plugin-dir", str(PLUGIN)]
        r = subprocess.run(cmd, cwd=self.ws, env=self.cli_env(), capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, f"{cmd} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        out = json.loads(r.stdout)
        assert not out.get("is_error"), out
        return out

    def rewindfs(self, *args: str) -> str:
        r = subprocess.run([self.binary, *args], cwd=self.ws, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"rewindfs {args}: {r.stderr}"
        return r.stdout

    def prompt_seen(self, marker: str) -> str:
        """The text of the last prompt the model was sent that contains `marker` (what the
        CLI made of a slash command, with the output of its shell lines)."""
        assert self.api
        for req in reversed(self.api.requests):
            body = req.get("body")
            if not isinstance(body, dict):
                continue
            for m in reversed(body.get("messages") or []):
                content = m.get("content")
                blocks = [content] if isinstance(content, str) else [
                    b.get("text", "") for b in content or [] if isinstance(b, dict)]
                text = "\n".join(b for b in blocks if isinstance(b, str))
                if m.get("role") == "user" and marker in text:
                    return text
        raise AssertionError(f"no prompt with {marker!r} reached the model")


def work_script(ws: Path) -> dict:
    # The command's prompt shows `rewindfs list`, which shows the work prompts' first lines: its
    # turn comes first, so that their markers do not match it.
    return {
        "turns": [
            {"match": COMMAND.lstrip("/"), "responses": [["Here is what rewindfs said."]]},
            {"match": "TURN-A", "responses": [
                [{"tool": "Write", "input": {"file_path": str(ws / "a.txt"), "content": "a1\n"}}],
                [{"tool": "Bash", "input": {"command": "echo b1 > b.txt && mkdir d && echo c > d/c.txt"}}],
            ]},
            {"match": "TURN-B", "responses": [
                [{"tool": "Edit", "input": {"file_path": str(ws / "a.txt"), "old_string": "a1", "new_string": "a2"}}],
                [{"tool": "Bash", "input": {"command": "rm b.txt"}}],
            ]},
        ],
        "default_text": "Done.",
    }


def test_plugin_hooks_checkpoint_each_prompt_and_its_command_lists_dry_runs_and_rewinds(env: Env):
    t0 = time.monotonic()
    env.serve(work_script(env.ws))
    sid = env.claude("TURN-A: write a.txt, then change b.txt in the shell")["session_id"]
    env.claude("--resume", sid, "TURN-B: edit a.txt, remove b.txt")
    assert (env.ws / "a.txt").read_text() == "a2\n" and not (env.ws / "b.txt").exists()

    # The hooks: a checkpoint per prompt, with its prompt, bound to the CLI's message uuid.
    cps = [c for c in json.loads(env.rewindfs("list", "--json"))["checkpoints"] if c["kind"] == "message"]
    assert [c["prompt"].split(":")[0] for c in cps] == ["TURN-A", "TURN-B"], cps
    assert all(c["sessionId"] == sid and c["bound"] for c in cps), cps
    transcript = next((env.home / ".claude" / "projects").glob(f"*/{sid}.jsonl"))
    typed = [json.loads(l) for l in transcript.read_text().splitlines()]
    typed = [e["uuid"] for e in typed if e.get("type") == "user" and isinstance(e["message"]["content"], str)]
    assert [c["uuid"] for c in cps] == typed, "the checkpoints are the prompts' message uuids"
    turn_a, turn_b = (c["uuid"] for c in cps)
    # ... and the span of each tool call: the Write's and Edit's changes are `tool`, Bash's `shell`.
    log = [json.loads(l) for l in env.rewindfs("log", "--json").splitlines()]
    actors = {(e["actor"], e["path2"] or e["path"], e["checkpoint"]) for e in log}
    assert ("tool", "a.txt", turn_a) in actors and ("tool", "a.txt", turn_b) in actors, log
    assert ("shell", "b.txt", turn_a) in actors and ("shell", "d/c.txt", turn_a) in actors, log
    assert ("shell", "b.txt", turn_b) in actors, log
    assert all(e["toolUseId"] for e in log if e["actor"] == "tool"), log

    # The command, in the default permission mode (its allowed-tools let its own shell line run),
    # without arguments: the turns in the timeline's words (as `rewindfs ui` and the MCP server
    # say them), with their ids.
    env.claude("--resume", sid, COMMAND, bypass=False)
    seen = env.prompt_seen("$ rewindfs list --turns")
    assert turn_a in seen and turn_b in seen, seen
    assert '#1 (' in seen and '"TURN-A: write a.txt' in seen and '#2 (' in seen, seen
    assert "changed: tool 1, shell 3" in seen, seen

    # A turn named by its number, as the list shows it: a dry run of --turn N.
    env.claude("--resume", sid, f"{COMMAND} 1 all", bypass=False)
    seen = env.prompt_seen("$ rewindfs rewind --turn 1 --scope all --dry-run")
    assert "would change 4 file(s)" in seen, seen

    # With a uuid and a scope: a dry run, which changes nothing.
    env.claude("--resume", sid, f"{COMMAND} {turn_a} all", bypass=False)
    seen = env.prompt_seen(f"$ rewindfs rewind {turn_a} --scope all --dry-run")
    assert "would change 4 file(s)" in seen and "rewindfs rewind " + turn_a + " --scope all\n" not in seen, seen
    assert (env.ws / "a.txt").read_text() == "a2\n" and not (env.ws / "b.txt").exists()

    # The default scope, tool, leaves what the shell did.
    env.claude("--resume", sid, f"{COMMAND} {turn_a}", bypass=False)
    seen = env.prompt_seen(f"$ rewindfs rewind {turn_a} --scope tool --dry-run")
    assert "would change 1 file(s)" in seen and "a.txt" in seen, seen

    # With --yes: the dry run, then the rewind.
    env.claude("--resume", sid, f"{COMMAND} {turn_a} all --yes", bypass=False)
    seen = env.prompt_seen(f"$ rewindfs rewind {turn_a} --scope all\n")
    assert "changed 4 file(s)" in seen and "(exit status 1)" not in seen, seen
    assert (env.ws / "a.txt").read_text() == "a0\n"
    assert (env.ws / "b.txt").read_text() == "b0\n"
    assert not (env.ws / "d").exists()
    print(f"plugin session: {time.monotonic() - t0:.1f} s")


def test_plugin_installs_from_the_repository_marketplace_and_its_hooks_fire(env: Env):
    env.serve({"turns": [{"match": "TURN-M", "responses": [
        [{"tool": "Write", "input": {"file_path": str(env.ws / "m.txt"), "content": "m\n"}}]]}],
        "default_text": "Done."})
    e = env.cli_env()
    # The repository as a marketplace (a clone of it, as `claude plugin marketplace add PATH`
    # takes one; `owner/repo` or an https URL clones it first), then the plugin from it.
    for args in (["plugin", "marketplace", "add", str(REPO)], ["plugin", "install", "rewindfs@rewindfs"]):
        r = subprocess.run([env.cli, *args], env=e, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"claude {args}: {r.stdout}{r.stderr}"
    r = subprocess.run([env.cli, "plugin", "list"], env=e, capture_output=True, text=True, timeout=60)
    assert "rewindfs@rewindfs" in r.stdout and "enabled" in r.stdout, r.stdout

    sid = env.claude("TURN-M: write m.txt", plugin_dir=False)["session_id"]
    assert (env.ws / "m.txt").read_text() == "m\n"
    cps = [c for c in json.loads(env.rewindfs("list", "--json"))["checkpoints"] if c["kind"] == "message"]
    assert [(c["sessionId"], c["prompt"]) for c in cps] == [(sid, "TURN-M: write m.txt")], cps
    log = [json.loads(l) for l in env.rewindfs("log", "--json").splitlines()]
    assert any(e["actor"] == "tool" and "m.txt" in (e["path2"] or e["path"]) for e in log), log


def test_plugin_warns_at_session_start_when_unprotected(env: Env):
    """Outside a mount, or without the binary, the session's changes would not be recorded: the
    plugin's SessionStart hook says so (the TUI shows it under the banner)."""
    env.serve({"turns": [], "default_text": "Done."})
    outside = env.tmp / "not-mounted"
    outside.mkdir()
    e = env.cli_env()
    no_binary = {**e, "PATH": "/usr/bin:/bin"}
    for cwd, cli_env, says in ((outside, e, f"{outside} is not inside a rewindfs mount"),
                               (env.ws, no_binary, "the rewindfs binary is not on PATH"),
                               (env.ws, e, None)):
        cmd = [env.cli, "-p", "hello", "--output-format", "stream-json", "--verbose",
               "--dangerously-skip-permissions", "--plugin-dir", str(PLUGIN)]
        r = subprocess.run(cmd, cwd=cwd, env=cli_env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        events = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        starts = [ev for ev in events if ev.get("subtype") == "hook_response" and ev.get("hook_event") == "SessionStart"]
        assert len(starts) == 1, events
        if says is None:
            assert starts[0]["stdout"] == "" and starts[0]["exit_code"] == 0, starts
        else:
            message = json.loads(starts[0]["stdout"])["systemMessage"]
            assert message.startswith("rewindfs: ") and says in message, message

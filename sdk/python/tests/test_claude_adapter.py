"""The adapter's hooks and the uuid-before-prompt path, driven by a stand-in agent process that
behaves like the CLI: it reads stream-json user messages on stdin, writes files in-process
(temp file + rename, like Write/Edit) and runs shell commands as child processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rewindfs import AsyncRewindfsClient
from rewindfs.claude import send_prompt, tool_span_hooks

STAND_IN = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    sock = sys.argv[1]
    import socket as s
    def status():
        c = s.socket(s.AF_UNIX); c.connect(sock); f = c.makefile('rw')
        f.write(json.dumps({"type": "control_request", "request_id": "a", "request": {"subtype": "status"}}) + "\\n"); f.flush()
        return json.loads(f.readline())["response"]["response"]
    for line in sys.stdin:
        msg = json.loads(line)
        text = msg["message"]["content"]
        # The checkpoint must already be this message's when the agent first sees it.
        print(json.dumps({"uuid": msg["uuid"], "current": status()["currentCheckpoint"]}), flush=True)
        name, body = text.split(":", 1)
        tmp = f"{name}.tmp.{os.getpid()}.{int(time.time()*1000)}"
        with open(tmp, "w") as f:
            f.write(body)
        os.rename(tmp, name)                                   # the Write tool, in-process
        subprocess.run(["bash", "-c", f"echo shell >> shell-{name}"], check=True)   # Bash
        print(json.dumps({"done": name}), flush=True)
    """
)


class FakeSDKClient:
    """Stands in for ClaudeSDKClient: query() forwards stream-json user messages to the agent,
    and the hooks run in this (host) process, as the SDK runs them."""

    def __init__(self, proc: subprocess.Popen, hooks) -> None:
        self.proc = proc
        self.pre, self.post = hooks
        self.seen: list[dict] = []

    async def query(self, prompt, session_id: str = "default") -> None:
        async for msg in prompt:
            name = msg["message"]["content"].split(":", 1)[0]
            target = str(Path.cwd() / name)
            await self.pre({"tool_name": "Write", "tool_input": {"file_path": target}}, f"toolu_{name}", None)
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            self.seen.append(json.loads(self.proc.stdout.readline()))
            assert json.loads(self.proc.stdout.readline()) == {"done": name}
            await self.post({"tool_name": "Write", "tool_input": {"file_path": target}}, f"toolu_{name}", None)


def test_prompts_begin_their_checkpoint_first_and_turns_rewind(mounted, monkeypatch: pytest.MonkeyPatch) -> None:
    proj, store = mounted
    monkeypatch.chdir(proj)
    sock = store / "control.sock"

    async def main() -> None:
        rw = await AsyncRewindfsClient.connect(sock)
        agent = subprocess.Popen([sys.executable, "-c", STAND_IN, str(sock)], cwd=proj, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            await rw.register_agent(agent.pid)
            client = FakeSDKClient(agent, tool_span_hooks(rw))
            t1 = await send_prompt(client, rw, "sess", "a.txt:first\n")
            t2 = await send_prompt(client, rw, "sess", "b.txt:second\n")
            assert [s["uuid"] for s in client.seen] == [t1, t2]
            assert all(s["uuid"] == s["current"] for s in client.seen), client.seen
            # Tool scope (the SDK's): the Write of b.txt goes, the shell's file stays.
            r = await rw.rewind_files(t2)
            assert r.filesChanged == [str(proj / "b.txt")]
            assert not (proj / "b.txt").exists() and (proj / "shell-b.txt").exists()
            # Agent scope: the shell's work goes too.
            r = await rw.rewind_files(t1, scope="agent")
            assert sorted(r.filesChanged) == [str(proj / n) for n in ("a.txt", "shell-a.txt", "shell-b.txt")]
            assert sorted(p.name for p in proj.iterdir()) == []
        finally:
            agent.stdin.close()
            agent.wait()
            await rw.close()

    asyncio.run(main())


class _Recorder:
    """Stands in for AsyncRewindfsClient: records tool_use requests."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def tool_use(self, phase: str, tool_name: str, tool_use_id: str, file_path=None, session_id=None) -> dict:
        self.calls.append((phase, tool_name, tool_use_id, file_path))
        self.sessions = getattr(self, "sessions", []) + [session_id]
        return {}


def test_spans_close_at_post_tool_use_failure_and_when_a_refused_tool_left_one_open() -> None:
    from rewindfs.claude import span_hooks

    async def main() -> None:
        # PostToolUse and PostToolUseFailure close their own span.
        rw = _Recorder()
        h = span_hooks(rw)  # type: ignore[arg-type]
        await h["PreToolUse"]({"tool_name": "Write", "tool_input": {"file_path": "/p/a"}}, "t1", None)
        await h["PostToolUse"]({"tool_name": "Write", "tool_input": {"file_path": "/p/a"}}, "t1", None)
        await h["PreToolUse"]({"tool_name": "Bash", "tool_input": {"command": "false"}}, "t2", None)
        await h["PostToolUseFailure"]({"tool_name": "Bash", "tool_input": {"command": "false"}}, "t2", None)
        await h["Stop"]({"hook_event_name": "Stop"}, "random", None)
        assert rw.calls == [("pre", "Write", "t1", "/p/a"), ("post", "Write", "t1", "/p/a"),
                            ("pre", "Bash", "t2", None), ("post", "Bash", "t2", None)]
        # An Edit refused on a symlink gets PreToolUse only: the next PreToolUse, the next
        # prompt or Stop closes its span.
        for closer in ("PreToolUse", "UserPromptSubmit", "Stop"):
            rw = _Recorder()
            h = span_hooks(rw)  # type: ignore[arg-type]
            await h["PreToolUse"]({"tool_name": "Edit", "tool_input": {"file_path": "/p/link"}}, "e1", None)
            await h[closer]({"tool_name": "Bash", "tool_input": {"command": "echo >> link"}}, "b1", None)
            assert rw.calls[:2] == [("pre", "Edit", "e1", "/p/link"), ("post", "Edit", "e1", None)], closer

    asyncio.run(main())


def test_spans_carry_the_hosts_session_when_given() -> None:
    from rewindfs.claude import span_hooks

    async def main() -> None:
        for session in (None, "host-a"):
            rw = _Recorder()
            h = span_hooks(rw, session)  # type: ignore[arg-type]
            await h["PreToolUse"]({"tool_name": "Write", "tool_input": {"file_path": "/p/a"}}, "t1", None)
            await h["PostToolUse"]({"tool_name": "Write", "tool_input": {"file_path": "/p/a"}}, "t1", None)
            assert rw.sessions == [session, session]

    asyncio.run(main())

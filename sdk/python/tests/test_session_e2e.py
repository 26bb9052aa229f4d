"""End to end: a scripted session of several turns through the mount by a stand-in agent that
behaves like the CLI (Write in-process via temp file + rename, Bash as child processes), then
rewind_files to every turn with each scope, checked against the expected trees, each followed
by an undo that must give back the final tree."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from rewindfs import AsyncRewindfsClient
from rewindfs.claude import send_prompt, tool_span_hooks

AGENT = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    for line in sys.stdin:
        steps = json.loads(json.loads(line)["message"]["content"])
        for kind, *args in steps:
            if kind == "write":
                name, body = args
                os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
                tmp = f"{name}.tmp.{os.getpid()}.{int(time.time() * 1000)}"
                with open(tmp, "w") as f:
                    f.write(body)
                os.rename(tmp, name)
            else:
                subprocess.run(["bash", "-c", args[0]], check=True)
        print("done", flush=True)
    """
)

TURNS = [
    [["write", "a.txt", "1\n"], ["shell", "mkdir -p d && echo x > d/s.txt && echo keep > k.txt"]],
    [["write", "a.txt", "2\n"], ["write", "b.txt", "b\n"], ["shell", "echo y >> a.txt; rm d/s.txt; chmod 600 k.txt"]],
    [["shell", "mv b.txt c.txt && ln -s c.txt link"], ["write", "c.txt", "3\n"], ["write", "sub/new.txt", "n\n"]],
]


def tree(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode & 0o7777)
            else:
                out[rel] = ("file", st.st_mode & 0o7777, p.read_bytes())
    return out


class StandInClient:
    def __init__(self, proc: subprocess.Popen, root: Path, hooks, turns_seen: list) -> None:
        self.proc, self.root = proc, root
        self.pre, self.post = hooks
        self.turns_seen = turns_seen

    async def query(self, prompt, session_id: str = "default") -> None:
        async for msg in prompt:
            steps = json.loads(msg["message"]["content"])
            # The SDK calls the hooks around each tool call; model that per Write.
            for kind, *args in steps:
                if kind == "write":
                    await self.pre({"tool_name": "Write", "tool_input": {"file_path": str(self.root / args[0])}}, None, None)
            # Record, per path, the first tool change and the state just before it.
            self.turns_seen.append(tree(self.root))
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline().strip() == "done"
            for kind, *args in steps:
                if kind == "write":
                    await self.post({"tool_name": "Write", "tool_input": {"file_path": str(self.root / args[0])}}, None, None)


def expected_tool(turn: int, snapshots: list[dict], final: dict) -> dict:
    """The SDK's rule (docs/design.md §2) from the recorded states, for files written by a tool."""
    first: dict[str, int] = {}
    before_first: dict[str, object] = {}
    # state just before a Write in turn t = state after the shell steps before it in that turn;
    # our turns put a file's first Write either before any shell step touching it or after
    # (turn 3: mv then Write c.txt), so replay per turn.
    for t, steps in enumerate(TURNS):
        for kind, *args in steps:
            if kind == "write" and args[0] not in first:
                first[args[0]] = t
    # c.txt was created by the shell's mv just before its first Write, with b.txt's content.
    for name, t in first.items():
        before_first[name] = ("file", 0o644, b"b\n") if name == "c.txt" else snapshots[t].get(name)
    out = dict(final)
    for name, t in first.items():
        target = snapshots[turn].get(name) if t < turn else before_first[name]
        cur = final.get(name)
        if (target and target[0] == "link") or (cur and cur[0] == "link"):
            continue
        if target is None:
            if cur and cur[0] == "file":
                del out[name]
        else:
            parts = name.split("/")[:-1]
            for i in range(len(parts)):
                out.setdefault("/".join(parts[: i + 1]), ("dir", 0o755))
            out[name] = target
    return out


def test_every_turn_rewinds_with_every_scope(mounted, monkeypatch) -> None:
    proj, store = mounted
    monkeypatch.chdir(proj)

    async def main() -> None:
        rw = await AsyncRewindfsClient.connect(store / "control.sock")
        agent = subprocess.Popen([sys.executable, "-c", AGENT], cwd=proj, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            await rw.register_agent(agent.pid)
            snapshots: list[dict] = []
            client = StandInClient(agent, proj, tool_span_hooks(rw), snapshots)
            turns = [await send_prompt(client, rw, "e2e", json.dumps(steps)) for steps in TURNS]
            final = tree(proj)
            for i, turn in enumerate(turns):
                for scope in ("all", "agent", "tool"):
                    want = expected_tool(i, snapshots, final) if scope == "tool" else snapshots[i]
                    dry = await rw.rewind_files(turn, dry_run=True, scope=scope)
                    res = await rw.rewind_files(turn, scope=scope)
                    assert dry.filesChanged == res.filesChanged, (i, scope)
                    assert tree(proj) == want, (i, scope)
                    if res.filesChanged:
                        await rw.undo_rewind()
                    assert tree(proj) == final, ("undo", i, scope)
        finally:
            agent.stdin.close()
            agent.wait()
            await rw.close()

    asyncio.run(main())

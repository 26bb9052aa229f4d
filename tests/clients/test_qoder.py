"""rewindfs with the real Qoder Agent SDK (PyPI ``qoder-agent-sdk``, versions.env), through a real
mount, against the Qoder CLI's own file history.

What is real and what is scripted: the SDK package is the real, unmodified one (its
``QoderSDKClient``, transport, hook dispatch, control-request matching, message parsing and the
exception its ``rewind_files`` raises). The CLI is ``qoder/fake_qodercli.py``, written from
qodercli 1.1.76's wire (``qoder/WIRE.md``): the real CLI refuses any prompt without an online
Qoder login. The scripted CLI runs each turn's tools for real in its cwd (Write/Edit in its own
process, Bash as ``sh -c`` children, so under the mount they are the agent's ``tool`` and
``shell`` writes) and keeps the CLI's file history as the binary does, so its own
``rewind_files`` is the oracle for rewindfs's tool scope.

For each scenario (``qoder/scenarios/*.json``) the session runs through ``rewindfs.qoder``
(``with_rewindfs``, ``register_cli``, ``send_prompt``); the tree is snapshotted before each turn.
At the end, for every turn: the CLI's and rewindfs's dry runs must be equal to the letter (keys,
their order, values); rewindfs's real tool-scope rewind must give the tree the CLI's own real
rewind gives (and answer as it does), ``undo`` must give the end tree back, and the agent scope
must give the tree as it was before the turn, shell work included. Unknown ids, tool-result ids,
an injected prompt, a rewind after the client has closed and a custom ``Transport`` are covered
too.

    bash tests/clients/install.sh
    REWINDFS_BIN=target/debug/rewindfs target/clients/venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/clients/test_qoder.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "sdk" / "python"))

from rewindfs_compare import Mount, rewindfs_bin, snapshot, sync_to, tree_diff  # noqa: E402

from rewindfs import AsyncRewindfsClient, RewindfsError  # noqa: E402

FAKE = HERE / "qoder" / "fake_qodercli.py"
SCENARIOS = HERE / "qoder" / "scenarios"
SESSION = "qoder-session"


def require() -> None:
    """Skips (outside CI) or fails (CI=true, REQUIRE_FUSE=1), naming what is missing."""
    import importlib.util

    problem = None
    if importlib.util.find_spec("qoder_agent_sdk") is None:
        problem = "qoder-agent-sdk is not importable: run tests/clients/install.sh and use its venv's python"
    elif not Path(rewindfs_bin()).exists():
        problem = f"no rewindfs binary at {rewindfs_bin()}: cargo build (or set REWINDFS_BIN)"
    elif os.geteuid() != 0 or not Path("/dev/fuse").exists():
        problem = "mounting needs root and /dev/fuse"
    if problem:
        if os.environ.get("CI") in ("true", "1") or os.environ.get("REQUIRE_FUSE") == "1":
            pytest.fail(f"required (CI=true or REQUIRE_FUSE=1): {problem}")
        pytest.skip(problem)


def options(ws: str, base: str, scenario: Path, **extra: Any) -> Any:
    from qoder_agent_sdk import QoderAgentOptions
    from qoder_agent_sdk.auth import qodercli_auth

    env = {
        "FAKE_QODER_SCENARIO": str(scenario),
        # The CLI's own backups, outside the workspace (with_rewindfs warns otherwise).
        "QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT": os.path.join(base, "qoder-history"),
        # Its user settings and transcripts: this test's own, not the machine's ~/.qoder.
        "QODER_CONFIG_DIR": os.path.join(base, "qoder-config"),
    }
    return QoderAgentOptions(cwd=ws, cli_path=str(FAKE), auth=qodercli_auth(), env=env, **extra)


def setup_tree(ws: str, files: dict[str, str]) -> None:
    for rel, content in files.items():
        p = os.path.join(ws, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(content)


async def drain(client: Any) -> list[str]:
    """Reads the turn's messages to its result; returns the uuids of its tool-result messages
    (ids a rewind must not take for a user message's)."""
    from qoder_agent_sdk import UserMessage

    out = []
    async for msg in client.receive_response():
        if isinstance(msg, UserMessage) and isinstance(msg.content, list) and getattr(msg, "uuid", None):
            if any(type(b).__name__ == "ToolResultBlock" for b in msg.content):
                out.append(msg.uuid)
    return out


async def cli_answer(call: Any) -> dict:
    """An answer of the CLI's (the real SDK raising is part of it)."""
    try:
        return {"raised": False, "answer": await call}
    except Exception as e:  # noqa: BLE001 - the SDK raises a bare Exception
        return {"raised": True, "error": str(e), "type": type(e).__name__}


async def mine_answer(call: Any) -> dict:
    try:
        r = await call
        return {"raised": False, "answer": dict(r)}
    except Exception as e:  # noqa: BLE001
        return {"raised": True, "error": str(e), "type": type(e).__name__}


def same(cli: dict, mine: dict) -> list[str]:
    """Where rewindfs's Qoder answer differs from the CLI's: raised or not, then the keys in
    order and their values."""
    if cli["raised"] != mine["raised"]:
        return [f"CLI {'raised' if cli['raised'] else 'answered'} {cli}, rewindfs {mine}"]
    if cli["raised"]:
        return [] if cli["error"] == mine["error"] else [f"error: CLI {cli['error']!r} | rewindfs {mine['error']!r}"]
    a, b = cli["answer"], mine["answer"]
    out = []
    if list(a) != list(b):
        out.append(f"keys: CLI {list(a)} | rewindfs {list(b)}")
    for k in a:
        if a[k] != b.get(k, "<missing>"):
            out.append(f"{k}: CLI {json.dumps(a[k])} | rewindfs {json.dumps(b.get(k, '<missing>'))}")
    return out


def times(ws: str) -> dict[str, int]:
    """Every regular file's mtime (ns): the CLI's changed-file test reads it (a file older than
    its backup is taken as unchanged), so the end state is put back with its times too."""
    out = {}
    for root, _, files in os.walk(ws):
        for f in files:
            p = os.path.join(root, f)
            out[p] = os.lstat(p).st_mtime_ns
    return out


def back_to(ws: str, end: dict, end_times: dict[str, int]) -> None:
    """The end tree again, with its files' times (a plain copy through the mount)."""
    sync_to(ws, end)
    for p, t in end_times.items():
        if os.path.exists(p) and os.lstat(p).st_mtime_ns != t:
            os.utime(p, ns=(t, t), follow_symlinks=False)


async def session(name: str) -> list[str]:
    """Runs scenario ``name`` and compares; returns the problems found (empty: equal)."""
    from qoder_agent_sdk import QoderSDKClient

    from rewindfs import qoder

    scenario = SCENARIOS / f"{name}.json"
    spec = json.loads(scenario.read_text())
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rwfs-qoder-") as base:
        ws, store = os.path.join(base, "ws"), os.path.join(base, "store")
        os.mkdir(ws)
        setup_tree(ws, spec.get("setup", {}))
        with Mount(ws, store) as m:
            rw = await AsyncRewindfsClient.connect(m.socket)
            opts = qoder.with_rewindfs(options(ws, base, scenario), rw, session_id=SESSION)
            before: list[dict] = []
            turns: list[str] = []
            tool_results: list[str] = []
            async with QoderSDKClient(opts) as client:
                pid = await qoder.register_cli(client, rw, SESSION)
                assert pid, "the CLI's pid was not found"
                for i, _ in enumerate(spec["turns"]):
                    before.append(snapshot(ws))
                    turns.append(await qoder.send_prompt(client, rw, SESSION, f"turn {i}"))
                    tool_results += await drain(client)
                end = snapshot(ws)
                end_times = times(ws)
                # 1. Dry runs, both on the end tree.
                for k, u in enumerate(turns):
                    cli = await cli_answer(client.rewind_files(u, dry_run=True))
                    mine = await mine_answer(qoder.rewind_files(rw, u, dry_run=True, session_id=SESSION))
                    problems += [f"turn {k} dry run: {d}" for d in same(cli, mine)]
                for bad in ["not-a-message", "00000000-0000-4000-8000-000000000000", *tool_results[:2]]:
                    cli = await cli_answer(client.rewind_files(bad, dry_run=True))
                    mine = await mine_answer(qoder.rewind_files(rw, bad, dry_run=True, session_id=SESSION))
                    problems += [f"unknown id {bad} dry run: {d}" for d in same(cli, mine)]
                    cli = await cli_answer(client.rewind_files(bad))
                    mine = await mine_answer(qoder.rewind_files(rw, bad, session_id=SESSION))
                    problems += [f"unknown id {bad}: {d}" for d in same(cli, mine)]
                # Qoder's `rewind` (files, both), dry, and files for real: the CLI's own answers
                # against rewindfs.qoder.rewind's (conversation from the CLI, files from rewindfs).
                for k, u in enumerate(turns):
                    for sc in ("files", "both"):
                        cli = await cli_answer(client.rewind(u, scope=sc, dry_run=True))
                        mine = await mine_answer(qoder.rewind(client, rw, u, sc, True, session_id=SESSION))
                        problems += [f"turn {k} rewind(scope={sc}) dry run: {d}" for d in same(cli, mine)]
                for bad in ["00000000-0000-4000-8000-000000000000", *tool_results[:1]]:
                    for sc in ("files", "both"):
                        cli = await cli_answer(client.rewind(bad, scope=sc, dry_run=True))
                        mine = await mine_answer(qoder.rewind(client, rw, bad, sc, True, session_id=SESSION))
                        problems += [f"rewind(scope={sc}) of {bad}: {d}" for d in same(cli, mine)]
                # 2. rewindfs's real rewinds: tool scope (its tree kept), agent scope (the tree
                # before the turn), each undone.
                tool_trees, tool_answers = [], []
                for k, u in enumerate(turns):
                    tool_answers.append(await mine_answer(qoder.rewind_files(rw, u, session_id=SESSION)))
                    tool_trees.append(snapshot(ws))
                    await rw.undo_rewind()
                    problems += [f"turn {k}: undo of tool scope: {d}" for d in tree_diff(end, snapshot(ws), "end", "after undo")]
                    back_to(ws, end, end_times)
                    back_to(ws, end, end_times)
                    # Forced: putting the end state back between checks is an external change.
                    await rw.rewind_files(u, scope="agent", force=True, session_id=SESSION)
                    problems += [f"turn {k}: agent scope: {d}" for d in tree_diff(before[k], snapshot(ws), "before the turn", "agent scope")]
                    await rw.undo_rewind()
                    problems += [f"turn {k}: undo of agent scope: {d}" for d in tree_diff(end, snapshot(ws), "end", "after undo")]
                    back_to(ws, end, end_times)
                    back_to(ws, end, end_times)
                # 3. The CLI's own real rewinds: the same answers and trees as rewindfs's; and
                # Qoder's rewind(scope="files") for real, both ways.
                for k, u in enumerate(turns):
                    cli = await cli_answer(client.rewind_files(u))
                    problems += [f"turn {k} rewind: {d}" for d in same(cli, tool_answers[k])]
                    problems += [f"turn {k} tree: {d}" for d in tree_diff(snapshot(ws), tool_trees[k], "CLI", "rewindfs")]
                    back_to(ws, end, end_times)
                    cli = await cli_answer(client.rewind(u, scope="files"))
                    cli_tree = snapshot(ws)
                    back_to(ws, end, end_times)
                    mine = await mine_answer(qoder.rewind(client, rw, u, "files", False, session_id=SESSION))
                    problems += [f"turn {k} rewind(scope=files): {d}" for d in same(cli, mine)]
                    problems += [f"turn {k} rewind(scope=files) tree: {d}" for d in tree_diff(cli_tree, snapshot(ws), "CLI", "rewindfs")]
                    await rw.undo_rewind()
                    back_to(ws, end, end_times)
                # 4. The one line for existing code: client.rewind_files answered by rewindfs.
                cli_dry = [await cli_answer(client.rewind_files(u, dry_run=True)) for u in turns]
                if [d["raised"] for d in cli_dry] != [False] * len(turns):
                    problems.append(f"the CLI's dry runs: {cli_dry}")
                qoder.use_rewindfs(client, rw, SESSION)
                for k, u in enumerate(turns):
                    mine = await mine_answer(client.rewind_files(u, dry_run=True))
                    problems += [f"turn {k} use_rewindfs dry run: {d}" for d in same(cli_dry[k], mine)]
            # 5. After the client closed (the CLI can no longer answer): rewindfs still does, as
            # the CLI did while it ran.
            for k, u in enumerate(turns):
                again = await mine_answer(qoder.rewind_files(rw, u, dry_run=True, session_id=SESSION))
                problems += [f"turn {k} after the client closed: {d}" for d in same(cli_dry[k], again)]
            await rw.close()
    return problems


NAMES = sorted(p.stem for p in SCENARIOS.glob("*.json"))


@pytest.mark.parametrize("name", NAMES)
def test_tool_scope_equals_qoders_own_rewind_and_agent_scope_undoes_shell_work(name: str) -> None:
    require()
    problems = asyncio.run(session(name))
    assert not problems, "\n".join(problems)


async def injected() -> list[str]:
    """A prompt sent while a turn runs: ``now``/``next`` refused, ``later`` held to the end."""
    from qoder_agent_sdk import QoderSDKClient

    from rewindfs import qoder

    scenario = SCENARIOS / "write_edit_chain.json"
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rwfs-qoder-") as base:
        ws, store = os.path.join(base, "ws"), os.path.join(base, "store")
        os.mkdir(ws)
        setup_tree(ws, json.loads(scenario.read_text()).get("setup", {}))
        with Mount(ws, store) as m:
            rw = await AsyncRewindfsClient.connect(m.socket)
            opts = qoder.with_rewindfs(options(ws, base, scenario), rw, session_id=SESSION)
            async with QoderSDKClient(opts) as client:
                await qoder.register_cli(client, rw, SESSION)
                first = await qoder.send_prompt(client, rw, SESSION, "turn 0")
                for priority in ("now", "next"):
                    try:
                        await qoder.send_prompt(client, rw, SESSION, "injected", priority=priority)
                        problems.append(f"priority {priority} while a turn runs was not refused")
                    except RewindfsError as e:
                        if "a turn is running" not in str(e):
                            problems.append(f"priority {priority}: {e}")
                later = asyncio.create_task(qoder.send_prompt(client, rw, SESSION, "turn 1", priority="later"))
                await drain(client)
                second = await later
                await drain(client)
                listed = [c["uuid"] for c in await rw.list_checkpoints(SESSION)]
                if listed[-2:] != [first, second]:
                    problems.append(f"checkpoints {listed}, want [..., {first}, {second}]")
            await rw.close()
    return problems


def test_a_prompt_injected_into_a_running_turn_is_refused_or_held() -> None:
    require()
    problems = asyncio.run(injected())
    assert not problems, "\n".join(problems)


class PipeTransport:
    """A custom ``Transport`` (the SDK's ABC): runs the scripted CLI as a child with pipes, as a
    host with its own process management would. No ``auth`` is needed on this path."""

    def __init__(self, argv: list[str], cwd: str, env: dict[str, str]):
        self.argv, self.cwd, self.env = argv, cwd, env
        self.proc: Any = None

    async def connect(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=self.cwd, env={**os.environ, **self.env},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )

    async def write(self, data: str) -> None:
        self.proc.stdin.write(data.encode())
        await self.proc.stdin.drain()

    async def read_messages(self) -> Any:
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return
            if line.startswith(b"{"):
                yield json.loads(line)

    async def close(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    def is_ready(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def end_input(self) -> None:
        self.proc.stdin.close()


async def custom_transport() -> list[str]:
    """The same session over a custom ``Transport``: the CLI's pid given to ``register_cli``;
    its Write is ``tool`` and its Bash ``shell``, and rewindfs's answers are the CLI's."""
    from qoder_agent_sdk import QoderAgentOptions, QoderSDKClient
    from qoder_agent_sdk._internal.transport import Transport

    from rewindfs import qoder

    scenario = SCENARIOS / "bash_and_edit_one_turn.json"
    spec = json.loads(scenario.read_text())
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rwfs-qoder-") as base:
        ws, store = os.path.join(base, "ws"), os.path.join(base, "store")
        os.mkdir(ws)
        setup_tree(ws, spec.get("setup", {}))
        with Mount(ws, store) as m:
            rw = await AsyncRewindfsClient.connect(m.socket)
            env = {
                "FAKE_QODER_SCENARIO": str(scenario),
                "QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT": os.path.join(base, "qoder-history"),
            }
            argv = [sys.executable, str(FAKE), "--print", "--output-format", "stream-json",
                    "--input-format", "stream-json", "--replay-user-messages"]
            transport = type("T", (PipeTransport, Transport), {})(argv, ws, env)
            opts = qoder.with_rewindfs(QoderAgentOptions(cwd=ws), rw, session_id=SESSION)
            async with QoderSDKClient(opts, transport=transport) as client:
                await qoder.register_cli(client, rw, SESSION, pid=transport.proc.pid)
                turns = []
                for i, _ in enumerate(spec["turns"]):
                    turns.append(await qoder.send_prompt(client, rw, SESSION, f"turn {i}"))
                    await drain(client)
                for k, u in enumerate(turns):
                    cli = await cli_answer(client.rewind_files(u, dry_run=True))
                    mine = await mine_answer(qoder.rewind_files(rw, u, dry_run=True, session_id=SESSION))
                    problems += [f"turn {k} dry run: {d}" for d in same(cli, mine)]
                actors: dict[str, set] = {}
                for e in await rw.log(limit=100):
                    actors.setdefault(e["path"], set()).add(e["actor"])
                # The Edit of h.txt is the CLI's own (tool), the appends its children's (shell).
                if actors.get("h.txt") != {"tool", "shell"} or actors.get("s.txt") != {"shell"}:
                    problems.append(f"actors: {actors}")
            await rw.close()
    return problems


def test_a_custom_transport_registers_the_cli_by_pid() -> None:
    require()
    problems = asyncio.run(custom_transport())
    assert not problems, "\n".join(problems)


async def plain_cli(name: str) -> list[str]:
    """The Qoder CLI alone, with ``rewindfs setup qoder``'s command hooks in the project's
    ``.qoder/settings.json`` (no adapter in the host): each prompt's checkpoint begins at its
    UserPromptSubmit hook under the hook's ``request_set_id`` and takes the message uuid from
    the transcript (its ``requestSetId``) at a later hook of the turn. Then rewindfs answers, by
    the uuids the CLI itself gave the prompts, as the CLI's own ``rewind_files`` does."""
    from qoder_agent_sdk import QoderSDKClient, UserMessage

    from rewindfs import qoder

    scenario = SCENARIOS / f"{name}.json"
    spec = json.loads(scenario.read_text())
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rwfs-qoder-") as base:
        ws, store = os.path.join(base, "ws"), os.path.join(base, "store")
        os.mkdir(ws)
        setup_tree(ws, spec.get("setup", {}))
        with Mount(ws, store) as m:
            out = subprocess.run([rewindfs_bin(), "setup", "qoder", "--project", ws], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            rw = await AsyncRewindfsClient.connect(m.socket)
            opts = options(ws, base, scenario, extra_args={"replay-user-messages": None})
            opts.env["REWINDFS_SOCKET"] = m.socket
            turns: list[str] = []
            async with QoderSDKClient(opts) as client:
                for i, _ in enumerate(spec["turns"]):
                    await client.query(f"turn {i}")  # the CLI picks the uuid, as for a typed prompt
                    async for msg in client.receive_response():
                        if isinstance(msg, UserMessage) and isinstance(msg.content, str) and msg.uuid:
                            turns.append(msg.uuid)
                if len(turns) != len(spec["turns"]):
                    return [f"replayed prompts: {turns}"]
                listed = [c["uuid"] for c in await rw.list_checkpoints()]
                missing = [u for u in turns if u not in listed]
                if missing:
                    problems.append(f"checkpoints not bound to the CLI's uuids: {missing} (listed {listed})")
                for k, u in enumerate(turns):
                    cli = await cli_answer(client.rewind_files(u, dry_run=True))
                    mine = await mine_answer(qoder.rewind_files(rw, u, dry_run=True))
                    problems += [f"turn {k} dry run: {d}" for d in same(cli, mine)]
            await rw.close()
    return problems


@pytest.mark.parametrize("name", ["write_edit_chain", "bash_and_edit_one_turn", "mode_only"])
def test_the_qoder_cli_alone_with_setup_qoder_hooks(name: str) -> None:
    require()
    problems = asyncio.run(plain_cli(name))
    assert not problems, "\n".join(problems)

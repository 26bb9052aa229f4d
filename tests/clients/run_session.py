#!/usr/bin/env python3
"""Run a scripted Claude Agent SDK session against the fake Messages API, offline.

Needs the venv made by ``install.sh`` (claude-agent-sdk, which bundles the CLI)::

    $REWINDFS_CLIENTS_DIR/venv/bin/python tests/clients/run_session.py SCENARIO.json \\
        --workspace /tmp/ws [--home DIR] [--log-dir DIR] [--hook-log] [--wire-log]

The workspace should be empty (scenarios create what they need with ``shell`` steps); it is
not cleaned. It starts :mod:`fake_api` on a free port, starts ``ClaudeSDKClient`` with
``enable_file_checkpointing=True`` and ``replay-user-messages`` in the workspace, runs
the scenario's steps and prints one JSON object per line for each step (see below).

Scenario (JSON)::

    {
      "settings": {...},            # optional: written to <ws>/.claude/settings.json
      "options": {...},             # optional: extra ClaudeAgentOptions keyword arguments
      "steps": [
        {"shell": "printf 'x\\n' > f.txt"},          # bash -c in the workspace
        {"prompt": "make a file", "name": "t1",        # a user turn; uuid: optional, chosen
         "uuid": "…",                                  #   here if absent and sent with the
         "responses": [[{"tool": "Write",              #   message (it becomes its uuid)
                         "input": {"file_path": "{ws}/a.txt", "content": "a\\n"}}]]},
        {"rewind": "t1", "dry_run": true},             # SDK rewind_files: by name, turn index,
        {"rewind": "t1"},                              #   NAME#N (N-th non-prompt message of
                                                       #   the turn), or a literal uuid
        {"rewind_public": "t1"},                       # through ClaudeSDKClient.rewind_files()
        {"control": {"subtype": "rewind_code", "user_message_id": "t1"}},  # any control request
        {"tree": true},                                # list the workspace (type, mode, ino, hash)
        {"restart": true}                              # close the CLI, start a new one with resume
      ]
    }

``{ws}`` in any string is replaced by the workspace's absolute path; a ``user_message_id``
in a ``control`` step may name a turn. ``"turns": [...]`` may stand for ``"steps"``.
``"match"`` on a prompt step is passed to the fake API (see fake_api.py).

Output lines: ``{"kind": "prompt", "name", "uuid", "echoed_uuid", "session_id",
"messages": [...]}`` (``echoed_uuid``: the uuid of the UserMessage the CLI replayed),
``{"kind": "rewind", "target", "uuid", "dry_run", "ok", "response" | "error"}``,
``{"kind": "shell", "cmd", "rc", "out"}``, ``{"kind": "tree", "entries": {...}}``,
``{"kind": "restart", "session_id"}``. A step may carry ``"expect"`` (see :func:`compare`);
with ``--check`` the results are compared with it (``scenarios/*.json`` carry the real
SDK's answers, recorded by ``record_expect.py``).

For rewindfs: :class:`Session` takes ``before_prompt`` (an async callback called with the
session, the uuid and the text before each prompt is sent: the place for
``rw.begin_message``), ``options_hook`` (maps the ``ClaudeAgentOptions`` before the
client starts: the place for ``with_rewindfs``), ``after_connect`` (called with the
client: the place for ``register_cli``) and ``rewinder`` (an async callable
``(uuid, dry_run) -> dict`` that replaces the SDK's own rewind).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
import uuid as _uuid
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fake_api import FakeAPI  # noqa: E402
import hook_logger  # noqa: E402

OFFLINE_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-fake-offline",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    # bypassPermissions / --dangerously-skip-permissions are refused as root without it
    "IS_SANDBOX": "1",
}


def offline_env(base_url: str, home: str) -> dict[str, str]:
    """The environment that makes the CLI talk only to the fake API (see FINDINGS.md)."""
    return {**OFFLINE_ENV, "ANTHROPIC_BASE_URL": base_url, "HOME": home}


def subst(obj: Any, ws: str) -> Any:
    if isinstance(obj, str):
        return obj.replace("{ws}", ws)
    if isinstance(obj, list):
        return [subst(x, ws) for x in obj]
    if isinstance(obj, dict):
        return {k: subst(v, ws) for k, v in obj.items()}
    return obj


def tree(ws: str, skip: tuple[str, ...] = (".claude",)) -> dict[str, dict]:
    """A listing of the workspace: per relative path its type, mode, inode, links, size, and
    content (text up to 200 bytes) or sha256 prefix, or symlink target."""
    out: dict[str, dict] = {}
    for root, dirs, files in os.walk(ws):
        dirs[:] = sorted(d for d in dirs if os.path.relpath(os.path.join(root, d), ws) not in skip)
        for name in sorted(dirs + files):
            p = os.path.join(root, name)
            rel = os.path.relpath(p, ws)
            st = os.lstat(p)
            e: dict[str, Any] = {"mode": oct(stat.S_IMODE(st.st_mode)), "ino": st.st_ino, "nlink": st.st_nlink}
            if stat.S_ISLNK(st.st_mode):
                e["type"] = "symlink"
                e["target"] = os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                e["type"] = "dir"
            elif stat.S_ISREG(st.st_mode):
                e["type"] = "file"
                data = open(p, "rb").read()
                e["size"] = len(data)
                try:
                    e["text" if len(data) <= 200 else "sha256"] = data.decode() if len(data) <= 200 else hashlib.sha256(data).hexdigest()[:16]
                except UnicodeDecodeError:
                    e["sha256"] = hashlib.sha256(data).hexdigest()[:16]
            elif stat.S_ISFIFO(st.st_mode):
                e["type"] = "fifo"
            else:
                e["type"] = "other"
            out[rel] = e
    return out


def _msg_json(m: Any) -> Any:
    try:
        d = asdict(m) if is_dataclass(m) else dict(getattr(m, "__dict__", {}) or {"repr": repr(m)})
    except Exception:  # noqa: BLE001
        d = {"repr": repr(m)}
    return {"type": type(m).__name__, **json.loads(json.dumps(d, default=repr))}


def install_wire_log(path: str) -> None:
    """Logs every line the SDK writes to the CLI's stdin and every message it reads back."""
    from claude_agent_sdk._internal.transport import subprocess_cli as sc

    cls = sc.SubprocessCLITransport
    if getattr(cls, "_wire_logged", False):
        return
    orig_write, orig_read = cls.write, cls.read_messages

    async def write(self: Any, data: str) -> None:
        with open(path, "a") as f:
            for line in data.splitlines():
                if line.strip():
                    f.write(json.dumps({"t": round(time.time(), 4), "dir": "sdk->cli", "msg": json.loads(line)}) + "\n")
        await orig_write(self, data)

    def read_messages(self: Any) -> Any:
        async def gen() -> Any:
            async for m in orig_read(self):
                with open(path, "a") as f:
                    f.write(json.dumps({"t": round(time.time(), 4), "dir": "cli->sdk", "msg": m}) + "\n")
                yield m
        return gen()

    cls.write, cls.read_messages, cls._wire_logged = write, read_messages, True


def script_of(scenario: dict, ws: str) -> dict:
    """The fake API script of a scenario: its prompt steps' responses, in order."""
    sc = subst(scenario, os.path.abspath(ws))
    steps = sc.get("steps") or sc.get("turns") or []
    return {"turns": [{"match": s.get("match"), "responses": s.get("responses", [])}
                      for s in steps if "prompt" in s],
            "default_text": sc.get("default_text", "Done.")}


def sdk_checkpoints(home: str) -> set[str]:
    """The message uuids the CLI has recorded a file-history snapshot for (its checkpoints), as
    its transcripts under ``$HOME/.claude/projects`` show them."""
    found: set[str] = set()
    for t in Path(home, ".claude", "projects").glob("*/*.jsonl"):
        with open(t, errors="replace") as f:
            for line in f:
                if '"file-history-snapshot"' not in line:
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("type") == "file-history-snapshot" and e.get("messageId"):
                    found.add(e["messageId"])
    return found


async def wait_for_sdk_checkpoints(home: str, uuids: list[str], timeout: float = 5.0) -> list[str]:
    """Waits until the CLI has recorded its checkpoint of every uuid; returns those still
    missing at the timeout. The CLI records a prompt's snapshot asynchronously: a turn without
    tool calls can end (``result``) before it is there, and a rewind asked at once answers
    ``No file checkpoint found for this message.`` (measured: 1 run in 6 of
    ``last_turn_no_tools``, the turn taking 26 ms). Its transcript is written after its state,
    so a snapshot seen there is one the CLI can rewind to."""
    deadline = time.time() + timeout
    while True:
        missing = [u for u in uuids if u not in sdk_checkpoints(home)]
        if not missing or time.time() > deadline:
            return missing
        await asyncio.sleep(0.02)


TREE_FIELDS = ("type", "mode", "text", "sha256", "size", "target", "nlink")


def compare(step: dict, r: dict, trees: dict[str, dict]) -> Optional[dict]:
    """Checks a step's result against its ``expect`` (recorded from the real SDK). Returns
    None when they agree, else ``{"expected": …, "got": …}``.

    - rewind / rewind_public / control steps: ``expect`` is the answer (``response``) of a
      success, or ``{"error": TEXT}`` for an error answer; compared exactly (``filesChanged``
      order included: the SDK lists files in the order they were first tracked).
    - tree steps: ``expect`` maps each path to the fields in TREE_FIELDS it must have (the
      whole tree must have exactly those paths); ``"same_inode": {"path": "TREE-NAME"}`` asks
      that a path keeps the inode it had in an earlier named tree step.
    - shell steps: ``expect`` is the exact output.
    """
    exp = step["expect"]
    if r["kind"] in ("rewind", "rewind_public", "control"):
        got = r.get("response") if r.get("ok") else {"error": r.get("error")}
    elif r["kind"] == "tree":
        got = {p: {k: v for k, v in e.items() if k in TREE_FIELDS and k in exp.get(p, {})}
               for p, e in r["entries"].items()}
        for path, tname in (step.get("same_inode") or {}).items():
            before = trees.get(tname, {}).get(path, {}).get("ino")
            now = r["entries"].get(path, {}).get("ino")
            if before is None or before != now:
                return {"expected": f"{path} keeps the inode it had in tree {tname!r} ({before})", "got": now}
    elif r["kind"] == "shell":
        got = r["out"]
    else:
        got = r
    return None if got == exp else {"expected": exp, "got": got}


class Session:
    """Runs one scenario. See the module doc for the callbacks."""

    def __init__(self, scenario: dict, workspace: str, home: Optional[str] = None,
                 log_dir: Optional[str] = None, hook_log: bool = False, wire_log: bool = False,
                 cli_path: Optional[str] = None, emit: Callable[[dict], None] = lambda e: print(json.dumps(e), flush=True),
                 before_prompt: Optional[Callable[["Session", str, str], Awaitable[None]]] = None,
                 options_hook: Optional[Callable[[Any], Any]] = None,
                 after_connect: Optional[Callable[[Any], Awaitable[None]]] = None,
                 rewinder: Optional[Callable[[str, bool], Awaitable[dict]]] = None,
                 stderr: Optional[Callable[[str], None]] = None):
        self.ws = os.path.abspath(workspace)
        os.makedirs(self.ws, exist_ok=True)
        self.home = home or tempfile.mkdtemp(prefix="rewindfs-home-")
        os.makedirs(self.home, exist_ok=True)
        self.log_dir = os.path.abspath(log_dir or tempfile.mkdtemp(prefix="rewindfs-session-"))
        os.makedirs(self.log_dir, exist_ok=True)
        sc = subst(scenario, self.ws)
        self.steps: list[dict] = sc.get("steps") or sc.get("turns") or []
        self.settings: Optional[dict] = sc.get("settings")
        self.extra_options: dict = sc.get("options") or {}
        self.hook_log = hook_log
        self.cli_path = cli_path
        self.emit = emit
        self.before_prompt = before_prompt
        self.options_hook = options_hook
        self.after_connect = after_connect
        self.rewinder = rewinder
        self.stderr = stderr
        self.turns: dict[str, str] = {}      # name -> uuid
        self.turn_list: list[str] = []       # uuid per prompt, in order
        self.turn_msgs: dict[str, list[str]] = {}  # name -> uuids of the turn's other messages
        self.session_id: Optional[str] = None
        self.client: Any = None
        self.trees: dict[str, dict] = {}     # named tree steps, for "same_inode" checks
        if wire_log:
            install_wire_log(os.path.join(self.log_dir, "wire.jsonl"))
        self.api = FakeAPI(script_of(scenario, self.ws), log_path=os.path.join(self.log_dir, "api.jsonl"))

    # ---- set-up ----------------------------------------------------------------------
    def write_settings(self) -> None:
        settings = dict(self.settings or {})
        if self.hook_log:
            logged = hook_logger.settings_for(os.path.join(self.log_dir, "hooks.jsonl"))
            hooks = {k: list(v) for k, v in (settings.get("hooks") or {}).items()}
            for ev, entries in logged["hooks"].items():
                hooks.setdefault(ev, []).extend(entries)
            settings["hooks"] = hooks
        if settings:
            os.makedirs(os.path.join(self.ws, ".claude"), exist_ok=True)
            with open(os.path.join(self.ws, ".claude", "settings.json"), "w") as f:
                json.dump(settings, f, indent=1)

    def options(self, resume: Optional[str] = None) -> Any:
        from claude_agent_sdk import ClaudeAgentOptions

        kw: dict[str, Any] = dict(
            cwd=self.ws,
            permission_mode="bypassPermissions",
            enable_file_checkpointing=True,
            extra_args={"replay-user-messages": None},
            setting_sources=["project"],
            env=offline_env(self.api.base_url, self.home),
        )
        if self.cli_path:
            kw["cli_path"] = self.cli_path
        if self.stderr:
            kw["stderr"] = self.stderr
        if resume:
            kw["resume"] = resume
        kw.update(self.extra_options)
        opts = ClaudeAgentOptions(**kw)
        return self.options_hook(opts) if self.options_hook else opts

    def resolve(self, target: Any) -> str:
        """A turn index, a turn name, ``NAME#N`` (the uuid of the N-th assistant or tool-result
        message of that turn, as the SDK streamed them), or a literal uuid."""
        if isinstance(target, int):
            return self.turn_list[target]
        if isinstance(target, str) and "#" in target:
            name, n = target.rsplit("#", 1)
            if name in self.turn_msgs:
                return self.turn_msgs[name][int(n)]
        return self.turns.get(target, target)

    # ---- steps -----------------------------------------------------------------------
    async def prompt(self, step: dict) -> dict:
        from claude_agent_sdk.types import ResultMessage, SystemMessage, UserMessage

        u = step.get("uuid") or str(_uuid.uuid4())
        text = step["prompt"]
        if self.before_prompt:
            await self.before_prompt(self, u, text)
        msg = {"type": "user", "message": {"role": "user", "content": text},
               "parent_tool_use_id": None, "session_id": self.session_id or "default", "uuid": u}

        async def one() -> Any:
            yield msg

        await self.client.query(one())
        echoed = None
        messages = []
        others: list[str] = []
        async for m in self.client.receive_response():
            if isinstance(m, SystemMessage) and m.subtype == "init":
                self.session_id = m.data.get("session_id", self.session_id)
            if isinstance(m, ResultMessage):
                self.session_id = m.session_id
            if isinstance(m, UserMessage) and isinstance(m.content, str) and echoed is None:
                echoed = m.uuid
            elif getattr(m, "uuid", None) and type(m).__name__ in ("UserMessage", "AssistantMessage"):
                others.append(m.uuid)
            messages.append(_msg_json(m))
        name = step.get("name") or f"t{len(self.turn_list)}"
        self.turns[name] = u
        self.turn_list.append(u)
        self.turn_msgs[name] = others
        return {"kind": "prompt", "name": name, "uuid": u, "echoed_uuid": echoed,
                "session_id": self.session_id, "messages": messages}

    async def control(self, request: dict) -> dict:
        """Sends a raw control request; returns {"ok": True, "response": …} or {"ok": False, "error": …}."""
        try:
            r = await self.client._query._send_control_request(request)
            return {"ok": True, "response": r}
        except Exception as e:  # noqa: BLE001  (the SDK raises a bare Exception with the CLI's text)
            return {"ok": False, "error": str(e)}

    async def rewind(self, target: Any, dry_run: bool) -> dict:
        u = self.resolve(target)
        if not self.rewinder:
            await wait_for_sdk_checkpoints(self.home, self.turn_list)
        if self.rewinder:
            try:
                res: dict = {"ok": True, "response": await self.rewinder(u, dry_run)}
            except Exception as e:  # noqa: BLE001
                res = {"ok": False, "error": str(e)}
        else:
            req: dict[str, Any] = {"subtype": "rewind_files", "user_message_id": u}
            if dry_run:
                req["dry_run"] = True
            res = await self.control(req)
        return {"kind": "rewind", "target": target, "uuid": u, "dry_run": dry_run, **res}

    async def rewind_public(self, target: Any) -> dict:
        u = self.resolve(target)
        try:
            r = await self.client.rewind_files(u)
            return {"kind": "rewind_public", "target": target, "uuid": u, "ok": True, "response": r}
        except Exception as e:  # noqa: BLE001
            return {"kind": "rewind_public", "target": target, "uuid": u, "ok": False, "error": str(e)}

    async def connect(self, resume: Optional[str] = None) -> None:
        from claude_agent_sdk import ClaudeSDKClient

        self.client = ClaudeSDKClient(self.options(resume))
        await self.client.connect()
        if self.after_connect:
            await self.after_connect(self.client)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.disconnect()
            self.client = None

    async def run(self) -> list[dict]:
        results = []
        self.api.start()
        try:
            self.write_settings()
            await self.connect()
            for step in self.steps:
                t0 = time.time()
                if "prompt" in step:
                    r = await self.prompt(step)
                elif "rewind" in step:
                    r = await self.rewind(step["rewind"], bool(step.get("dry_run")))
                elif "rewind_public" in step:
                    r = await self.rewind_public(step["rewind_public"])
                elif "control" in step:
                    req = dict(step["control"])
                    if "user_message_id" in req:
                        req["user_message_id"] = self.resolve(req["user_message_id"])
                    r = {"kind": "control", "request": req, **(await self.control(req))}
                elif "shell" in step:
                    p = subprocess.run(["bash", "-c", step["shell"]], cwd=self.ws, capture_output=True, text=True)
                    r = {"kind": "shell", "cmd": step["shell"], "rc": p.returncode, "out": p.stdout + p.stderr}
                elif "tree" in step:
                    r = {"kind": "tree", "entries": tree(self.ws)}
                elif "restart" in step:
                    await self.close()
                    await self.connect(resume=self.session_id)
                    r = {"kind": "restart", "session_id": self.session_id}
                else:
                    raise ValueError(f"unknown step: {step}")
                r["ms"] = round((time.time() - t0) * 1000)
                if "expect" in step:
                    r["mismatch"] = compare(step, r, self.trees)
                if r["kind"] == "tree" and step.get("name"):
                    self.trees[step["name"]] = r["entries"]
                results.append(r)
                self.emit(r)
        finally:
            await self.close()
            self.api.stop()
        return results


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Run a scripted Claude Agent SDK session offline.")
    ap.add_argument("scenario", help="scenario JSON file ('-' for stdin)")
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--home", help="HOME for the CLI (default: a new temp dir)")
    ap.add_argument("--log-dir", help="where api.jsonl, hooks.jsonl, wire.jsonl go (default: temp dir)")
    ap.add_argument("--hook-log", action="store_true", help="log every hook's stdin to LOG_DIR/hooks.jsonl")
    ap.add_argument("--wire-log", action="store_true", help="log the SDK<->CLI stream-json to LOG_DIR/wire.jsonl")
    ap.add_argument("--cli", help="path of the claude binary (default: the one bundled with the SDK)")
    ap.add_argument("--brief", action="store_true", help="omit the messages of each turn")
    ap.add_argument("--stderr", action="store_true", help="print the CLI's stderr to ours")
    ap.add_argument("--check", action="store_true",
                    help="compare steps that carry an 'expect' with it; exit 1 on any mismatch")
    ap.add_argument("--print-script", action="store_true",
                    help="only print the fake API script of the scenario (for fake_api.py --script)")
    a = ap.parse_args(argv)
    scenario = json.load(sys.stdin if a.scenario == "-" else open(a.scenario))
    if a.print_script:
        print(json.dumps(script_of(scenario, a.workspace), indent=1))
        return 0

    def emit(e: dict) -> None:
        if a.brief:
            e = {k: v for k, v in e.items() if k != "messages"}
        print(json.dumps(e), flush=True)

    s = Session(scenario, a.workspace, home=a.home, log_dir=a.log_dir, hook_log=a.hook_log,
                wire_log=a.wire_log, cli_path=a.cli, emit=emit,
                stderr=(lambda line: print(line, file=sys.stderr)) if a.stderr else None)
    print(json.dumps({"kind": "start", "workspace": s.ws, "home": s.home, "log_dir": s.log_dir}), flush=True)
    results = asyncio.run(s.run())
    if a.check:
        bad = [dict(step=i, **r["mismatch"]) for i, r in enumerate(results) if r.get("mismatch")]
        checked = sum(1 for st in s.steps if "expect" in st)
        print(json.dumps({"kind": "check", "checked": checked, "mismatches": bad}), flush=True)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

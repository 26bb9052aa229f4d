#!/usr/bin/env python3
"""rewindfs against the Claude Agent SDK's own ``rewind_files``, with the real clients, through
a real mount.

One scenario (``scenarios/*.json``: its ``prompt``, ``shell`` and ``restart`` steps make the
session; its rewind, tree and control steps are left out) is run by one integration path in a
workspace that rewindfs is mounted over, with the SDK's file checkpointing on too:

- ``py``: the Python SDK through ``rewindfs.claude`` (``with_rewindfs``, ``register_cli``,
  ``send_prompt``);
- ``ts``: the TypeScript SDK through ``rewindfs/claude`` (``withRewindfs``, ``sendPrompt``),
  driven by ``ts_adapter_driver.mjs``;
- ``hook``: the plain CLI (driven by the Python SDK, no adapter) with ``rewindfs hook`` in the
  project's ``.claude/settings.json``, as the README tells plain Claude Code users.

The tree is snapshotted before each prompt. At the end of the session (end state E, the CLI
still running, so the SDK can rewind), for every turn k:

1. dry runs: the SDK's and rewindfs's tool scope, both on E (neither changes anything);
2. rewindfs's real rewinds, each followed by ``undo`` (which must give E back): tool scope,
   then agent scope (its tree must be the snapshot taken before turn k; ``force`` is given, the
   dry run's conflicts are reported);
3. the SDK's real rewinds, each followed by putting E back behind the SDK's back (a plain copy
   through the mount, by this process: an ``external`` change, made after every rewindfs
   rewind, so it cannot colour rewindfs's answers). The SDK's dry runs are asked again first
   and must not have changed (rewindfs's rewinds and undos left nothing the SDK can see: so
   the SDK rewinds the same end state rewindfs did).

So both sides rewind copies of the same end state in the same place (the SDK's backups live
under ``$HOME/.claude/file-history`` and name absolute paths, so the SDK can only rewind the
real workspace). A rewind of an id that is no checkpoint is compared too. Responses are
compared on the SDK's fields (canRewind, filesChanged, insertions, deletions, skippedLinks,
error; fields only rewindfs gives are its additions); trees on type, mode, content and symlink
target.

    $CLIENTS_PYTHON tests/clients/rewindfs_compare.py SCENARIO.json --path py [--keep DIR]

prints the report. ``test_rewindfs_real.py`` runs the matrix.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid as _uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "sdk" / "python"))

from fake_api import FakeAPI  # noqa: E402
from run_session import Session, script_of, subst, wait_for_sdk_checkpoints  # noqa: E402

from rewindfs import AsyncRewindfsClient, RewindfsError  # noqa: E402

PATHS = ("py", "ts", "hook")
SDK_FIELDS = ("canRewind", "filesChanged", "insertions", "deletions", "skippedLinks", "error")
NOT_A_CHECKPOINT = "00000000-0000-4000-8000-00000000dead"
STEP_TIMEOUT = float(os.environ.get("REWINDFS_COMPARE_STEP_TIMEOUT", "90"))



def _alive(pid: Optional[int]) -> bool:
    """Whether process ``pid`` runs (a zombie counts as gone, as the daemon sees it)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def rewindfs_bin() -> str:
    return os.environ.get("REWINDFS_BIN") or str(REPO / "target" / "debug" / "rewindfs")


def require_clients_and_mount() -> None:
    """Skips the calling test (outside CI) or fails it (``CI=true`` or ``REQUIRE_FUSE=1``),
    naming what is missing, unless the real SDK, a rewindfs binary and a mountable FUSE are
    all here."""
    import importlib.util

    import pytest

    problem = None
    if importlib.util.find_spec("claude_agent_sdk") is None:
        problem = "claude-agent-sdk is not importable: run tests/clients/install.sh and use its venv's python"
    require(problem)


def require(problem: Optional[str] = None) -> None:
    """Skips the calling test (outside CI) or fails it (``CI=true`` or ``REQUIRE_FUSE=1``) when
    ``problem`` names something missing, or when a rewindfs binary or a mountable FUSE is not
    here."""
    import pytest

    if problem is None and not Path(rewindfs_bin()).exists():
        problem = f"no rewindfs binary at {rewindfs_bin()}: cargo build (or set REWINDFS_BIN)"
    elif problem is None and (os.geteuid() != 0 or not Path("/dev/fuse").exists()):
        problem = "mounting needs root and /dev/fuse"
    if problem:
        if os.environ.get("CI") in ("true", "1") or os.environ.get("REQUIRE_FUSE") == "1":
            pytest.fail(f"required (CI=true or REQUIRE_FUSE=1): {problem}")
        pytest.skip(problem)


# ---- trees ---------------------------------------------------------------------------------

Entry = tuple  # ("file", mode, bytes) | ("dir", mode) | ("symlink", target) | ("other", kind)


def snapshot(ws: str, skip: tuple[str, ...] = (".claude",)) -> dict[str, Entry]:
    """Every path under ``ws`` (relative) with its type, mode, content or symlink target."""
    out: dict[str, Entry] = {}
    for root, dirs, files in os.walk(ws):
        dirs[:] = sorted(d for d in dirs if os.path.relpath(os.path.join(root, d), ws) not in skip)
        for name in dirs + sorted(files):
            p = os.path.join(root, name)
            rel = os.path.relpath(p, ws)
            st = os.lstat(p)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out[rel] = ("file", mode, f.read())
            else:
                out[rel] = ("other", stat.S_IFMT(st.st_mode))
    return out


def show(e: Optional[Entry]) -> str:
    if e is None:
        return "absent"
    if e[0] == "file":
        body = e[2]
        try:
            text = repr(body.decode()) if len(body) <= 60 else f"{len(body)} bytes"
        except UnicodeDecodeError:
            text = f"bytes {body[:24].hex()}{'…' if len(body) > 24 else ''} ({len(body)})"
        return f"file {e[1]:04o} {text}"
    if e[0] == "dir":
        return f"dir {e[1]:04o}"
    if e[0] == "symlink":
        return f"symlink -> {e[1]}"
    return f"other {e[1]:o}"


def tree_diff(want: dict[str, Entry], got: dict[str, Entry], want_name: str, got_name: str) -> list[str]:
    """One line per path that differs: ``path: WANT_NAME … | GOT_NAME …``."""
    lines = []
    for p in sorted(set(want) | set(got)):
        if want.get(p) != got.get(p):
            lines.append(f"{p}: {want_name} {show(want.get(p))} | {got_name} {show(got.get(p))}")
    return lines


def sync_to(ws: str, snap: dict[str, Entry]) -> None:
    """Makes the tree under ``ws`` equal to ``snap`` (files rewritten in place where they are
    files already), through whatever is mounted there."""
    cur = snapshot(ws)
    for p in sorted(set(cur) - set(snap), key=lambda p: -p.count("/")):
        full = os.path.join(ws, p)
        if not os.path.lexists(full):
            continue
        if cur[p][0] == "dir":
            shutil.rmtree(full)
        else:
            os.unlink(full)
    for p in sorted(snap, key=lambda p: (p.count("/"), p)):
        e, full = snap[p], os.path.join(ws, p)
        now = snapshot_one(full)
        if now == e:
            continue
        if now is not None and now[0] != e[0]:
            shutil.rmtree(full) if now[0] == "dir" else os.unlink(full)
            now = None
        if e[0] == "dir":
            if now is None:
                os.mkdir(full)
            os.chmod(full, e[1])
        elif e[0] == "symlink":
            if now is not None:
                os.unlink(full)
            os.symlink(e[1], full)
        elif e[0] == "file":
            if now is None or now[2] != e[2]:
                fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, e[2])
                finally:
                    os.close(fd)
            os.chmod(full, e[1])
        else:
            raise RuntimeError(f"cannot recreate {p}: {show(e)}")


def snapshot_one(full: str) -> Optional[Entry]:
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return ("symlink", os.readlink(full))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", stat.S_IMODE(st.st_mode))
    if stat.S_ISREG(st.st_mode):
        with open(full, "rb") as f:
            return ("file", stat.S_IMODE(st.st_mode), f.read())
    return ("other", stat.S_IFMT(st.st_mode))


# ---- answers -------------------------------------------------------------------------------


def answer_diff(sdk: dict, mine: dict) -> list[str]:
    """Where rewindfs's answer differs from the SDK's, on the SDK's fields. An answer is
    ``{"raised": bool, ...the response's fields, or "error"}``."""
    out = []
    if sdk.get("raised") != mine.get("raised"):
        kind = lambda a: "an error answer" if a.get("raised") else "a success answer"  # noqa: E731
        out.append(f"SDK gave {kind(sdk)}, rewindfs {kind(mine)}")
    for k in SDK_FIELDS:
        if k in sdk and sdk[k] != mine.get(k, "<missing>"):
            note = ""
            if k == "filesChanged" and isinstance(mine.get(k), list) and sorted(sdk[k]) == sorted(mine[k]):
                note = " (same files, another order)"
            out.append(f"{k}: SDK {json.dumps(sdk[k])} | rewindfs {json.dumps(mine.get(k, '<missing>'))}{note}")
    return out


def relative(answer: dict, ws: str) -> dict:
    """The answer with the workspace path written as ``{ws}`` (as in the scenarios' recordings)."""
    return json.loads(json.dumps(answer).replace(json.dumps(ws)[1:-1], "{ws}"))


@dataclass
class Check:
    """One comparison: what was compared, and the differences (empty when equal)."""

    turn: str
    what: str
    diff: list[str]

    @property
    def ok(self) -> bool:
        return not self.diff


@dataclass
class Report:
    scenario: str
    path: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def text(self) -> str:
        lines = [f"{self.scenario} [{self.path}]: {len(self.checks) - len(self.failed)}/{len(self.checks)} checks agree ({self.seconds:.1f} s)"]
        for n in self.notes:
            lines.append(f"  note: {n}")
        for c in self.failed:
            lines.append(f"  {c.turn} {c.what}:")
            lines.extend(f"    {d}" for d in c.diff)
        return "\n".join(lines)

    def summary(self) -> dict:
        return {"scenario": self.scenario, "path": self.path, "seconds": round(self.seconds, 1),
                "checks": len(self.checks), "failed": [{"turn": c.turn, "what": c.what, "diff": c.diff} for c in self.failed],
                "notes": self.notes}


# ---- drivers: one real session each --------------------------------------------------------


class PyDriver:
    """The Python SDK. ``adapter``: through rewindfs.claude; else the plain CLI (hooks from
    the project's settings)."""

    def __init__(self, scenario: dict, ws: str, home: str, logs: str, rw: AsyncRewindfsClient, adapter: bool):
        self.rw, self.adapter = rw, adapter
        self.rw_session = "rewindfs-compare"

        def options_hook(o: Any) -> Any:
            if not adapter:
                return o
            from rewindfs.claude import with_rewindfs
            return with_rewindfs(o, rw, session_id=self.rw_session)

        async def after_connect(client: Any) -> None:
            if adapter:
                from rewindfs.claude import register_cli
                self.pids.append(await register_cli(client, rw, self.rw_session))

        self.pids: list[Optional[int]] = []
        self.stderr: list[str] = []
        # Session gives the options (offline env, checkpointing on), the fake API with the
        # scenario's script, connect/close; its own step runner is not used.
        self.s = Session(scenario, ws, home=home, log_dir=logs, emit=lambda e: None,
                         options_hook=options_hook, after_connect=after_connect,
                         stderr=lambda line: self.stderr.append(line))

    async def start(self) -> None:
        self.s.api.start()
        await self.s.connect()

    async def prompt(self, text: str, u: str) -> str:
        from claude_agent_sdk.types import ResultMessage

        if self.adapter:
            from rewindfs.claude import send_prompt
            await send_prompt(self.s.client, self.rw, self.rw_session, text, message_uuid=u)
        else:
            msg = {"type": "user", "message": {"role": "user", "content": text},
                   "parent_tool_use_id": None, "session_id": self.s.session_id or "default", "uuid": u}

            async def one() -> Any:
                yield msg

            await self.s.client.query(one())
        async for m in self.s.client.receive_response():
            if isinstance(m, ResultMessage):
                self.s.session_id = m.session_id
        return u

    async def sdk_rewind(self, u: str, dry_run: bool) -> dict:
        req: dict[str, Any] = {"subtype": "rewind_files", "user_message_id": u}
        if dry_run:
            req["dry_run"] = True
        try:
            return {"raised": False, **(await self.s.client._query._send_control_request(req))}
        except Exception as e:  # noqa: BLE001  (the SDK raises a bare Exception with the CLI's text)
            return {"raised": True, "error": str(e)}

    async def restart(self) -> None:
        await self.s.close()
        await self.s.connect(resume=self.s.session_id)

    async def close(self) -> None:
        try:
            await self.s.close()
        finally:
            self.s.api.stop()


class TsDriver:
    """The TypeScript SDK through sdk/typescript/claude.js (ts_adapter_driver.mjs)."""

    def __init__(self, scenario: dict, ws: str, home: str, logs: str, socket: str):
        self.api = FakeAPI(script_of(scenario, ws), log_path=os.path.join(logs, "api.jsonl"))
        self.cfg = {"op": "start", "ws": ws, "home": home, "socket": socket, "rewindfs_session": "rewindfs-compare"}
        self.logs = logs
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.pids: list[int] = []

    async def call(self, cmd: dict) -> dict:
        assert self.proc and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the TypeScript driver exited (see {self.logs}/ts-driver.stderr)")
        return json.loads(line)

    async def start(self) -> None:
        self.api.start()
        self.stderr = open(os.path.join(self.logs, "ts-driver.stderr"), "wb")
        self.proc = await asyncio.create_subprocess_exec(
            "node", str(HERE / "ts_adapter_driver.mjs"), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=self.stderr, limit=1 << 24)
        r = await self.call({**self.cfg, "base_url": self.api.base_url})
        if not r["ok"]:
            raise RuntimeError(f"TypeScript session did not start: {r['error']}")

    async def prompt(self, text: str, u: str) -> str:
        r = await self.call({"op": "prompt", "text": text, "uuid": u})
        if not r["ok"]:
            raise RuntimeError(f"TypeScript prompt failed: {r['error']}\n{r.get('stderr', '')}")
        self.pids = r.get("registered", [])
        return r["uuid"]

    async def sdk_rewind(self, u: str, dry_run: bool) -> dict:
        r = await self.call({"op": "rewind", "uuid": u, "dry_run": dry_run})
        return {"raised": False, **r["response"]} if r["ok"] else {"raised": True, "error": r["error"]}

    async def restart(self) -> None:
        r = await self.call({"op": "restart"})
        if not r["ok"]:
            raise RuntimeError(f"TypeScript restart failed: {r['error']}")

    async def close(self) -> None:
        try:
            if self.proc and self.proc.returncode is None:
                try:
                    await asyncio.wait_for(self.call({"op": "close"}), 20)
                    await asyncio.wait_for(self.proc.wait(), 10)
                except (asyncio.TimeoutError, RuntimeError, BrokenPipeError):
                    self.proc.kill()
                    await self.proc.wait()
        finally:
            self.api.stop()
            self.stderr.close()


# ---- the mount -----------------------------------------------------------------------------


class Mount:
    """``rewindfs mount WS --store STORE`` for the duration of a ``with``."""

    def __init__(self, ws: str, store: str):
        self.ws, self.store = ws, store

    def __enter__(self) -> "Mount":
        subprocess.run([rewindfs_bin(), "mount", self.ws, "--store", self.store], check=True,
                       capture_output=True, text=True, timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        for attempt in range(20):
            p = subprocess.run([rewindfs_bin(), "umount", self.ws], capture_output=True, text=True)
            if p.returncode == 0:
                return
            time.sleep(0.25)
        raise RuntimeError(f"rewindfs umount {self.ws}: {p.stderr.strip()}")

    @property
    def socket(self) -> str:
        return os.path.join(self.store, "control.sock")


# ---- the comparison ------------------------------------------------------------------------


def session_steps(scenario: dict) -> list[dict]:
    steps = scenario.get("steps") or scenario.get("turns") or []
    return [s for s in steps if "prompt" in s or "shell" in s or "restart" in s]


async def rewindfs_answer(rw: AsyncRewindfsClient, u: str, dry_run: bool, scope: str = "tool", force: bool = False) -> dict:
    try:
        return {"raised": False, **(await rw.request("rewind_files", user_message_id=u, dry_run=dry_run, scope=scope, force=force))}
    except RewindfsError as e:
        return {"raised": True, "error": str(e)}


async def undo(rw: AsyncRewindfsClient, ws: str, end: dict[str, Entry], report: Report, turn: str, scope: str) -> None:
    """``undo`` of the rewind just made; it must give the end tree back (which is then put back
    by hand if it did not, so that the next comparison starts from the end state)."""
    try:
        await rw.undo_rewind()
        back = tree_diff(end, snapshot(ws), "end", "after undo")
    except RewindfsError as e:
        back = [f"undo refused: {e}"]
    report.checks.append(Check(turn, f"undo of the {scope}-scope rewind gives the end tree back", back))
    if back:
        sync_to(ws, end)


async def compare(scenario: dict, name: str, path: str, base: str) -> Report:
    """Runs ``scenario`` by ``path`` in ``base``/ws through a rewindfs mount; returns the report."""
    t0 = time.time()
    report = Report(name, path)
    ws, store, home, logs = (os.path.join(base, d) for d in ("ws", "store", "home", "logs"))
    for d in (ws, home, logs):
        os.makedirs(d, exist_ok=True)
    sc = subst(scenario, ws)
    if path == "hook":
        # As a user sets it up: `rewindfs setup claude` in the project.
        subprocess.run([rewindfs_bin(), "setup", "claude", "--project", ws], check=True,
                       capture_output=True, text=True, timeout=60)
    elif sc.get("settings"):
        os.makedirs(os.path.join(ws, ".claude"), exist_ok=True)
        Path(ws, ".claude", "settings.json").write_text(json.dumps(sc["settings"], indent=1))

    with Mount(ws, store) as m:
        rw = await AsyncRewindfsClient.connect(m.socket)
        driver: Any
        if path == "ts":
            driver = TsDriver(scenario, ws, home, logs, m.socket)
        else:
            driver = PyDriver(scenario, ws, home, logs, rw, adapter=(path == "py"))
        turns: list[tuple[str, str]] = []  # (name, uuid)
        before: dict[str, dict[str, Entry]] = {}
        step = lambda coro: asyncio.wait_for(coro, STEP_TIMEOUT)  # noqa: E731
        try:
            await step(driver.start())
            for st in session_steps(sc):
                if "shell" in st:
                    subprocess.run(["bash", "-c", st["shell"]], cwd=ws, check=True, capture_output=True)
                elif "restart" in st:
                    await step(driver.restart())
                else:
                    u = str(_uuid.uuid4())
                    before[u] = snapshot(ws)
                    await step(driver.prompt(st["prompt"], u))
                    turns.append((st.get("name") or f"t{len(turns) + 1}", u))
            end = snapshot(ws)
            # The CLI records a turn's checkpoint asynchronously (see wait_for_sdk_checkpoints):
            # compare with the SDK once it has them all, as a user who rewinds later would.
            late = await wait_for_sdk_checkpoints(home, [u for _, u in turns])
            if late:
                report.notes.append(f"the SDK recorded no checkpoint of {[n for n, u in turns if u in late]} within 5 s")
            if path in ("py", "ts"):
                agents = (await rw.status()).get("agentPids", [])
                # A CLI that has exited (the one before a resume) is no agent any more: the
                # daemon forgets it at its next look at the agents.
                missing = ([p for p in driver.pids if p not in agents and _alive(p)]
                           if driver.pids else ["none registered"])
                report.checks.append(Check("session", "the adapter registered each CLI process as the agent",
                                           [f"CLI pids {driver.pids}, daemon's agents {agents}"] if missing else []))

            targets = turns + [("not-a-checkpoint", NOT_A_CHECKPOINT)]
            # 1. dry runs, both on the end state
            sdk_dry: dict[str, dict] = {}
            for tname, u in targets:
                sdk_dry[u] = await step(driver.sdk_rewind(u, True))
                mine = await rewindfs_answer(rw, u, True)
                report.checks.append(Check(tname, "dry run (tool scope)",
                                           answer_diff(relative(sdk_dry[u], ws), relative(mine, ws))))
            # 2. rewindfs's real rewinds, each undone
            mine_real: dict[str, tuple[dict, dict]] = {}
            for tname, u in targets:
                ans = await rewindfs_answer(rw, u, False)
                mine_real[u] = (ans, snapshot(ws))
                if not ans["raised"]:
                    await undo(rw, ws, end, report, tname, "tool")
                if (tname, u) == targets[-1]:
                    continue
                dry = await rewindfs_answer(rw, u, True, scope="agent")
                if dry.get("conflicts"):
                    report.notes.append(f"{tname}: agent scope reports conflicts {relative(dry, ws)['conflicts']} (rewound with force)")
                ans = await rewindfs_answer(rw, u, False, scope="agent", force=True)
                if ans["raised"]:
                    report.checks.append(Check(tname, "agent-scope rewind", [f"refused: {ans['error']}"]))
                    continue
                report.checks.append(Check(tname, "agent scope gives the tree as it was before the turn",
                                           tree_diff(before[u], snapshot(ws), "before the turn", "agent scope")))
                await undo(rw, ws, end, report, tname, "agent")
            # 3. the SDK's real rewinds, the end state put back after each
            for tname, u in targets:
                again = await step(driver.sdk_rewind(u, True))
                report.checks.append(Check(tname, "the SDK's dry run is the same after rewindfs's rewinds and undos",
                                           answer_diff(relative(sdk_dry[u], ws), relative(again, ws))))
            for tname, u in targets:
                sdk = await step(driver.sdk_rewind(u, False))
                sdk_tree = snapshot(ws)
                mine, my_tree = mine_real[u]
                report.checks.append(Check(tname, "real rewind (tool scope): answer",
                                           answer_diff(relative(sdk, ws), relative(mine, ws))))
                report.checks.append(Check(tname, "real rewind (tool scope): tree",
                                           tree_diff(sdk_tree, my_tree, "SDK", "rewindfs")))
                sync_to(ws, end)
                left = tree_diff(end, snapshot(ws), "end", "put back")
                if left:
                    raise RuntimeError(f"could not put the end tree back after the SDK's rewind of {tname}: {left}")
        finally:
            try:
                await driver.close()
            finally:
                await rw.close()
    report.seconds = time.time() - t0
    return report


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="+")
    ap.add_argument("--path", choices=PATHS, action="append", help="integration path(s) (default: all)")
    ap.add_argument("--keep", help="run in this directory and keep it")
    ap.add_argument("--json", action="store_true", help="print each report's summary as JSON")
    a = ap.parse_args(argv)
    bad = 0
    for sp in a.scenario:
        for path in a.path or PATHS:
            base = os.path.join(a.keep, f"{Path(sp).stem}-{path}") if a.keep else tempfile.mkdtemp(prefix="rewindfs-compare-")
            try:
                r = asyncio.run(compare(load(Path(sp)), Path(sp).stem, path, base))
            finally:
                if not a.keep:
                    shutil.rmtree(base, ignore_errors=True)
            print(json.dumps(r.summary()) if a.json else r.text(), flush=True)
            bad += bool(r.failed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

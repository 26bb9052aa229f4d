#!/usr/bin/env python3
"""Run one turn of the real Codex CLI or Gemini CLI, non-interactively and offline,
against the scripted fake models of ``fake_models.py``. Standard library only.

::

    from run_agent import Models, run_codex, run_gemini, new_session_id

    models = Models(script, log_path="/tmp/models.jsonl")     # see fake_models.py
    r1 = run_codex(ws, home, "TURN-1 ...", models)            # r1.session_id: the thread id
    r2 = run_codex(ws, home, "TURN-2 ...", models, thread_id=r1.session_id)
    sid = new_session_id()
    run_gemini(ws, home, "TURN-1 ...", models, session_id=sid)
    run_gemini(ws, home, "TURN-2 ...", models, session_id=sid, resume=True)
    models.close()

``home`` is a scratch directory that becomes the CLI's HOME; Codex keeps its state in
``<home>/codex`` (CODEX_HOME) and Gemini in ``<home>/.gemini`` (GEMINI_CLI_HOME=<home>).
The first run writes the base configuration (:func:`write_codex_config`,
:func:`write_gemini_settings`) unless it is already there, so a test may write it first
with extra text, or let a setup command edit it between turns.

No network: when ``unshare -n`` works (root, or a kernel allowing it), each CLI run gets a
fresh network namespace with only loopback, and the fake server is started inside it for
that run (its answers depend on the request alone, so a fresh server per run is the same
as one long-lived server). Otherwise one in-process server serves every run and the CLIs
run with the host's network. The base URL is handed to each run (``-c`` for Codex, the
environment for Gemini) rather than written into config files, because it differs
between the two modes.

Self-test: ``python3 run_agent.py --selftest`` (two turns of each CLI, then their hooks).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fake_models import FakeModels  # noqa: E402

__all__ = ["Models", "AgentRun", "run_codex", "run_gemini", "write_codex_config",
           "write_gemini_settings", "new_session_id", "netns_available", "CODEX_BIN", "GEMINI_BIN"]

# Where tests/clients/install.sh puts the pinned CLIs (versions.env), unless told otherwise.
_CLIENTS = Path(os.environ.get("REWINDFS_CLIENTS_DIR", HERE.parent.parent.parent / "target" / "clients"))
_AGENTS = Path(os.environ.get("AGENTS_NODE_MODULES") or _CLIENTS / "agents" / "node_modules")
CODEX_BIN = os.environ.get("CODEX_BIN", str(_AGENTS / ".bin/codex"))
GEMINI_BIN = os.environ.get("GEMINI_BIN", str(_AGENTS / ".bin/gemini"))

CODEX_MODEL = "gpt-5.5"            # a bundled slug: only those are offered apply_patch
GEMINI_MODEL = "gemini-2.5-flash"
_NS_PORT = 18765                   # any port will do inside a fresh namespace
_FAKE_KEY = "fake-key-offline"


# ---- the fake models, and how a run reaches them ------------------------------------------

@lru_cache(maxsize=None)
def netns_available() -> bool:
    """Whether a CLI can be run in its own network namespace with loopback up."""
    try:
        return subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"],
                              stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# Runs inside the new namespace: bring loopback up, start the server, wait until it
# listens (the port file is written after bind), run the CLI, stop the server.
_NS_WRAPPER = r'''
ip link set lo up || { echo "run_agent: cannot bring lo up" >&2; exit 97; }
"$PY" "$FAKE" --script "$SCRIPT" --port "$PORT" --port-file "$PORTFILE" ${LOG:+--log "$LOG"} >/dev/null &
srv=$!
i=0
while [ ! -s "$PORTFILE" ]; do
  i=$((i+1)); [ $i -gt 400 ] && { echo "run_agent: fake server did not start" >&2; kill $srv; exit 98; }
  sleep 0.025
done
"$@"
rc=$?
kill $srv 2>/dev/null
wait $srv 2>/dev/null
exit $rc
'''


class Models:
    """The scripted models for a series of runs.

    ``isolate=None`` picks a private network namespace when available; ``False`` forces
    the in-process server (and ``True`` fails when namespaces are unavailable)."""

    def __init__(self, script: Any = None, log_path: Optional[str | os.PathLike] = None,
                 isolate: Optional[bool] = None):
        self.script = script
        self.log_path = str(log_path) if log_path else None
        self.isolate = netns_available() if isolate is None else isolate
        if self.isolate and not netns_available():
            raise RuntimeError("unshare -n with a loopback is not available here")
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-models-")
        self._server: Optional[FakeModels] = None

    def set_script(self, script: Any) -> None:
        self.script = script
        if self._server:
            self._server.set_script(script)

    def requests(self) -> list[dict]:
        """Every request logged so far (needs ``log_path``)."""
        if not self.log_path or not os.path.exists(self.log_path):
            return []
        with open(self.log_path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def base_url(self) -> str:
        """Where a run reaches the models (without ``/v1``)."""
        if self.isolate:
            return f"http://127.0.0.1:{_NS_PORT}"
        if self._server is None:
            self._server = FakeModels(self.script, self.log_path).start()
        return self._server.base_url

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` with the models reachable at :meth:`base_url`."""
        if not self.isolate:
            return list(argv)
        d = tempfile.mkdtemp(dir=self._tmp.name)
        script_file = os.path.join(d, "script.json")
        with open(script_file, "w") as f:
            json.dump(self.script, f)
        env = {"PY": sys.executable, "FAKE": str(HERE / "fake_models.py"),
               "SCRIPT": script_file, "PORT": str(_NS_PORT),
               "PORTFILE": os.path.join(d, "port"), "LOG": self.log_path or ""}
        # Passed through `env` so the CLI's environment only gains these few names.
        return ["unshare", "-n", "env", *(f"{k}={v}" for k, v in env.items()),
                "sh", "-c", _NS_WRAPPER, "run_agent", *argv]

    def close(self) -> None:
        if self._server:
            self._server.stop()
            self._server = None
        self._tmp.cleanup()

    def __enter__(self) -> "Models":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- running a CLI ------------------------------------------------------------------------

@dataclass
class AgentRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    session_id: Optional[str] = None
    events: list[dict] = field(default_factory=list)   # Codex: the --json event lines
    result: Optional[dict] = None                       # Gemini: the -o json object

    def check(self) -> "AgentRun":
        if self.returncode != 0:
            raise RuntimeError(f"{self.argv[0]} exited {self.returncode} after {self.seconds:.1f}s\n"
                               f"argv: {shlex.join(self.argv)}\nstdout:\n{self.stdout[-4000:]}\n"
                               f"stderr:\n{self.stderr[-4000:]}")
        return self

    @property
    def text(self) -> str:
        """The agent's final answer."""
        if self.result is not None:
            return str(self.result.get("response", ""))
        msgs = [e["item"].get("text", "") for e in self.events
                if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "agent_message"]
        return msgs[-1] if msgs else ""


def _run(argv: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    # Its own process group, so a timeout takes down the CLI, its children and the server.
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        err += f"\nrun_agent: killed after {timeout}s"
    return p.returncode, out, err, time.monotonic() - t0


def _base_env(home: Path, env: Optional[dict]) -> dict:
    e = dict(os.environ)
    e.update({"HOME": str(home), "NO_COLOR": "1"})
    if env:
        e.update(env)
    return e


# ---- Codex --------------------------------------------------------------------------------

def write_codex_config(home: str | os.PathLike, *, model: str = CODEX_MODEL, extra: str = "",
                       trusted: Sequence[str | os.PathLike] = (), overwrite: bool = False) -> Path:
    """Writes ``<home>/codex/config.toml`` for the fake provider; returns its path.

    ``extra`` is appended verbatim (TOML). The ``[features]`` table is left open at the end
    so ``extra`` may start with more ``key = value`` lines for it (``hooks = true``).
    ``trusted`` project directories get ``trust_level = "trusted"``: codex reads a
    project's ``.codex/`` (config, hooks.json) only for a trusted project, and skips it
    silently otherwise. An existing file is kept unless ``overwrite``."""
    path = Path(home) / "codex" / "config.toml"
    if path.exists() and not overwrite:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""\
model = "{model}"
model_provider = "fake"
check_for_update_on_startup = false

# Off: at exit codex looks up ab.chatgpt.com; in a namespace without network that DNS
# query times out (~5 s per run) instead of failing at once.
[analytics]
enabled = false

# base_url is set per run with -c (it depends on whether the run has its own namespace).
[model_providers.fake]
name = "fake"
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
env_key = "FAKE_API_KEY"
request_max_retries = 0
stream_max_retries = 0

# Off: each would make a start-up network call (git ls-remote and the like).
[features]
plugins = false
remote_plugin = false
apps = false
""" + extra + "".join(f'\n[projects.{json.dumps(str(p))}]\ntrust_level = "trusted"\n'
                      for p in trusted))
    return path


def run_codex(workspace: str | os.PathLike, home: str | os.PathLike, prompt: str, models: Models, *,
              thread_id: Optional[str] = None, extra_args: Sequence[str] = (),
              env: Optional[dict] = None, timeout: float = 300, check: bool = True) -> AgentRun:
    """One Codex turn: ``codex exec`` (new thread) or ``codex exec resume <thread_id>``.

    ``extra_args`` go after ``exec``/``exec resume`` (e.g. ``--dangerously-bypass-hook-trust``,
    ``-c features.hooks=true``). The run's ``session_id`` is the thread id."""
    workspace, home = Path(workspace), Path(home)
    write_codex_config(home)
    base = [CODEX_BIN, "exec"] + (["resume"] if thread_id else [])
    flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    # The base_url -c comes after the caller's options, so it wins.
    url = ["-c", f'model_providers.fake.base_url="{models.base_url()}/v1"']
    positional = ([thread_id] if thread_id else []) + [prompt]
    argv = models.wrap(base + flags + list(extra_args) + url + positional)
    e = _base_env(home, {"CODEX_HOME": str(home / "codex"), "FAKE_API_KEY": _FAKE_KEY, **(env or {})})
    rc, out, err, secs = _run(argv, workspace, e, timeout)
    events = []
    for line in out.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    tid = next((ev.get("thread_id") for ev in events if ev.get("type") == "thread.started"), thread_id)
    run = AgentRun(argv, rc, out, err, secs, session_id=tid, events=events)
    if check:
        run.check()
        failed = [ev for ev in events if ev.get("type") in ("turn.failed", "error")]
        if failed:
            raise RuntimeError(f"codex reported {failed}\nstderr:\n{err[-4000:]}")
    return run


# ---- Gemini -------------------------------------------------------------------------------

GEMINI_USER_SETTINGS = {
    # Without selectedType, 0.61 picks the "gateway" auth, which -p refuses (exit 41).
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "telemetry": {"enabled": False},
}


def write_gemini_settings(home: str | os.PathLike, *, extra: Optional[dict] = None,
                          overwrite: bool = False) -> Path:
    """Writes the user settings ``<home>/.gemini/settings.json``; returns its path.

    ``extra``'s top-level keys are merged into the base settings (shallowly). Project
    settings (hooks) belong in ``<workspace>/.gemini/settings.json``, written by the caller.
    An existing file is kept unless ``overwrite``."""
    path = Path(home) / ".gemini" / "settings.json"
    if path.exists() and not overwrite:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**GEMINI_USER_SETTINGS, **(extra or {})}, indent=2) + "\n")
    return path


def new_session_id() -> str:
    return str(uuid.uuid4())


def run_gemini(workspace: str | os.PathLike, home: str | os.PathLike, prompt: str, models: Models, *,
               session_id: str, resume: bool = False, model: str = GEMINI_MODEL,
               extra_args: Sequence[str] = (), env: Optional[dict] = None,
               timeout: float = 300, check: bool = True) -> AgentRun:
    """One Gemini turn: a new session with ``--session-id`` or, with ``resume``, ``--resume``
    of that session (each turn is a new process)."""
    workspace, home = Path(workspace), Path(home)
    write_gemini_settings(home)
    cmd = [GEMINI_BIN, "-m", model, "--approval-mode", "yolo", "-o", "json",
           *(["--resume", session_id] if resume else ["--session-id", session_id]),
           *extra_args, "-p", prompt]
    argv = models.wrap(cmd)
    e = _base_env(home, {"GEMINI_CLI_HOME": str(home), "GEMINI_API_KEY": _FAKE_KEY,
                         "GOOGLE_GEMINI_BASE_URL": models.base_url(),
                         # Without trust, project hooks and yolo are refused silently.
                         "GEMINI_CLI_TRUST_WORKSPACE": "true", **(env or {})})
    rc, out, err, secs = _run(argv, workspace, e, timeout)
    result = None
    start = out.find("{")   # -o json prints one object; anything before it is noise
    if start >= 0:
        try:
            result = json.loads(out[start:])
        except ValueError:
            pass
    run = AgentRun(argv, rc, out, err, secs,
                   session_id=(result or {}).get("session_id", session_id), result=result)
    if check:
        run.check()
        if result is None or result.get("error"):
            raise RuntimeError(f"gemini gave no result: {out[-2000:]}\nstderr:\n{err[-4000:]}")
    return run


# ---- self-test ------------------------------------------------------------------------------

def hook_logger_command(log: str | os.PathLike) -> str:
    """A hook command that appends its stdin (one JSON object) as one line to ``log``."""
    code = ("import sys,json;d=sys.stdin.read();"
            f"open({str(log)!r},'a').write(json.dumps(json.loads(d))+chr(10))")
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def _expect(path: Path, content: str) -> None:
    got = path.read_text() if path.exists() else None
    if got != content:
        raise AssertionError(f"{path}: expected {content!r}, got {got!r}")


CODEX_SCRIPT = {"turns": [
    {"match": "TURN-1", "responses": [
        [{"apply_patch": "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"}],
        [{"exec": "echo hi > b.txt"}]], "final": "Turn 1 done."},
    {"match": "TURN-2", "responses": [
        [{"apply_patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-hello\n+hello world\n*** End Patch\n"}]],
     "final": "Turn 2 done."},
]}

GEMINI_SCRIPT = {"turns": [
    {"match": "TURN-1", "responses": [
        [{"call": "write_file", "args": {"file_path": "a.txt", "content": "hello\n"}}],
        [{"exec": "echo hi > b.txt"}]], "final": "Turn 1 done."},
    {"match": "TURN-2", "responses": [
        [{"call": "replace", "args": {"file_path": "a.txt", "old_string": "hello",
                                      "new_string": "hello world",
                                      "instruction": "Say hello to the world."}}]],
     "final": "Turn 2 done."},
]}


def selftest_codex(root: Path, hooks: bool, isolate: Optional[bool] = None) -> list[dict]:
    ws, home, hook_log = root / "ws", root / "home", root / "hooks.jsonl"
    ws.mkdir(parents=True)
    args: list[str] = []
    if hooks:
        write_codex_config(home, extra="hooks = true\n", trusted=[ws])
        cmd = hook_logger_command(hook_log)
        events = ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"]
        (ws / ".codex").mkdir()
        (ws / ".codex" / "hooks.json").write_text(json.dumps({"hooks": {
            ev: [{"matcher": "*", "hooks": [{"type": "command", "command": cmd, "timeout": 30}]}]
            for ev in events}}, indent=2))
        args = ["--dangerously-bypass-hook-trust"]
    with Models(CODEX_SCRIPT, root / "models.jsonl", isolate=isolate) as models:
        r1 = run_codex(ws, home, "TURN-1: create a.txt and b.txt", models, extra_args=args)
        r2 = run_codex(ws, home, "TURN-2: update a.txt", models, thread_id=r1.session_id,
                       extra_args=args)
    print(f"codex{' +hooks' if hooks else ''}: thread {r1.session_id}, turns took "
          f"{r1.seconds:.1f}s and {r2.seconds:.1f}s, answers {r1.text!r} {r2.text!r}")
    _expect(ws / "a.txt", "hello world\n")
    _expect(ws / "b.txt", "hi\n")
    assert r1.text == "Turn 1 done." and r2.text == "Turn 2 done.", (r1.text, r2.text)
    return _read_jsonl(hook_log)


def selftest_gemini(root: Path, hooks: bool, isolate: Optional[bool] = None) -> list[dict]:
    ws, home, hook_log = root / "ws", root / "home", root / "hooks.jsonl"
    ws.mkdir(parents=True)
    if hooks:
        cmd = hook_logger_command(hook_log)
        events = ["SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "SessionEnd"]
        (ws / ".gemini").mkdir()
        (ws / ".gemini" / "settings.json").write_text(json.dumps({"hooks": {
            ev: [{"matcher": "*", "hooks": [{"name": f"log-{ev}", "type": "command",
                                             "command": cmd, "timeout": 20000}]}]
            for ev in events}}, indent=2))
    sid = new_session_id()
    with Models(GEMINI_SCRIPT, root / "models.jsonl", isolate=isolate) as models:
        r1 = run_gemini(ws, home, "TURN-1: create a.txt and b.txt", models, session_id=sid)
        r2 = run_gemini(ws, home, "TURN-2: update a.txt", models, session_id=sid, resume=True)
    print(f"gemini{' +hooks' if hooks else ''}: session {sid}, turns took "
          f"{r1.seconds:.1f}s and {r2.seconds:.1f}s, answers {r1.text!r} {r2.text!r}")
    _expect(ws / "a.txt", "hello world\n")
    _expect(ws / "b.txt", "hi\n")
    assert r1.text == "Turn 1 done." and r2.text == "Turn 2 done.", (r1.text, r2.text)
    return _read_jsonl(hook_log)


def _show_hooks(name: str, entries: list[dict]) -> None:
    print(f"--- {name} hook inputs ({len(entries)}):")
    for e in entries:
        ev = e.get("hook_event_name")
        extra = f" {e.get('tool_name')}" if e.get("tool_name") else ""
        print(f"{ev}{extra}: {json.dumps(e)}")


def selftest(keep: bool = False, show_hooks: bool = True, isolate: Optional[bool] = None) -> int:
    root = Path(tempfile.mkdtemp(prefix="run-agent-selftest-"))
    ns = netns_available() if isolate is None else isolate
    print(f"selftest in {root}; network namespace: {'yes' if ns else 'no (host network)'}")
    selftest_codex(root / "codex", hooks=False, isolate=ns)
    codex_hooks = selftest_codex(root / "codex-hooks", hooks=True, isolate=ns)
    selftest_gemini(root / "gemini", hooks=False, isolate=ns)
    gemini_hooks = selftest_gemini(root / "gemini-hooks", hooks=True, isolate=ns)

    def events(entries: list[dict]) -> list[str]:
        return [e["hook_event_name"] + (f":{e['tool_name']}" if e.get("tool_name") else "")
                for e in entries]
    ce, ge = events(codex_hooks), events(gemini_hooks)
    for want in ("UserPromptSubmit", "PreToolUse:apply_patch", "PreToolUse:Bash",
                 "PostToolUse:apply_patch", "PostToolUse:Bash"):
        assert want in ce, f"codex hook {want} never ran: {ce}"
    for want in ("BeforeAgent", "BeforeTool:write_file", "BeforeTool:run_shell_command",
                 "BeforeTool:replace", "AfterTool:replace", "AfterAgent"):
        assert want in ge, f"gemini hook {want} never ran: {ge}"
    if show_hooks:
        _show_hooks("codex", codex_hooks)
        _show_hooks("gemini", gemini_hooks)
    print("codex hook order:", " ".join(ce))
    print("gemini hook order:", " ".join(ge))
    print("selftest OK")
    if not keep:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Run the Codex and Gemini CLIs offline (see module doc).")
    ap.add_argument("--selftest", action="store_true", help="two turns of each CLI, then their hooks")
    ap.add_argument("--keep", action="store_true", help="keep the self-test's temporary directory")
    ap.add_argument("--quiet-hooks", action="store_true", help="do not print the hooks' inputs")
    ap.add_argument("--no-netns", action="store_true",
                    help="serve from this process and let the CLIs use the host network")
    a = ap.parse_args()
    if not a.selftest:
        ap.print_help()
        sys.exit(2)
    sys.exit(selftest(keep=a.keep, show_hooks=not a.quiet_hooks, isolate=False if a.no_netns else None))

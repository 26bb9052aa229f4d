#!/usr/bin/env python3
"""A Claude Code command hook that records what it was given, for measuring hooks.

Use it as the command of every hook in a project's ``.claude/settings.json``::

    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": "python3 /path/hook_logger.py /tmp/hooks.jsonl"}]}], ...}}

(:func:`settings_for` builds such a file.) For each call it appends one JSON line to the
log with: the hook's stdin payload (``payload``), the time, its pid and parent pid and
the parent's command name, the environment variables whose name mentions CLAUDE
(``env``), and what the session transcript held at that instant (``transcript``: for
each entry of type ``user``/``assistant``, its type, uuid, parentUuid, promptId and
whether it is a prompt or a tool result). With ``HOOK_LOGGER_WATCH_MS=N`` it then polls
the transcript for up to N ms and records when a new typed prompt appears
(``prompt_appeared_after_ms``) — run that in the background (``HOOK_LOGGER_ASYNC=1``)
to measure without delaying the CLI. It answers nothing (exit 0, empty stdout), so the
agent goes on as if there were no hook.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

EVENTS = [
    "SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure",
    "Stop", "SubagentStop", "SessionEnd", "Notification", "PreCompact", "PermissionRequest",
]


def settings_for(log_path: str, events: list[str] = EVENTS, python: str = sys.executable,
                 env: str = "") -> dict:
    """A settings.json object with this logger as the command of every hook event."""
    cmd = f"{env} {python} {os.path.abspath(__file__)} {log_path}".strip()
    hooks: dict[str, Any] = {}
    for ev in events:
        entry: dict[str, Any] = {"hooks": [{"type": "command", "command": cmd}]}
        if ev in ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"):
            entry["matcher"] = "*"
        hooks[ev] = [entry]
    return {"hooks": hooks}


def _is_prompt(entry: dict) -> bool:
    if entry.get("type") != "user" or entry.get("isMeta"):
        return False
    c = (entry.get("message") or {}).get("content")
    if isinstance(c, str):
        return True
    return isinstance(c, list) and bool(c) and all(
        isinstance(b, dict) and b.get("type") != "tool_result" for b in c)


def transcript_state(path: str | None) -> list[dict] | None:
    if not path:
        return None
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        return [{"error": str(e)}]
    out = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            out.append({"partial_line": len(line)})
            continue
        if e.get("type") not in ("user", "assistant"):
            out.append({"type": e.get("type"), "messageId": e.get("messageId")})
            continue
        out.append({
            "type": e.get("type"), "uuid": e.get("uuid"), "parentUuid": e.get("parentUuid"),
            "promptId": e.get("promptId"), "isMeta": e.get("isMeta"),
            "prompt": _is_prompt(e),
            "tool_result": e.get("type") == "user" and not _is_prompt(e),
        })
    return out


def _prompt_uuids(state: list[dict] | None) -> list[str]:
    return [e["uuid"] for e in (state or []) if e.get("prompt")]


def main() -> int:
    log_path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("HOOK_LOGGER_LOG", "/tmp/hooks.jsonl")
    t0 = time.time()
    raw = sys.stdin.read()
    try:
        payload: Any = json.loads(raw)
    except ValueError:
        payload = {"unparsed": raw}
    ppid = os.getppid()
    try:
        pcomm = open(f"/proc/{ppid}/comm").read().strip()
    except OSError:
        pcomm = None
    tpath = payload.get("transcript_path") if isinstance(payload, dict) else None
    state = transcript_state(tpath)
    rec = {
        "t": round(t0, 4), "pid": os.getpid(), "ppid": ppid, "pcomm": pcomm, "argv": sys.argv[2:],
        "event": payload.get("hook_event_name") if isinstance(payload, dict) else None,
        "payload": payload,
        "env": {k: v for k, v in os.environ.items() if "CLAUDE" in k or k in ("PWD",)},
        "transcript": state,
    }
    with open(log_path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    watch_ms = int(os.environ.get("HOOK_LOGGER_WATCH_MS", "0") or 0)
    if watch_ms and tpath:
        if os.environ.get("HOOK_LOGGER_ASYNC") == "1" and os.fork() != 0:
            return 0  # the parent answers at once; the child watches
        before = set(_prompt_uuids(state))
        deadline = t0 + watch_ms / 1000
        while time.time() < deadline:
            new = [u for u in _prompt_uuids(transcript_state(tpath)) if u not in before]
            if new:
                with open(log_path, "a") as f:
                    f.write(json.dumps({"watch_of": rec["event"], "t0": rec["t"],
                                        "prompt_appeared_after_ms": round((time.time() - t0) * 1000, 1),
                                        "uuid": new[-1]}) + "\n")
                break
            time.sleep(0.005)
        else:
            with open(log_path, "a") as f:
                f.write(json.dumps({"watch_of": rec["event"], "t0": rec["t"], "prompt_appeared_after_ms": None}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

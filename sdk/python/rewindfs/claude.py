"""Claude Agent SDK integration: make every turn of a ``ClaudeSDKClient`` session rewindable
through rewindfs, including what the agent's shell commands did.

``claude-agent-sdk`` is an optional dependency (``pip install rewindfs[claude]``), imported
only when these functions run::

    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient
    from rewindfs import AsyncRewindfsClient
    from rewindfs.claude import register_cli, send_prompt, with_rewindfs

    rw = await AsyncRewindfsClient.connect()          # the mount containing the cwd
    options = with_rewindfs(ClaudeAgentOptions(cwd="."), rw, session_id="my-session")
    async with ClaudeSDKClient(options) as client:
        await register_cli(client, rw, "my-session")   # the CLI's own writes are `tool`
        turn = await send_prompt(client, rw, "my-session", "Refactor utils.py")
        async for msg in client.receive_response():
            ...
    result = await rw.rewind_files(turn, dry_run=True)   # works after the session ended

Race-freedom: :func:`send_prompt` chooses the user message's uuid itself and begins its
checkpoint *before* the prompt is sent (a ``uuid`` on a user message sent over stream-json
input becomes that message's uuid), so no tool call can run ahead of its checkpoint.

Several sessions in one workspace: give each the same ``session_id`` in :func:`with_rewindfs`,
:func:`register_cli` and :func:`send_prompt`; its tool spans, its CLI process and its
checkpoints then belong to it, and a rewind of its checkpoints restores only its own work.

Never underneath the mount: :func:`with_rewindfs` gives the CLI the workspace's absolute path
as its cwd (a relative one, ``"."`` included, would be the host process's cwd, which may be the
directory the mount covers if the host was started inside it first), and :func:`register_cli`
refuses a CLI that the daemon still sees underneath its mount.
"""

from __future__ import annotations

import os
import uuid as _uuid
from dataclasses import replace
from typing import Any, Optional

from .client import AsyncRewindfsClient, RewindfsError

__all__ = ["with_rewindfs", "send_prompt", "register_cli", "span_hooks", "tool_span_hooks"]


def _file_of(tool_input: Any) -> Optional[str]:
    if not isinstance(tool_input, dict):
        return None
    for k in ("file_path", "notebook_path", "path"):
        v = tool_input.get(k)
        if isinstance(v, str) and v:
            return v
    return None


def span_hooks(rw: AsyncRewindfsClient, session_id: Optional[str] = None) -> dict[str, Any]:
    """SDK hook callbacks that report tool spans to the daemon, keyed by hook event.

    A span opens at PreToolUse and closes at PostToolUse or PostToolUseFailure. A tool that the
    CLI refuses after PreToolUse (an Edit of a symlink) gets neither: its span is closed at the
    next PreToolUse (the CLI runs tools that write one at a time), at UserPromptSubmit and at
    Stop, so that later shell writes to its file are not taken for the tool's. The callbacks
    never block the agent: a daemon error is swallowed (the tool still runs).

    ``session_id``: the session the spans are of (the one given :func:`send_prompt`; the hooks'
    own ``session_id`` is the CLI's, not that one). Without it, a span belongs to whichever
    session began a message last, which is right only while one session works in the
    workspace."""
    open_spans: dict[str, str] = {}  # tool_use_id -> tool_name, opened and not yet closed

    def id_of(input_data: dict[str, Any], tool_use_id: Optional[str]) -> str:
        return tool_use_id or str(input_data.get("tool_use_id", "")) or f"hook-{input_data.get('tool_name', '')}"

    async def report(phase: str, tool_name: str, span_id: str, file_path: Optional[str]) -> None:
        # The host's session id, not the hooks' own (the CLI's), which checkpoints do not carry.
        try:
            await rw.tool_use(phase, tool_name, span_id, file_path, session_id)
        except (RewindfsError, OSError):
            pass

    async def close_all() -> None:
        for span_id, name in list(open_spans.items()):
            open_spans.pop(span_id, None)
            await report("post", name, span_id, None)

    async def pre(input_data: dict[str, Any], tool_use_id: Optional[str], context: Any) -> dict[str, Any]:
        await close_all()
        span_id, name = id_of(input_data, tool_use_id), str(input_data.get("tool_name", ""))
        open_spans[span_id] = name
        await report("pre", name, span_id, _file_of(input_data.get("tool_input")))
        return {}

    async def post(input_data: dict[str, Any], tool_use_id: Optional[str], context: Any) -> dict[str, Any]:
        span_id = id_of(input_data, tool_use_id)
        open_spans.pop(span_id, None)
        await report("post", str(input_data.get("tool_name", "")), span_id, _file_of(input_data.get("tool_input")))
        return {}

    async def end(input_data: dict[str, Any], tool_use_id: Optional[str], context: Any) -> dict[str, Any]:
        await close_all()
        return {}

    return {
        "PreToolUse": pre,
        "PostToolUse": post,
        "PostToolUseFailure": post,
        "UserPromptSubmit": end,
        "Stop": end,
        "StopFailure": end,
    }


def tool_span_hooks(rw: AsyncRewindfsClient, session_id: Optional[str] = None) -> tuple[Any, Any]:
    """The PreToolUse and PostToolUse callbacks of :func:`span_hooks` (which also has those for
    PostToolUseFailure, UserPromptSubmit and Stop that close spans a tool left open)."""
    hooks = span_hooks(rw, session_id)
    return hooks["PreToolUse"], hooks["PostToolUse"]


def with_rewindfs(options: Any, rw: AsyncRewindfsClient, session_id: Optional[str] = None) -> Any:
    """Returns a copy of ``ClaudeAgentOptions`` with rewindfs's tool-span hooks added (existing
    hooks are kept): PreToolUse, PostToolUse, PostToolUseFailure, UserPromptSubmit, Stop and
    StopFailure; their spans are ``session_id``'s (see :func:`span_hooks`). Its ``cwd`` becomes
    an absolute path (the host's cwd when none is set), so that the CLI starts inside the mount
    even when the host process was started inside the directory before it was mounted."""
    from claude_agent_sdk import HookMatcher  # lazy: optional dependency

    hooks: dict[str, list[Any]] = {k: list(v) for k, v in (getattr(options, "hooks", None) or {}).items()}
    for event, callback in span_hooks(rw, session_id).items():
        hooks.setdefault(event, []).append(HookMatcher(matcher=None, hooks=[callback]))
    # A path, looked up afresh when the CLI starts, reaches the mount; the host's own cwd (what
    # "." or no cwd means) is the directory underneath if the host entered it before the mount.
    cwd = os.path.abspath(os.fspath(getattr(options, "cwd", None) or os.getcwd()))
    try:
        return replace(options, hooks=hooks, cwd=cwd)
    except TypeError:
        options.hooks = hooks
        options.cwd = cwd
        return options


def cli_pid(client: Any) -> Optional[int]:
    """The pid of the Claude Code CLI process a ``ClaudeSDKClient`` started, if it can be found."""
    for path in (("_transport", "_process"), ("_query", "transport", "_process")):
        obj: Any = client
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        pid = getattr(obj, "pid", None)
        if isinstance(pid, int) and pid > 0:
            return pid
    return None


async def register_cli(client: Any, rw: AsyncRewindfsClient, session_id: Optional[str] = None) -> Optional[int]:
    """Registers the CLI as the agent (its writes are `tool`, its children's `shell`), of
    ``session_id`` when several sessions share the workspace (pass the id you give
    :func:`send_prompt`: a rewind of that session then restores only its own work)."""
    pid = cli_pid(client)
    if pid is not None:
        await rw.register_agent(pid, session_id)
        status = await rw.status()
        for p in status.get("unprotectedProcesses", []):
            # Its cwd (or root) underneath: every relative path it uses misses the mount. (An
            # open file it inherited there, a log the host writes, is not the CLI's work.)
            if p.get("pid") == pid and p.get("holds") in ("cwd", "root"):
                raise RewindfsError(
                    f"the Claude Code CLI (pid {pid}) works in {p.get('path')}, the directory underneath "
                    f"the rewindfs mount at {status.get('workspace')}: nothing it changes would be recorded. "
                    f"Give ClaudeAgentOptions an absolute cwd inside the mount (with_rewindfs does), "
                    f"or start the host from outside the directory"
                )
    return pid


async def send_prompt(client: Any, rw: AsyncRewindfsClient, session_id: str, text: str, message_uuid: Optional[str] = None) -> str:
    """Begins the checkpoint for a new user message, then sends it with that uuid. Returns the
    uuid: pass it to ``rewind_files`` to go back to the state before this turn."""
    u = message_uuid or str(_uuid.uuid4())
    await rw.begin_message(session_id, u)

    async def one() -> Any:
        yield {
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": None,
            "session_id": session_id,
            "uuid": u,
        }

    await client.query(one(), session_id=session_id)
    return u

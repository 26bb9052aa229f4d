"""Qoder Agent SDK integration: make every turn of a ``QoderSDKClient`` session rewindable through
rewindfs, shell work included, answered in Qoder's own shapes.

``qoder-agent-sdk`` is an optional dependency (``pip install rewindfs[qoder]``), imported only
when these functions run::

    from qoder_agent_sdk import QoderAgentOptions, QoderSDKClient
    from rewindfs import AsyncRewindfsClient
    from rewindfs.qoder import register_cli, send_prompt, use_rewindfs, with_rewindfs

    rw = await AsyncRewindfsClient.connect()          # the mount containing the cwd
    options = with_rewindfs(QoderAgentOptions(cwd="."), rw, session_id="s")
    async with QoderSDKClient(options) as client:
        await register_cli(client, rw, "s")            # the CLI's own writes are `tool`
        use_rewindfs(client, rw, "s")                  # the one line: rewinds go to rewindfs
        turn = await send_prompt(client, rw, "s", "Refactor utils.py")
        async for msg in client.receive_response():
            ...
        preview = await client.rewind_files(turn, dry_run=True)   # Qoder's RewindFilesResult
        if preview["canRewind"]:
            await client.rewind_files(turn)

**One id.** :func:`send_prompt` chooses the user message's uuid, begins rewindfs's checkpoint
under it, then sends the prompt with ``message_uuid=`` that uuid: the CLI takes it as its own
snapshot id and replays it as the ``UserMessage.uuid``, so rewindfs's checkpoint, Qoder's
snapshot and the message the host sees are one id, and no tool of the turn runs before the
checkpoint began.

**Injected prompts.** ``priority="next"`` or ``"now"`` while a turn runs would inject the prompt
into that turn: the CLI would take it at a boundary rewindfs cannot see, and the turn's later
changes would count for the new checkpoint. :func:`send_prompt` refuses that (the turn is
known to run from its UserPromptSubmit hook to its Stop hook, which :func:`with_rewindfs`
registers); ``priority="later"`` is held until the turn ends, then sent as a new turn.

**Answers.** :func:`rewind_files` answers with Qoder's ``RewindFilesResult`` to the letter: the
keys in the CLI's order, absolute ``filesChanged``, ``insertions``/``deletions`` 0 on a real
rewind, ``canRewind: false`` with the CLI's texts, and a failed real rewind raises
``Exception(text)`` as the SDK does. rewindfs's own answer (conflicts, what a scope left out,
the rewind's id for ``undo``) is on the result's ``rewindfs`` attribute, outside the dict.
``scope="tool"`` (the default) is Qoder's own file rewind; ``scope="agent"`` also undoes what
the turn's shell commands did.
"""

from __future__ import annotations

import asyncio
import os
import uuid as _uuid
import warnings
from dataclasses import replace
from typing import Any, Optional

from .claude import cli_pid, span_hooks
from .client import AsyncRewindfsClient, RewindfsError, RewindFilesResult

__all__ = [
    "with_rewindfs",
    "register_cli",
    "send_prompt",
    "rewind_files",
    "rewind",
    "use_rewindfs",
    "QoderRewindFilesResult",
]

#: rewindfs's answer to a checkpoint it does not know, and the CLI's to a snapshot it does not.
_NO_CHECKPOINT = "No file checkpoint found for this message."


class QoderRewindFilesResult(dict):
    """Qoder's ``RewindFilesResult`` (a plain dict with the CLI's keys, in its order), with
    rewindfs's whole answer on ``.rewindfs`` (a :class:`rewindfs.RewindFilesResult`): its
    conflicts, what the scope left out, and the rewind's id, which ``undo`` takes back."""

    rewindfs: Optional[RewindFilesResult] = None


class _Turns:
    """Whether a turn of the CLI runs: from its UserPromptSubmit hook to its Stop hook."""

    def __init__(self) -> None:
        self.running = False
        self.idle = asyncio.Event()
        self.idle.set()

    def start(self) -> None:
        self.running = True
        self.idle.clear()

    def end(self) -> None:
        self.running = False
        self.idle.set()


#: The turn tracker of each options object with_rewindfs made, by its id (read back by
#: send_prompt through the client's options).
_TURNS: dict[int, _Turns] = {}


def _turns_of(client: Any) -> Optional[_Turns]:
    options = getattr(client, "options", None)
    return _TURNS.get(id(options)) if options is not None else None


def _backup_root(options: Any) -> str:
    """Where the CLI keeps its own file backups: ``QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT``
    (the options' env first), else ``~/.qoder/file-history``."""
    env = getattr(options, "env", None) or {}
    root = env.get("QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT") or os.environ.get(
        "QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT"
    )
    return os.path.abspath(root or os.path.join(os.path.expanduser("~"), ".qoder", "file-history"))


def with_rewindfs(options: Any, rw: AsyncRewindfsClient, session_id: Optional[str] = None) -> Any:
    """Returns a copy of ``QoderAgentOptions`` with rewindfs's tool-span hooks added (existing
    hooks kept; see :func:`rewindfs.claude.span_hooks`) and a turn tracker on UserPromptSubmit
    and Stop (see :func:`send_prompt`), an absolute ``cwd`` (so the CLI starts inside the mount
    even when the host was started in the directory before it was mounted) and user-message
    replay on (``extra_args["replay-user-messages"]``). Warns when the CLI's own backup root lies
    inside the workspace: its backups would be recorded as changes the agent made."""
    from qoder_agent_sdk import HookMatcher  # lazy: optional dependency

    turns = _Turns()
    spans = span_hooks(rw, session_id)

    def around(cb: Any, then: Any) -> Any:
        async def run(input_data: dict[str, Any], tool_use_id: Optional[str], context: Any) -> dict[str, Any]:
            then()
            return await cb(input_data, tool_use_id, context)

        return run

    spans["UserPromptSubmit"] = around(spans["UserPromptSubmit"], turns.start)
    for event in ("Stop", "StopFailure"):
        spans[event] = around(spans[event], turns.end)
    hooks: dict[str, list[Any]] = {k: list(v) for k, v in (getattr(options, "hooks", None) or {}).items()}
    for event, callback in spans.items():
        hooks.setdefault(event, []).append(HookMatcher(matcher=None, hooks=[callback]))
    cwd = os.path.abspath(os.fspath(getattr(options, "cwd", None) or os.getcwd()))
    extra = dict(getattr(options, "extra_args", None) or {})
    extra.setdefault("replay-user-messages", None)
    root = _backup_root(options)
    if root == cwd or root.startswith(cwd.rstrip("/") + "/"):
        warnings.warn(
            f"the Qoder CLI keeps its file backups in {root}, inside the rewindfs workspace {cwd}: "
            f"rewindfs would record them as the agent's changes. Set "
            f"QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT (options.env) to a directory outside it",
            stacklevel=2,
        )
    try:
        out = replace(options, hooks=hooks, cwd=cwd, extra_args=extra)
    except TypeError:
        options.hooks, options.cwd, options.extra_args = hooks, cwd, extra
        out = options
    _TURNS[id(out)] = turns
    return out


async def register_cli(
    client: Any, rw: AsyncRewindfsClient, session_id: Optional[str] = None, pid: Optional[int] = None
) -> Optional[int]:
    """Registers the Qoder CLI process as the agent (its own writes are `tool`, its children's
    `shell`), of ``session_id`` when several sessions share the workspace. ``pid``: for a custom
    ``Transport``, whose process the client cannot tell. Refuses a CLI whose cwd the daemon
    still sees underneath the mount (nothing it changes would be recorded)."""
    pid = pid or cli_pid(client)
    if pid is None:
        return None
    await rw.register_agent(pid, session_id)
    status = await rw.status()
    for p in status.get("unprotectedProcesses", []):
        if p.get("pid") == pid and p.get("holds") in ("cwd", "root"):
            raise RewindfsError(
                f"the Qoder CLI (pid {pid}) works in {p.get('path')}, the directory underneath the "
                f"rewindfs mount at {status.get('workspace')}: nothing it changes would be recorded. "
                f"Give QoderAgentOptions an absolute cwd inside the mount (with_rewindfs does), or "
                f"start the host from outside the directory"
            )
    return pid


async def send_prompt(
    client: Any,
    rw: AsyncRewindfsClient,
    session_id: str,
    text: str,
    message_uuid: Optional[str] = None,
    **query_kw: Any,
) -> str:
    """Begins rewindfs's checkpoint for a new user message, then sends it with
    ``client.query(text, message_uuid=u, **query_kw)``: one id for rewindfs's checkpoint, the
    CLI's snapshot and the replayed ``UserMessage.uuid``. Returns it.

    While a turn runs (see the module doc): ``priority="later"`` waits for it to end before the
    checkpoint begins; ``"next"`` and ``"now"`` are refused with :class:`RewindfsError`, since
    the CLI would inject the prompt at a point rewindfs cannot see."""
    u = message_uuid or str(_uuid.uuid4())
    priority = query_kw.get("priority", "next")
    turns = _turns_of(client)
    if turns is not None and turns.running:
        if priority == "later":
            await turns.idle.wait()
        else:
            raise RewindfsError(
                f"a turn is running: a prompt with priority {priority!r} would be injected into it, "
                f"and what the turn changes from then on would count for the new message. Wait for "
                f"the turn's result, or send with priority='later' (it is sent when the turn ends)"
            )
    await rw.begin_message(session_id, u)
    if turns is not None:
        # The checkpoint begins now, so the turn does too, before the CLI's hook says so: a
        # second send_prompt right after this one must wait for it as well.
        turns.start()
    query_kw.setdefault("session_id", session_id)
    await client.query(text, message_uuid=u, **query_kw)
    return u


def _qoder_files(answer: RewindFilesResult, dry_run: bool) -> QoderRewindFilesResult:
    """rewindfs's answer in Qoder's shape (see :func:`rewind_files`)."""
    out = QoderRewindFilesResult()
    out["canRewind"] = answer.canRewind
    if answer.error:
        out["error"] = answer.error
    out["filesChanged"] = list(answer.filesChanged)
    out["insertions"] = answer.insertions if dry_run else 0
    out["deletions"] = answer.deletions if dry_run else 0
    out.rewindfs = answer
    return out


async def rewind_files(
    rw: AsyncRewindfsClient,
    user_message_id: str,
    dry_run: bool = False,
    *,
    session_id: Optional[str] = None,
    scope: str = "tool",
) -> QoderRewindFilesResult:
    """Rewinds (or with ``dry_run`` previews) the files to their state when ``user_message_id``
    began, answering as the Qoder CLI does: ``{canRewind, error?, filesChanged, insertions,
    deletions}`` — a dry run counts the lines the rewind would add and remove, a real rewind
    answers 0 for both, an unknown id is ``canRewind: false`` with ``no snapshot found for
    message <id>``. A real rewind that cannot be done raises ``Exception(text)``, as the SDK's
    ``rewind_files`` does; nothing was changed then. ``scope``: ``"tool"`` is Qoder's own rewind
    (the files its Write/Edit/NotebookEdit changed), ``"agent"`` also undoes shell work,
    ``"all"`` everyone's."""
    try:
        answer = await rw.rewind_files(user_message_id, dry_run=dry_run, scope=scope, session_id=session_id)
    except RewindfsError as e:
        text = str(e)
        if _NO_CHECKPOINT in text:
            text = f"no snapshot found for message {user_message_id}"
        if dry_run:
            out = QoderRewindFilesResult(canRewind=False, error=text)
            return out
        raise Exception(text) from e
    if _NO_CHECKPOINT in (answer.error or ""):
        # The CLI's answer to an id it has no snapshot of: these two keys, nothing else.
        out = QoderRewindFilesResult(canRewind=False, error=f"no snapshot found for message {user_message_id}")
        out.rewindfs = answer
        if not dry_run:
            raise Exception(out["error"])
        return out
    out = _qoder_files(answer, dry_run)
    if not dry_run and not out["canRewind"]:
        raise Exception(out.get("error") or "Unable to rewind files.")
    return out


async def rewind(
    client: Any,
    rw: AsyncRewindfsClient,
    user_message_id: str,
    scope: str = "both",
    dry_run: bool = False,
    *,
    session_id: Optional[str] = None,
    files_scope: str = "tool",
    rewind_conversation: Any = None,
) -> dict[str, Any]:
    """Qoder's ``rewind`` (``RewindResult``) with the files side answered by rewindfs and the
    conversation side by the CLI, in the CLI's order and shapes: ``"conversation"`` is the CLI's
    alone; ``"files"`` and ``"both"`` check first (the conversation target, for ``both``, by the
    CLI's own dry run; then the file checkpoint), so a refusal (``status: "rejected"`` with
    ``error``, a normal answer as the CLI gives it) changes nothing; a dry run is ``ready`` with
    the counts; a real one goes back in the conversation first, then in the files, reports the
    counts the dry run gave (as the CLI does) and is ``partial`` when the conversation went back
    and the files could not. ``rewind_conversation``: the CLI's own ``rewind`` (the one
    :func:`use_rewindfs` replaced)."""
    cli_rewind = rewind_conversation or client.rewind
    if scope not in ("files", "both"):
        return await cli_rewind(user_message_id, scope=scope, dry_run=dry_run)

    def rejected(text: str) -> dict[str, Any]:
        return {"status": "rejected", "targetUserMessageId": user_message_id, "scope": scope, "error": text}

    turns = _turns_of(client)
    if turns is not None and turns.running:
        return rejected("Conversation rewind requires an idle session with no queued input.")
    plan: dict[str, Any] = {}
    if scope == "both":
        plan = await cli_rewind(user_message_id, scope="conversation", dry_run=True)
        if plan.get("status") == "rejected":
            return rejected(str(plan.get("error") or "Unable to rewind the conversation."))
    counts = await rewind_files(rw, user_message_id, dry_run=True, session_id=session_id, scope=files_scope)
    if not counts["canRewind"]:
        text = str(counts.get("error") or "")
        if text.startswith("no snapshot found for message"):
            text = f"No file checkpoint found for user message {user_message_id}."
        return rejected(text or "Failed to inspect the file checkpoint.")
    out: dict[str, Any] = {"targetUserMessageId": user_message_id, "scope": scope}
    if scope == "both":
        out["retainedLeafId"] = plan.get("retainedLeafId")
        out["removedMessageIds"] = plan.get("removedMessageIds", [])
    out["filesChanged"] = counts["filesChanged"]
    out["insertions"] = counts["insertions"]
    out["deletions"] = counts["deletions"]
    if dry_run:
        return {"status": "ready", **out}
    if scope == "both":
        conv = await cli_rewind(user_message_id, scope="conversation", dry_run=False)
        if conv.get("status") == "rejected":
            return rejected(str(conv.get("error") or "Unable to rewind the conversation."))
    try:
        done = await rewind_files(rw, user_message_id, session_id=session_id, scope=files_scope)
    except Exception as e:  # noqa: BLE001 - rewind_files raises as the SDK does; nothing changed
        if scope == "files":
            return rejected(str(e))
        return {
            "status": "partial",
            **out,
            "filesChanged": [],
            "failedFiles": [],
            "error": f"Conversation was rewound, but file restoration failed: {e}",
        }
    out["filesChanged"] = done["filesChanged"]
    return {"status": "success", **out, "failedFiles": []}


def use_rewindfs(client: Any, rw: AsyncRewindfsClient, session_id: Optional[str] = None, scope: str = "tool") -> Any:
    """The one line for existing Qoder code: from now on ``client.rewind_files(id, dry_run=...)``
    and ``client.rewind(id, scope=..., dry_run=...)`` are answered by rewindfs (files) and the CLI
    (conversation), in Qoder's shapes and with its exceptions. ``scope`` is rewindfs's for the
    files side (``"tool"``: Qoder's own rewind; ``"agent"``: shell work too). Returns the client."""
    cli_rewind = client.rewind

    async def rewind_files_here(user_message_id: str, dry_run: bool = False) -> QoderRewindFilesResult:
        return await rewind_files(rw, user_message_id, dry_run=dry_run, session_id=session_id, scope=scope)

    async def rewind_here(user_message_id: str, scope_: str = "both", dry_run: bool = False, **kw: Any) -> dict[str, Any]:
        s = kw.pop("scope", scope_)
        return await rewind(
            client,
            rw,
            user_message_id,
            s,
            dry_run,
            session_id=session_id,
            files_scope=scope,
            rewind_conversation=cli_rewind,
        )

    client.rewind_files = rewind_files_here
    client.rewind = rewind_here
    return client

"""Blocking and asyncio clients for the rewindfs control socket.

One JSON object per line, in the Claude Agent SDK's control envelope::

    {"type":"control_request","request_id":"r1","request":{"subtype":"status"}}
    {"type":"control_response","response":{"subtype":"success","request_id":"r1","response":{...}}}

A dry run always succeeds (``canRewind`` False and ``error`` set when it cannot rewind); a
real rewind that cannot proceed raises :class:`RewindfsError` carrying the daemon's exact
message, as the SDK's ``rewind_files`` does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket as _socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

__all__ = [
    "AsyncRewindfsClient",
    "RewindFilesResult",
    "RewindfsClient",
    "RewindfsError",
    "find_socket",
]

PathLike = Union[str, "os.PathLike[str]"]


class RewindfsError(Exception):
    """The daemon answered with an error, or could not be reached.

    ``errno`` is the errno of the system call that stopped the request (``errno.ENOSPC`` for a
    full disk ...) when the daemon names one, else ``None``.
    """

    def __init__(self, message: str, errno: Optional[int] = None):
        super().__init__(message)
        self.errno = errno


@dataclass
class RewindFilesResult:
    """The result of ``rewind_files``, with the SDK's field names."""

    canRewind: bool
    error: Optional[str] = None
    filesChanged: list[str] = field(default_factory=list)
    insertions: int = 0
    deletions: int = 0
    skippedLinks: int = 0
    conflicts: list[str] = field(default_factory=list)
    rewindId: Optional[str] = None
    #: Who else changed each conflict (workspace-relative path -> ``session <id>`` / ``external``).
    conflictsBy: dict[str, list[str]] = field(default_factory=dict)
    #: Paths changed since the checkpoint that the scope left out: ``{count, byActor, scope,
    #: command}`` (``None``: none). A tool-scope rewind after shell work says so here.
    omitted: Optional[dict[str, Any]] = None
    #: Paths a real rewind left as another process changed them while it ran.
    changedMeanwhile: list[str] = field(default_factory=list)
    #: Paths it began to restore and then left, partly restored, because another process changed them.
    partiallyRestored: list[str] = field(default_factory=list)
    #: What history from elsewhere (an import or pull) would have granted and was withheld:
    #: ``[{path, what: ["set-user-ID bit", "attribute security.capability", ...]}]``.
    withheld: list[dict[str, Any]] = field(default_factory=list)
    #: What the rewind changes besides content: ``[{path, mode?: [from, to], owner?: [from, to],
    #: xattrs?: ["+name", "-name"]}]``.
    attributeChanges: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> "RewindFilesResult":
        return cls(
            canRewind=bool(v.get("canRewind", False)),
            error=v.get("error"),
            filesChanged=list(v.get("filesChanged", [])),
            insertions=int(v.get("insertions", 0)),
            deletions=int(v.get("deletions", 0)),
            skippedLinks=int(v.get("skippedLinks", 0)),
            conflicts=list(v.get("conflicts", [])),
            rewindId=v.get("rewindId"),
            conflictsBy={str(k): list(w) for k, w in (v.get("conflictsBy") or {}).items()},
            omitted=v.get("omitted"),
            changedMeanwhile=list(v.get("changedMeanwhile", [])),
            partiallyRestored=list(v.get("partiallyRestored", [])),
            withheld=list(v.get("withheld", [])),
            attributeChanges=list(v.get("attributeChanges", [])),
        )


def _unescape_mountinfo(s: str) -> str:
    out = bytearray()
    b = s.encode()
    i = 0
    while i < len(b):
        if b[i] == 0x5C and i + 3 < len(b) and all(0x30 <= c <= 0x37 for c in b[i + 1 : i + 4]):
            out.append(int(b[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(b[i])
            i += 1
    return out.decode(errors="surrogateescape")


def _rewindfs_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, source) of every ``fuse.rewindfs`` mount in a mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 3 or len(fields) < 5:
            continue
        if fields[sep + 1] == "fuse.rewindfs":
            found.append((_unescape_mountinfo(fields[4]), _unescape_mountinfo(fields[sep + 2])))
    return found


def find_socket(socket: Optional[PathLike] = None, cwd: Optional[PathLike] = None, mountinfo: Optional[str] = None) -> Path:
    """Finds the daemon's socket the way the CLI does: the explicit path, else
    ``$REWINDFS_SOCKET``, else the deepest rewindfs mount containing ``cwd`` (its mount source
    is the store directory)."""
    if socket is not None:
        return Path(socket)
    env = os.environ.get("REWINDFS_SOCKET")
    if env:
        return Path(env)
    here = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError as e:
            raise RewindfsError(f"cannot read the mount table: {e}") from e
    best: Optional[tuple[str, str]] = None
    for mnt, src in _rewindfs_mounts(mountinfo):
        m = Path(mnt)
        if here == m or m in here.parents:
            if best is None or len(mnt) >= len(best[0]):
                best = (mnt, src)
    if best is None:
        raise RewindfsError(f"{here} is not inside a rewindfs mount; pass socket= or set REWINDFS_SOCKET")
    return Path(best[1]) / "control.sock"


def _envelope(request_id: str, subtype: str, fields: dict[str, Any]) -> bytes:
    req = {"subtype": subtype}
    req.update({k: v for k, v in fields.items() if v is not None})
    return (json.dumps({"type": "control_request", "request_id": request_id, "request": req}) + "\n").encode()


def _payload(line: bytes, request_id: str) -> dict[str, Any]:
    if not line:
        raise RewindfsError("the daemon closed the connection")
    v = json.loads(line)
    r = v.get("response", {})
    if r.get("subtype") == "success":
        return r.get("response", {})
    if r.get("subtype") == "error":
        raise RewindfsError(r.get("error", "unknown error"), r.get("errno"))
    raise RewindfsError(f"unexpected response: {line!r}")


def _rewind_fields(user_message_id: str, dry_run: bool, scope: str, force: bool, paths: Optional[Sequence[str]], session_id: Optional[str] = None, trust_imported: bool = False) -> dict[str, Any]:
    return {
        "user_message_id": user_message_id,
        "dry_run": dry_run,
        "scope": scope,
        "force": force,
        "paths": list(paths) if paths is not None else None,
        "session_id": session_id,
        # Only when asked: what history from elsewhere would grant (withheld by default).
        "trust_imported": True if trust_imported else None,
    }


class RewindfsClient:
    """A blocking client with one persistent connection."""

    def __init__(self, socket: Optional[PathLike] = None, timeout: Optional[float] = 600.0) -> None:
        self.path = find_socket(socket)
        self._ids = itertools.count(1)
        try:
            self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            self._sock.settimeout(timeout)
            self._sock.connect(str(self.path))
        except OSError as e:
            raise RewindfsError(f"control socket {self.path}: {e}") from e
        self._file = self._sock.makefile("rb")

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> "RewindfsClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, subtype: str, **fields: Any) -> dict[str, Any]:
        """Sends one request; returns the success payload or raises RewindfsError."""
        rid = f"r{next(self._ids)}"
        try:
            self._sock.sendall(_envelope(rid, subtype, fields))
        except OSError:
            pass  # a refusing daemon has already written why; read it below
        return _payload(self._file.readline(), rid)

    def begin_message(self, session_id: str, user_message_id: str) -> dict[str, Any]:
        return self.request("begin_message", session_id=session_id, user_message_id=user_message_id)

    def tool_use(self, phase: str, tool_name: str, tool_use_id: str, file_path: Optional[str] = None, session_id: Optional[str] = None) -> dict[str, Any]:
        return self.request("tool_use", phase=phase, tool_name=tool_name, tool_use_id=tool_use_id, file_path=file_path, session_id=session_id)

    def register_agent(self, pid: int, session_id: Optional[str] = None) -> dict[str, Any]:
        """Registers ``pid`` as an agent (of ``session_id``: its writes and its children's
        belong to that session; without one, to whichever session began a message last)."""
        return self.request("register_agent", pid=pid, session_id=session_id)

    def rewind_files(
        self,
        user_message_id: str,
        dry_run: bool = False,
        scope: str = "tool",
        force: bool = False,
        paths: Optional[Sequence[str]] = None,
        session_id: Optional[str] = None,
        trust_imported: bool = False,
    ) -> RewindFilesResult:
        return RewindFilesResult.from_json(self.request("rewind_files", **_rewind_fields(user_message_id, dry_run, scope, force, paths, session_id, trust_imported)))

    def undo_rewind(self, dry_run: bool = False, force: bool = False, session_id: Optional[str] = None) -> dict[str, Any]:
        """Undoes the newest rewind not yet undone (a stack; of ``session_id``'s rewinds when
        given); refused over changes made since unless `force`."""
        return self.request("undo_rewind", dry_run=dry_run, force=force, session_id=session_id)

    def redo_rewind(self, dry_run: bool = False, force: bool = False, session_id: Optional[str] = None) -> dict[str, Any]:
        """Re-applies the rewind undone last (of ``session_id``'s when given); refused over
        changes made since the undo unless `force`."""
        return self.request("redo_rewind", dry_run=dry_run, force=force, session_id=session_id)

    def list_checkpoints(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        return list(self.request("list_checkpoints", session_id=session_id)["checkpoints"])

    def diff(self, user_message_id: str, path: Optional[str] = None, scope: Optional[str] = None) -> str:
        return str(self.request("diff", user_message_id=user_message_id, path=path, scope=scope)["diff"])

    def log(self, path: Optional[str] = None, limit: Optional[int] = None) -> list[dict[str, Any]]:
        return list(self.request("log", path=path, limit=limit)["entries"])

    def status(self) -> dict[str, Any]:
        return self.request("status")


class AsyncRewindfsClient:
    """The asyncio twin of :class:`RewindfsClient` (``await AsyncRewindfsClient.connect()``)."""

    def __init__(self, path: Path, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.path = path
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, socket: Optional[PathLike] = None) -> "AsyncRewindfsClient":
        path = find_socket(socket)
        try:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 22)
        except OSError as e:
            raise RewindfsError(f"control socket {path}: {e}") from e
        return cls(path, reader, writer)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass

    async def __aenter__(self) -> "AsyncRewindfsClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, subtype: str, **fields: Any) -> dict[str, Any]:
        async with self._lock:
            rid = f"r{next(self._ids)}"
            self._writer.write(_envelope(rid, subtype, fields))
            try:
                await self._writer.drain()
            except OSError:
                pass
            return _payload(await self._reader.readline(), rid)

    async def begin_message(self, session_id: str, user_message_id: str) -> dict[str, Any]:
        return await self.request("begin_message", session_id=session_id, user_message_id=user_message_id)

    async def tool_use(self, phase: str, tool_name: str, tool_use_id: str, file_path: Optional[str] = None, session_id: Optional[str] = None) -> dict[str, Any]:
        return await self.request("tool_use", phase=phase, tool_name=tool_name, tool_use_id=tool_use_id, file_path=file_path, session_id=session_id)

    async def register_agent(self, pid: int, session_id: Optional[str] = None) -> dict[str, Any]:
        """Registers ``pid`` as an agent (of ``session_id``: its writes and its children's
        belong to that session; without one, to whichever session began a message last)."""
        return await self.request("register_agent", pid=pid, session_id=session_id)

    async def rewind_files(
        self,
        user_message_id: str,
        dry_run: bool = False,
        scope: str = "tool",
        force: bool = False,
        paths: Optional[Sequence[str]] = None,
        session_id: Optional[str] = None,
        trust_imported: bool = False,
    ) -> RewindFilesResult:
        v = await self.request("rewind_files", **_rewind_fields(user_message_id, dry_run, scope, force, paths, session_id, trust_imported))
        return RewindFilesResult.from_json(v)

    async def undo_rewind(self, dry_run: bool = False, force: bool = False, session_id: Optional[str] = None) -> dict[str, Any]:
        return await self.request("undo_rewind", dry_run=dry_run, force=force, session_id=session_id)

    async def redo_rewind(self, dry_run: bool = False, force: bool = False, session_id: Optional[str] = None) -> dict[str, Any]:
        return await self.request("redo_rewind", dry_run=dry_run, force=force, session_id=session_id)

    async def list_checkpoints(self, session_id: Optional[str] = None) -> list[dict[str, Any]]:
        return list((await self.request("list_checkpoints", session_id=session_id))["checkpoints"])

    async def diff(self, user_message_id: str, path: Optional[str] = None, scope: Optional[str] = None) -> str:
        return str((await self.request("diff", user_message_id=user_message_id, path=path, scope=scope))["diff"])

    async def log(self, path: Optional[str] = None, limit: Optional[int] = None) -> list[dict[str, Any]]:
        return list((await self.request("log", path=path, limit=limit))["entries"])

    async def status(self) -> dict[str, Any]:
        return await self.request("status")

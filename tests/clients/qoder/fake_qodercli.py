#!/usr/bin/env python3
"""A scripted stand-in for qodercli 1.1.76 in SDK (stream-json) mode. Standard library only.

Why it exists: the real qodercli refuses every prompt without an online Qoder login, so it
cannot take part in an offline test. The real, unmodified Qoder Agent SDK (``QoderSDKClient``)
can: point ``QoderAgentOptions(cli_path=<this file>, auth=qodercli_auth())`` at this script
and it speaks the CLI's stream-json wire (see WIRE.md next to it), runs the scripted tool
calls FOR REAL in its cwd, and keeps the CLI's file history exactly as the binary does, so
its ``rewind_files`` answers are the oracle rewindfs's ``tool`` scope must match.

Script (a JSON scenario) comes from ``FAKE_QODER_SCENARIO`` (a path, or inline JSON that
starts with ``{`` or ``[``). Accepted shapes:

    {"turns": [{"tools": [{"name": "Write", "input": {...}}, ...], "text": "Done."}, ...]}
        each tool is one model response with one tool_use block;
    {"turns": [{"responses": [[block, ...], ...]}, ...]}   or   {"steps": [{"prompt":..,
    "responses": [...]}, ...]} (the format of ../scenarios/*.json; steps without
    "responses" are ignored): one inner list per model response; a block is a string
    (text), {"tool": NAME, "input": {...}} or {"type": "tool_use", "name":.., "input":..}.

A turn may carry ``"match"`` (a substring of the prompt) to be picked by prompt text;
otherwise user messages that actually run (not cancelled, not duplicate uuids) take the
unmatched turns in order. ``{ws}`` in tool inputs is replaced by the CLI's cwd. Past the
script, a turn is a plain text answer.

Tools run for real in the cwd: Write, Edit (``old_string``/``new_string``/``allow_multiple``;
``replace_all`` is accepted as an alias although the real Edit ignores it), NotebookEdit
(replace/insert/delete), Bash (``sh -c``, never tracked; a non-zero exit fails the tool), Read.
Unlike the real CLI, Write/Edit do not insist on a prior Read of an existing file. A tool its
own checks refuse (an Edit whose text is not there) gets no hook, as in the binary; one that
fails later gets PreToolUse then PostToolUseFailure.

Like the binary (WIRE.md, "Settings command hooks" and "The session transcript"), it also
runs the `type: "command"` hooks of the settings files (<config>/settings.json, the cwd's
.qoder/settings.json and .qoder/settings.local.json, --settings; --setting-sources filters)
next to the SDK's callbacks, at the same points (`bash -c`, the hook input as JSON on stdin,
the binary's env, waited for; exit 2 blocks), and writes the session transcript
(<config>/projects/<cwd, non-alnum -> '-'>/<session>.jsonl) at the moments the binary does,
so a hook that reads it sees what it would see with the real CLI. <config> is ~/.qoder (HOME
is honoured), so a run writes there unless HOME or QODER_CONFIG_DIR point elsewhere, as the
real CLI would; --no-session-persistence writes no transcript.

Other environment knobs (all optional):
    FAKE_QODER_WIRE_LOG   append every stdin/stdout line as {"dir": "in"|"out", "msg": ...}
    FAKE_QODER_DEBUG      write a debug trace to stderr
    QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT / QODER_CONFIG_DIR / QODER_CLI_HOME /
    QODER_CONFIG_DIR_NAME where backups, settings and transcripts live, as in the binary
    QODER_HEADLESS_FAST_HOOKS  as in the binary: no hook runs

Byte offsets ``~N`` in comments point into the bundled qodercli ELF (qoder_agent_sdk 1.0.16,
``_bundled/qodercli``); read them with ``dd if=qodercli bs=1 skip=N count=2000``.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from datetime import datetime, timezone
from typing import Any, Optional

VERSION = "1.1.76"
PROTOCOL_VERSION = "1.5.0"  # TD ~142098657
# z$ ~153035820: the capabilities the initialize answer and the init message advertise.
CAPABILITIES = [
    "interrupt_receipt_v1", "interrupt_cancel_queued_v1", "msg_lifecycle_v1",
    "session_rewind_v1", "background_tasks_v1", "side_question_v1", "custom_context_v1",
    "goal_v1", "goal_max_turns_v1", "goal_resume_v1", "skill_evolution_v1", "plan_mode_v1",
    "session_store_fork_barrier_v1", "host_action", "byok_config_management_v1",
    "commands_changed_v1", "reload_skills_v1", "selected_skills_v1",
]
TOOLS = ["Read", "Write", "Edit", "NotebookEdit", "Bash", "Glob", "Grep"]
MAX_SNAPSHOTS = 100  # mu ~144107374
DEBUG = bool(os.environ.get("FAKE_QODER_DEBUG"))


def debug(*args: Any) -> None:
    if DEBUG:
        print("[fake-qodercli]", *args, file=sys.stderr, flush=True)


def new_uuid() -> str:
    return str(uuidlib.uuid4())


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def mtime_ms(st: os.stat_result) -> float:
    # Node/Bun build mtimeMs as sec*1e3 + nsec/1e6 in doubles; comparing the same doubles
    # keeps the "mtime older than the backup" shortcut bit-for-bit like the binary's.
    ns = st.st_mtime_ns
    return float(ns // 1_000_000_000) * 1e3 + float(ns % 1_000_000_000) / 1e6


# libuv's texts, so failure messages read like the binary's `e.message` (approximation: Bun
# formats system errors as "<CODE>: <text>, <syscall> '<path>'" like Node).
_UV_TEXT = {
    errno.ENOENT: "no such file or directory", errno.EACCES: "permission denied",
    errno.EISDIR: "illegal operation on a directory", errno.ENOTDIR: "not a directory",
    errno.EPERM: "operation not permitted", errno.EEXIST: "file already exists",
    errno.ENOSPC: "no space left on device", errno.EROFS: "read-only file system",
    errno.EBUSY: "resource busy or locked", errno.EXDEV: "cross-device link not permitted",
    errno.ELOOP: "too many symbolic links encountered", errno.EIO: "i/o error",
}


class NodeError(Exception):
    """An fs error carrying a Node-style message and its code (for ENOENT tests)."""

    def __init__(self, code: int, syscall: str, path: Optional[str] = None, dest: Optional[str] = None):
        name = errno.errorcode.get(code, "EIO")
        text = _UV_TEXT.get(code, os.strerror(code).lower())
        msg = f"{name}: {text}, {syscall}"
        if path is not None:
            msg += f" '{path}'"
        if dest is not None:
            msg += f" -> '{dest}'"
        super().__init__(msg)
        self.errno = code


def node_call(syscall: str, fn, *args, path: Optional[str] = None, dest: Optional[str] = None):
    try:
        return fn(*args)
    except OSError as e:
        raise NodeError(e.errno or errno.EIO, syscall, path, dest) from e


def is_enoent(e: BaseException) -> bool:
    return getattr(e, "errno", None) == errno.ENOENT


# --------------------------------------------------------------------------------------
# jsdiff diffLines, ported (class mc ~142100286, LineDiff Sze ~142106493, tokenize lye
# ~142106908). The counts of a dry run are sums over the added/removed components of
# diffLines(current, backup), so the port keeps jsdiff's exact path choices.
# --------------------------------------------------------------------------------------

_LINE_SPLIT = re.compile(r"(\n|\r\n)")


def tokenize_lines(text: str) -> list[str]:
    parts = _LINE_SPLIT.split(text)
    if not parts[-1]:
        parts.pop()
    out: list[str] = []
    for i, part in enumerate(parts):
        if i % 2:  # a separator joins the line before it (newlineIsToken is off)
            out[-1] += part
        else:
            out.append(part)
    return [t for t in out if t]  # removeEmpty


class _Comp:
    __slots__ = ("count", "added", "removed", "prev")

    def __init__(self, count: int, added: bool, removed: bool, prev: Optional["_Comp"]):
        self.count, self.added, self.removed, self.prev = count, added, removed, prev


class _Path:
    __slots__ = ("old_pos", "last")

    def __init__(self, old_pos: int, last: Optional[_Comp]):
        self.old_pos, self.last = old_pos, last


def diff_lines_counts(old_text: str, new_text: str) -> tuple[int, int]:
    """(lines added, lines removed) of jsdiff's diffLines(old_text, new_text)."""
    old = tokenize_lines(old_text)
    new = tokenize_lines(new_text)
    new_len, old_len = len(new), len(old)

    def extract_common(path: _Path, diagonal: int) -> int:
        old_pos = path.old_pos
        new_pos = old_pos - diagonal
        common = 0
        while new_pos + 1 < new_len and old_pos + 1 < old_len and old[old_pos + 1] == new[new_pos + 1]:
            new_pos += 1
            old_pos += 1
            common += 1
        if common:
            path.last = _Comp(common, False, False, path.last)
        path.old_pos = old_pos
        return new_pos

    def add_to_path(path: _Path, added: bool, removed: bool, inc: int) -> _Path:
        last = path.last
        if last is not None and last.added == added and last.removed == removed:
            return _Path(path.old_pos + inc, _Comp(last.count + 1, added, removed, last.prev))
        return _Path(path.old_pos + inc, _Comp(1, added, removed, last))

    def totals(comp: Optional[_Comp]) -> tuple[int, int]:
        added = removed = 0
        while comp is not None:
            if comp.added:
                added += comp.count
            if comp.removed:
                removed += comp.count
            comp = comp.prev
        return added, removed

    best: dict[int, Optional[_Path]] = {0: _Path(-1, None)}
    new_pos = extract_common(best[0], 0)
    if best[0].old_pos + 1 >= old_len and new_pos + 1 >= new_len:
        return totals(best[0].last)
    min_diag, max_diag = float("-inf"), float("inf")
    edit_length, max_edit = 1, new_len + old_len
    while edit_length <= max_edit:
        d = int(max(min_diag, -edit_length))
        while d <= min(max_diag, edit_length):
            remove_path = best.get(d - 1)
            add_path = best.get(d + 1)
            if remove_path is not None:
                best[d - 1] = None
            can_add = False
            if add_path is not None:
                add_new_pos = add_path.old_pos - d
                can_add = 0 <= add_new_pos < new_len
            can_remove = remove_path is not None and remove_path.old_pos + 1 < old_len
            if not can_add and not can_remove:
                best[d] = None
                d += 2
                continue
            if not can_remove or (can_add and remove_path.old_pos < add_path.old_pos):
                path = add_to_path(add_path, True, False, 0)
            else:
                path = add_to_path(remove_path, False, True, 1)
            new_pos = extract_common(path, d)
            if path.old_pos + 1 >= old_len and new_pos + 1 >= new_len:
                return totals(path.last)
            best[d] = path
            if path.old_pos + 1 >= old_len:
                max_diag = min(max_diag, d - 1)
            if new_pos + 1 >= new_len:
                min_diag = max(min_diag, d + 1)
            d += 2
        edit_length += 1
    raise AssertionError("diffLines did not converge")  # unreachable: max_edit suffices


# --------------------------------------------------------------------------------------
# The CLI's file history: a port of class Ip (~144108786-144117900).
# --------------------------------------------------------------------------------------

_UNDEF = object()  # JS `undefined` where it differs from null


def config_dir_name() -> str:
    # J ~133983341 (just before de()): QODER_CONFIG_DIR_NAME, default ".qoder", names both the
    # user config dir and the project one (<cwd>/.qoder).
    return os.environ.get("QODER_CONFIG_DIR_NAME") or ".qoder"


def default_config_dir() -> str:
    # de() ~133983341: QODER_CONFIG_DIR, else $QODER_CLI_HOME/.qoder, else ~/.qoder.
    if os.environ.get("QODER_CONFIG_DIR"):
        return os.path.abspath(os.environ["QODER_CONFIG_DIR"])
    home = os.environ.get("QODER_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, config_dir_name())


def checkpoint_root() -> str:
    # k9 ~144107506: QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT (trimmed) or <config>/file-history.
    env = os.environ.get("QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT")
    root = env if env and env.strip() else os.path.join(default_config_dir(), "file-history")
    return os.path.abspath(root)


class FileHistory:
    def __init__(self, cwd: str, session_id: str, enabled: bool):
        self.cwd = os.path.abspath(cwd)
        self.root = checkpoint_root()
        self.session_id = session_id
        self.enabled = enabled
        # snapshot: {"messageId", "trackedFileBackups": {path: backup}, "timestamp", "cwd"}
        # backup:   {"backupFileName": str|None, "version": int, "backupTime": ms[, "captureFailed": True]}
        self.snapshots: list[dict] = []
        self.tracked: list[str] = []  # a JS Set: insertion order is the rewind order
        self.lock = threading.RLock()
        # recordSnapshot (~155644838): the headless session hands every persisted snapshot to
        # the transcript writer as a `file-history-snapshot` entry (persistSnapshot ~144115233).
        self.recorder: Optional[Any] = None
        self.persisted: set[str] = set()  # persistedSnapshotMessageIds

    # -- paths --
    def backup_path(self, name: str) -> str:
        return os.path.join(self.root, self.session_id, name)

    def tracking_path(self, p: str) -> str:
        o = os.path.abspath(p)
        if o.startswith(self.cwd + os.sep) or o == self.cwd:
            return os.path.relpath(o, self.cwd) or "."
        return o

    def absolute(self, t: str) -> str:
        return t if os.path.isabs(t) else os.path.normpath(os.path.join(self.cwd, t))

    @staticmethod
    def try_stat(p: str) -> Optional[os.stat_result]:
        try:
            return os.stat(p)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise NodeError(e.errno or errno.EIO, "stat", p) from e

    def first_backup(self, t: str) -> Optional[dict]:
        for snap in self.snapshots:
            b = snap["trackedFileBackups"].get(t)
            if b and b["version"] == 1:
                return b
        return None

    def can_rewind(self, message_id: str) -> bool:
        return any(s["messageId"] == message_id for s in self.snapshots)

    def find_last(self, message_id: str) -> Optional[dict]:
        for s in reversed(self.snapshots):
            if s["messageId"] == message_id:
                return s
        return None

    # -- backups --
    def unavailable(self, path: str, version: int, err: BaseException, name: Optional[str] = None) -> dict:
        debug(f"FileHistory: Failed to capture {path}: {err}")
        return {"backupFileName": name or f"{new_uuid()}@v{version}", "captureFailed": True,
                "version": version, "backupTime": time.time() * 1000}

    def create_backup(self, src: str, version: int) -> dict:
        # createBackup ~144115769: copy (EXCL) to <backup>.tmp, chmod to the source's mode,
        # rename; a missing source is a null backup; any failure is a captureFailed entry.
        name = f"{new_uuid()}@v{version}"
        final = self.backup_path(name)
        tmp = final + ".tmp"
        try:
            try:
                st = os.stat(src)
            except FileNotFoundError:
                return {"backupFileName": None, "version": version, "backupTime": time.time() * 1000}
            except OSError as e:
                raise NodeError(e.errno or errno.EIO, "stat", src) from e
            try:
                copy_file(src, tmp, exclusive=True)
            except NodeError as e:
                if not is_enoent(e):
                    raise
                os.makedirs(os.path.dirname(tmp), exist_ok=True)
                copy_file(src, tmp, exclusive=True)
            node_call("chmod", os.chmod, tmp, stat.S_IMODE(st.st_mode), path=tmp)
            node_call("rename", os.rename, tmp, final, path=tmp, dest=final)
            return {"backupFileName": name, "version": version, "backupTime": time.time() * 1000}
        except Exception as e:  # noqa: BLE001 - the binary catches everything here too
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return self.unavailable(src, version, e, name)

    def restore_backup(self, dst: str, name: str) -> None:
        # restoreBackup ~144116354: copyFile over the file in place, mkdir -p on ENOENT,
        # then chmod to the backup's mode.
        src = self.backup_path(name)
        st = node_call("stat", os.stat, src, path=src)
        try:
            copy_file(src, dst, exclusive=False)
        except NodeError as e:
            if not is_enoent(e):
                raise
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            copy_file(src, dst, exclusive=False)
        node_call("chmod", os.chmod, dst, stat.S_IMODE(st.st_mode), path=dst)

    def origin_changed(self, path: str, name: str, st: Optional[os.stat_result] = None) -> bool:
        # checkOriginFileChanged ~144114908, in the binary's order: missing -> changed;
        # mode or size differ -> changed; file mtime older than the backup's -> unchanged;
        # else compare bytes.
        bpath = self.backup_path(name)
        a = st if st is not None else self.try_stat(path)
        c = self.try_stat(bpath)
        if a is None or c is None:
            return True
        if a.st_mode != c.st_mode or a.st_size != c.st_size:
            return True
        if mtime_ms(a) < mtime_ms(c):
            return False
        try:
            with open(path, "rb") as f1, open(bpath, "rb") as f2:
                return f1.read() != f2.read()
        except OSError:
            return True

    # -- the four operations --
    def make_snapshot(self, message_id: str) -> None:
        # makeSnapshot ~144110914, at the start of every turn, before UserPromptSubmit.
        with self.lock:
            if not self.enabled:
                return
            entries: dict[str, dict] = {}
            last = self.snapshots[-1] if self.snapshots else None
            if last:
                for d in list(self.tracked):
                    p = self.absolute(d)
                    m = last["trackedFileBackups"].get(d)
                    version = m["version"] + 1 if m else 1
                    try:
                        x = self.try_stat(p)
                        if x is None:
                            entries[d] = {"backupFileName": None, "version": version,
                                          "backupTime": time.time() * 1000}
                            continue
                        if (m and not m.get("captureFailed") and isinstance(m.get("backupFileName"), str)
                                and not self.origin_changed(p, m["backupFileName"], x)):
                            entries[d] = m  # unchanged: the same backup object is reused
                            continue
                        entries[d] = self.create_backup(p, version)
                    except Exception as e:  # noqa: BLE001
                        entries[d] = self.unavailable(p, version, e)
                for d in self.tracked:
                    if d not in entries and d in last["trackedFileBackups"]:
                        entries[d] = last["trackedFileBackups"][d]
            snap = {"messageId": message_id, "trackedFileBackups": entries,
                    "timestamp": time.time() * 1000, "cwd": self.cwd}
            self.snapshots.append(snap)
            if len(self.snapshots) > MAX_SNAPSHOTS:
                self.snapshots = self.snapshots[-MAX_SNAPSHOTS:]
            debug("makeSnapshot", message_id, {k: v["backupFileName"] for k, v in entries.items()})
            if entries:  # only a snapshot that tracks something is persisted
                self.persist(snap, False)

    def track_edit(self, path: str, message_id: str) -> None:
        # trackEdit ~144111882: only into the current turn's snapshot, only the first time
        # a file is seen there; the backup is always @v1.
        with self.lock:
            if not self.enabled:
                return
            n = os.path.abspath(path)
            key = self.tracking_path(n)
            last = self.snapshots[-1] if self.snapshots else None
            if not last or last["messageId"] != message_id:
                return
            if last["trackedFileBackups"].get(key):
                return
            backup = self.create_backup(n, 1)
            updated = dict(last)
            updated["cwd"] = self.cwd
            updated["trackedFileBackups"] = {**last["trackedFileBackups"], key: backup}
            self.snapshots[-1] = updated
            if key not in self.tracked:
                self.tracked.append(key)
            debug("trackEdit", key, backup["backupFileName"])
            self.persist(updated, message_id in self.persisted)

    def persist(self, snap: dict, is_update: bool) -> None:
        # persistSnapshot ~144115233: {type, messageId, snapshot, isSnapshotUpdate}, Dates as
        # ISO strings (JSON.stringify), failures only logged.
        if self.recorder is None:
            return
        def iso(ms: float) -> str:
            return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        backups = {k: {**b, "backupTime": iso(b["backupTime"])} for k, b in snap["trackedFileBackups"].items()}
        entry = {"type": "file-history-snapshot", "messageId": snap["messageId"],
                 "snapshot": {"messageId": snap["messageId"], "trackedFileBackups": backups,
                              "timestamp": iso(snap["timestamp"]), "cwd": snap["cwd"]},
                 "isSnapshotUpdate": is_update}
        try:
            self.recorder(entry)
            self.persisted.add(snap["messageId"])
        except Exception as e:  # noqa: BLE001
            debug("FileHistory: Failed to persist checkpoint", repr(e))

    def target_backup(self, snap: dict, key: str) -> Any:
        b = snap["trackedFileBackups"].get(key)
        return b if b is not None else self.first_backup(key)

    def rewind_detailed(self, message_id: str) -> dict:
        # rewindDetailed ~144112572.
        with self.lock:
            if not self.enabled:
                return {"filesChanged": [], "failedFiles": []}
            snap = self.find_last(message_id)
            if snap is None:
                raise Exception(f"未找到 messageId={message_id} 对应的文件快照。")
            changed: list[str] = []
            failed: list[dict] = []
            for key in list(self.tracked):
                path = self.absolute(key)
                try:
                    b = self.target_backup(snap, key)
                    name = b.get("backupFileName", _UNDEF) if b else _UNDEF
                    if name is _UNDEF or (b and b.get("captureFailed")):
                        raise Exception("No usable backup was captured for this checkpoint.")
                    if name is None:
                        try:
                            node_call("unlink", os.unlink, path, path=path)
                            changed.append(path)
                        except NodeError as e:
                            if not is_enoent(e):
                                raise
                        continue
                    if not self.try_stat(self.backup_path(name)):
                        raise Exception("The checkpoint backup is missing.")
                    if self.origin_changed(path, name):
                        self.restore_backup(path, name)
                        changed.append(path)
                except Exception as e:  # noqa: BLE001 - per-file failures are collected
                    failed.append({"path": path, "error": str(e)})
            return {"filesChanged": changed, "failedFiles": failed}

    def diff_stats(self, message_id: str) -> Optional[dict]:
        # getDiffStats ~144114192 with computeDiffStatsForFile ~144116551.
        with self.lock:
            snap = self.find_last(message_id)
            if snap is None:
                return None
            files: list[str] = []
            failed: list[dict] = []
            ins = dels = 0
            for key in list(self.tracked):
                path = self.absolute(key)
                b = self.target_backup(snap, key)
                name = b.get("backupFileName", _UNDEF) if b else _UNDEF
                try:
                    if name is _UNDEF or (b and b.get("captureFailed")):
                        raise Exception("No usable backup was captured for this checkpoint.")
                    a, r = self.file_diff_stats(path, None if name is None else name)
                except Exception as e:  # noqa: BLE001
                    failed.append({"path": path, "error": str(e)})
                    continue
                if (a > 0 or r > 0) and path not in files:
                    files.append(path)
                elif name is None and self.exists(path):
                    files.append(path)
                ins += a
                dels += r
            out: dict[str, Any] = {"filesChanged": files, "insertions": ins, "deletions": dels}
            if failed:
                out["failedFiles"] = failed
            return out

    @staticmethod
    def exists(path: str) -> bool:
        # gu(): ENOENT -> false; any other stat error propagates (and fails the request).
        try:
            os.stat(path)
            return True
        except FileNotFoundError:
            return False
        except OSError as e:
            raise NodeError(e.errno or errno.EIO, "stat", path) from e

    def file_diff_stats(self, path: str, name: Optional[str]) -> tuple[int, int]:
        current = read_or_none(path)
        backup = read_or_none(self.backup_path(name)) if name else None
        if name and backup is None:
            raise Exception("The checkpoint backup is missing.")
        if current is None and backup is None:
            return 0, 0
        # diffLines(current, backup): what the rewind would add is `added`.
        return diff_lines_counts(
            current.decode("utf-8", "replace") if current is not None else "",
            backup.decode("utf-8", "replace") if backup is not None else "",
        )


def read_or_none(path: str) -> Optional[bytes]:
    # fu(): readFile, ENOENT -> null, anything else throws.
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError as e:
        raise NodeError(errno.EISDIR, "read") from e
    except OSError as e:
        raise NodeError(e.errno or errno.EIO, "open", path) from e


def copy_file(src: str, dst: str, exclusive: bool) -> None:
    """fs.copyFile: follows symlinks, creates dst with src's mode, truncates in place."""
    try:
        st = os.stat(src)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
        with open(src, "rb") as fin:
            fd = os.open(dst, flags, stat.S_IMODE(st.st_mode))
            try:
                while True:
                    chunk = fin.read(1 << 20)
                    if not chunk:
                        break
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
            finally:
                os.close(fd)
    except OSError as e:
        raise NodeError(e.errno or errno.EIO, "copyfile", src, dst) from e


# --------------------------------------------------------------------------------------
# Tools. The writers follow the binary: realpath of the target, then ti() (UTF-16 chunk
# ~139423104): write <path>.tmp.<pid>.<ms> (fsync), chmod it to the old file's mode,
# rename over; on EXDEV/EPERM/EEXIST/EBUSY at rename (or EACCES staging next to an existing
# file) write the file directly.
# --------------------------------------------------------------------------------------


def io_path(path: str) -> str:
    """ab() ~143185690: realpath, or realpath(parent)/basename for a missing file."""
    try:
        return os.path.realpath(path, strict=True)
    except FileNotFoundError:
        if os.path.islink(path):
            raise NodeError(errno.ENOENT, "realpath", path)
        parent = os.path.dirname(path)
        if parent == path:
            raise
        return os.path.join(io_path(parent), os.path.basename(path))


def read_text_file(path: str) -> tuple[str, str, str]:
    """cf() ~139424512: (content with CRLF->LF, encoding, line endings)."""
    with open(path, "rb") as f:
        raw = f.read()
    enc = "utf16le" if raw[:2] == b"\xff\xfe" else "utf8"
    text = raw.decode("utf-16-le" if enc == "utf16le" else "utf-8", "replace")
    head = text[:4096]
    crlf = sum(1 for i, ch in enumerate(head) if ch == "\n" and i > 0 and head[i - 1] == "\r")
    lf = head.count("\n") - crlf
    return text.replace("\r\n", "\n"), enc, ("CRLF" if crlf > lf else "LF")


def write_text_atomic(path: str, content: str, encoding: str = "utf8", line_endings: str = "LF") -> None:
    if line_endings == "CRLF":
        content = content.replace("\r\n", "\n").replace("\n", "\r\n")
    data = content.encode("utf-16-le" if encoding == "utf16le" else "utf-8")
    target = path
    if os.path.islink(target):  # M0e(): one readlink
        link = os.readlink(target)
        target = link if os.path.isabs(link) else os.path.join(os.path.dirname(target), link)
    tmp = f"{target}.tmp.{os.getpid()}.{int(time.time() * 1000)}"
    mode = None
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        pass
    stage = "staging"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode is not None:
            os.chmod(tmp, mode)
        stage = "rename"
        os.rename(tmp, target)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fallback = (stage == "rename" and e.errno in (errno.EXDEV, errno.EPERM, errno.EEXIST, errno.EBUSY)) or (
            stage == "staging" and mode is not None and e.errno == errno.EACCES)
        if not fallback:
            raise
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


class ToolError(Exception):
    pass


class BashFailed(ToolError):
    """A Bash command that exited non-zero: the tool fails with its result attached."""

    def __init__(self, text: str, result: dict):
        super().__init__(text)
        self.result = result


def nq_replace(content: str, old: str, new: str, allow_multiple: bool) -> str:
    """nQ() ~143188696, including its "delete the line's newline too" rule."""
    def rep(c: str, o: str, n: str) -> str:
        return c.replace(o, n) if allow_multiple else c.replace(o, n, 1)
    if new != "":
        return rep(content, old, new)
    if not old.endswith("\n") and (old + "\n") in content:
        return rep(content, old + "\n", new)
    return rep(content, old, new)


# --------------------------------------------------------------------------------------
# Scenario
# --------------------------------------------------------------------------------------


def _norm_block(b: Any) -> dict:
    if isinstance(b, str):
        return {"type": "text", "text": b}
    if "tool" in b and "type" not in b:
        out = {"type": "tool_use", "name": b["tool"], "input": b.get("input", {})}
    elif b.get("type") == "tool_use" or ("name" in b and "type" not in b):
        out = {"type": "tool_use", "name": b["name"], "input": b.get("input", {})}
    else:
        return dict(b)
    if "id" in b:
        out["id"] = b["id"]
    return out


def load_scenario() -> dict:
    src = os.environ.get("FAKE_QODER_SCENARIO", "")
    if not src:
        return {"turns": [], "default_text": "Done."}
    raw = json.loads(src) if src.lstrip()[:1] in "{[" else json.load(open(src, encoding="utf-8"))
    if isinstance(raw, list):
        raw = {"turns": raw}
    turns_src = raw.get("turns")
    if turns_src is None:
        turns_src = [s for s in raw.get("steps", []) if "responses" in s]
    turns = []
    for t in turns_src:
        if isinstance(t, list):
            t = {"responses": t}
        if "responses" in t:
            responses = [[_norm_block(b) for b in (r if isinstance(r, list) else [r])] for r in t["responses"]]
        else:
            responses = [[_norm_block({"tool": x["name"], "input": x.get("input", {}), **({"id": x["id"]} if "id" in x else {})})]
                         for x in t.get("tools", [])]
        turns.append({"match": t.get("match"), "responses": responses, "text": t.get("text")})
    return {"turns": turns, "default_text": raw.get("default_text", "Done.")}


def subst_ws(value: Any, ws: str) -> Any:
    if isinstance(value, str):
        return value.replace("{ws}", ws)
    if isinstance(value, list):
        return [subst_ws(v, ws) for v in value]
    if isinstance(value, dict):
        return {k: subst_ws(v, ws) for k, v in value.items()}
    return value


def zero_usage() -> dict:
    # The shape the real 1.1.76 prints (seen in its auth_required result, run offline).
    return {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": 0, "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            "service_tier": "standard",
            "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
            "inference_geo": "", "iterations": [], "speed": "standard"}


def block_uuid(base: str, index: int, multiple: bool) -> str:
    """mk() ~143733296: one stream message per content block; several share a prefix."""
    return f"{base[:24]}{index:012x}" if multiple else base


class TurnAborted(Exception):
    pass


# --------------------------------------------------------------------------------------
# Settings command hooks (not on the wire). The binary's hook registry (~143503994) holds the
# SDK's runtime hooks from `initialize` and the `hooks` of each settings file; one event's
# matching hooks run together (Promise.all, ~142580575) and the CLI waits for all of them.
# --------------------------------------------------------------------------------------

# br ~141367286: every event name the registry accepts; Vne: keys skipped without complaint.
HOOK_EVENTS = [
    "PreToolUse", "PostToolUse", "PostToolUseFailure", "SubagentStart", "Notification", "SubagentStop",
    "SessionStart", "Setup", "SessionEnd", "PreCompact", "PostCompact", "Stop", "QueryEnd",
    "UserPromptSubmit", "ConfigChange", "StopFailure", "TeammateIdle", "InstructionsLoaded", "CwdChanged",
    "FileChanged", "WorktreeCreate", "WorktreeRemove", "Elicitation", "ElicitationResult", "TaskCreated",
    "TaskCompleted", "PermissionRequest", "PermissionDenied",
]
HOOK_SKIPPED_KEYS = ("enabled", "disabled", "notifications")
HOOK_TYPES = ("command", "runtime", "http", "prompt", "agent")  # o0
# getSourcePriority ~143507681: the plan's order (a stable sort of the registry's entries).
SOURCE_PRIORITY = {"runtime": 0, "flag": 0.5, "project": 1, "local": 1.5, "user": 2, "system": 3, "plugins": 4}
COMMAND_HOOK_TIMEOUT = 600  # Vxe ~142576441 (seconds)
EXIT_BLOCK = 2  # sC ~142577610
ENV_FILE_EVENTS = ("Setup", "SessionStart", "CwdChanged", "FileChanged")  # R8e ~141926928
USER_PROMPT_BLOCKED = "Agent execution blocked by hook"
USER_PROMPT_BLOCKED_CODE = 48716  # error_code of that result, as the real 1.1.76 printed it


def strip_json_comments(text: str) -> str:
    """hLe (strip-json-comments), enough for settings files: // and /* */ outside strings."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def read_settings_file(path: str) -> dict:
    # Kce ~141071549: a missing file is {}; BOM stripped, comments allowed, must be an object.
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
    except OSError:
        return {}
    try:
        v = json.loads(strip_json_comments(raw.lstrip("\ufeff")))
    except ValueError as e:
        debug(f"settings {path}: {e}")
        return {}
    return v if isinstance(v, dict) else {}


def same_dir(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


class Settings:
    """The settings the binary resolves at start (SettingsService.resolve ~141073122, dr()
    ~148550822): user `<config>/settings.json`, project `<cwd>/.qoder/settings.json`, local
    `<cwd>/.qoder/settings.local.json` (only the cwd: no walking up, not even to a git root),
    flag `--settings` (inline JSON object or a file, relative to the cwd), filtered by
    `--setting-sources` (x6 ~148657067). The project and local files are not read when the cwd
    is the home directory (fLe / isWorkspaceHomeDir ~141038825) or when the project file is the
    user file. `merged` = user < project < local < flag (a headless session always merges the
    project files: Gce ~141071184)."""

    def __init__(self, cwd: str, args: dict, argv: list[str]):
        self.cwd = cwd
        self.sources = self.parse_setting_sources(argv)  # None: every source
        self.user_path = os.path.join(default_config_dir(), "settings.json")
        proj_dir = os.path.join(cwd, config_dir_name())
        self.project_path = os.path.join(proj_dir, "settings.json")
        self.local_path = os.path.join(proj_dir, "settings.local.json")
        skip_project = same_dir(self.project_path, self.user_path) or same_dir(cwd, os.path.expanduser("~"))
        want = set(self.sources) if self.sources is not None else {"user", "project", "local"}
        self.layers: dict[str, dict] = {
            "user": read_settings_file(self.user_path) if "user" in want else {},
            "project": read_settings_file(self.project_path) if "project" in want and not skip_project else {},
            "local": read_settings_file(self.local_path) if "local" in want and not skip_project else {},
            "flag": self.read_flag(args.get("settings")),
        }

    @staticmethod
    def parse_setting_sources(argv: list[str]) -> Optional[list[str]]:
        # x6 ~148657067: every --setting-sources value, comma-split, trimmed, only
        # user/project/local; absent flag -> None (all sources).
        vals, seen = [], False
        i = 0
        while i < len(argv):
            a = argv[i]
            if a == "--":
                break
            if a == "--setting-sources":
                seen = True
                if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    vals.append(argv[i + 1])
                    i += 1
            elif a.startswith("--setting-sources="):
                seen = True
                vals.append(a[len("--setting-sources="):])
            i += 1
        if not seen:
            return None
        return [t.strip() for v in vals for t in v.split(",") if t.strip() in ("user", "project", "local")]

    def read_flag(self, flag: Any) -> dict:
        # Zw ~148655564: an object literal is written to a temp file, a path is read as is.
        if not isinstance(flag, str) or not flag.strip():
            return {}
        f = flag.strip()
        if f.startswith("{") and f.endswith("}"):
            try:
                v = json.loads(strip_json_comments(f))
                return v if isinstance(v, dict) else {}
            except ValueError:
                return {}
        return read_settings_file(f if os.path.isabs(f) else os.path.join(self.cwd, f))

    def merged(self, *keys: str) -> Any:
        """The last layer's value at `keys` (a deep merge, seen through one path)."""
        out: Any = None
        for name in ("user", "project", "local", "flag"):
            v: Any = self.layers[name]
            for k in keys:
                v = v.get(k) if isinstance(v, dict) else None
            if v is not None:
                out = v
        return out

    def source_allowed(self, source: str) -> bool:
        # isSettingSourceAllowed ~143885233: with --setting-sources only the listed ones, so
        # never "flag" (hooks from --settings are then skipped too).
        return self.sources is None or source in self.sources


class HookEntry:
    __slots__ = ("source", "event", "matcher", "sequential", "is_async", "config")

    def __init__(self, source: str, event: str, matcher: Any, sequential: Any, is_async: Any, config: dict):
        self.source, self.event, self.matcher = source, event, matcher
        self.sequential, self.is_async, self.config = sequential is True, is_async is True, config


def validate_hook(cfg: dict) -> Optional[str]:
    # validateHookConfig ~143506947.
    t = cfg.get("type")
    if t not in HOOK_TYPES:
        return f"Invalid hook type: {t}"
    if t == "command" and not cfg.get("command"):
        return "Command hook missing command field"
    if t == "command" and "args" in cfg:
        if not isinstance(cfg["args"], list) or not all(isinstance(a, str) for a in cfg["args"]):
            return "Command hook 'args' must be an array of strings"
    if t == "runtime" and not cfg.get("name"):
        return "Runtime hook missing name field"
    if t == "http" and not cfg.get("url"):
        return "HTTP hook missing url field"
    if t in ("prompt", "agent") and not cfg.get("prompt"):
        return f"{t.capitalize()} hook missing prompt field"
    return None


def load_settings_hooks(settings: Settings) -> list[HookEntry]:
    """processHooksFromConfig ~143503994: project, local, user, flag (then plugins, system),
    each file's own `hooks` (not the merged ones). Project and local need a trusted folder
    (isTrustedFolder ~143886076: always, unless security.folderTrust.enabled)."""
    entries: list[HookEntry] = []
    folder_trust = settings.merged("security", "folderTrust", "enabled") is True
    for source, requires_trust in (("project", True), ("local", True), ("user", False), ("flag", False)):
        hooks = settings.layers[source].get("hooks")
        if not hooks or not settings.source_allowed(source):
            continue
        if requires_trust and folder_trust:
            # trustedFolder needs the folder-trust store; the fake treats it as untrusted.
            debug(f"{source} hooks disabled because the folder is not trusted.")
            continue
        if not isinstance(hooks, dict):
            continue
        for event, defs in hooks.items():
            if event in HOOK_SKIPPED_KEYS:
                continue
            if event not in HOOK_EVENTS:
                debug(f'Invalid hook event name: "{event}" from {source} config. Skipping.')
                continue
            if not isinstance(defs, list):
                continue
            for d in defs:  # processHookDefinition
                if not isinstance(d, dict) or not isinstance(d.get("hooks"), list):
                    continue
                for cfg in d["hooks"]:
                    if not isinstance(cfg, dict) or validate_hook(cfg) is not None:
                        continue
                    is_async = cfg.get("async") if cfg.get("type") == "command" else None
                    entries.append(HookEntry(source, event, d.get("matcher"), d.get("sequential"),
                                             d.get("async") if is_async is None else is_async, dict(cfg)))
    return entries


def match_tool_name(matcher: str, tool_name: str) -> bool:
    # matchesToolName ~143510625: new RegExp(matcher).test(name), NOT anchored ("Edit" also
    # matches NotebookEdit, "rite" matches Write); an invalid pattern compares for equality.
    try:
        return re.search(matcher, tool_name) is not None
    except re.error:
        return matcher == tool_name


def match_trigger(matcher: str, trigger: str) -> bool:
    # matchesTrigger: "a|b" without other regex characters is a list; regex characters make a
    # pattern; anything else is compared.
    special = r"[.*+?^${}()[\]\\]"
    if "|" in matcher and not re.search(special, matcher):
        return trigger in [s.strip() for s in matcher.split("|")]
    if re.search(r"[.*+?^${}()|[\]\\]", matcher):
        try:
            return re.search(matcher, trigger) is not None
        except re.error:
            return matcher == trigger
    return matcher == trigger


def matches_context(matcher: Any, ctx: Optional[dict]) -> bool:
    """matchesContext ~143508881. ctx: None for events without one (UserPromptSubmit, Stop:
    the matcher is ignored), {"tool_name", "tool_input"} for tool events, {"trigger"} for
    SessionStart (source), SessionEnd (reason), QueryEnd (reason), StopFailure (error)..."""
    if not matcher or not isinstance(matcher, str) or not ctx:
        return True
    m = matcher.strip()
    if m in ("", "*"):
        return True
    if ctx.get("tool_name"):
        return match_tool_name(m, ctx["tool_name"])
    if ctx.get("trigger"):
        return match_trigger(m, ctx["trigger"])
    return True


def matches_if(cfg: dict, ctx: Optional[dict]) -> bool:
    # matchesHookConfigIf ~143509097: "Tool" or "Tool(argPattern)"; needs a tool context. The argument
    # pattern is matched against the first of command/file_path/filePath/path/url/query/
    # pattern (prefix "x:*" / glob / exact; the binary also splits compound shell commands).
    cond = cfg.get("if")
    if not cond or not ctx:
        return True
    if not ctx.get("tool_name"):
        return False
    cond = str(cond)
    k = cond.find("(")
    tool, arg = (cond.strip(), None) if k < 0 else (cond[:k].strip(), cond[k + 1:].strip().rstrip(")").strip() or None)
    if not match_tool_name(tool, ctx["tool_name"]):
        return False
    if not arg or not isinstance(ctx.get("tool_input"), dict):
        return True
    ti = ctx["tool_input"]
    primary = next((ti[key] for key in ("command", "file_path", "filePath", "path", "url", "query", "pattern")
                    if isinstance(ti.get(key), str)), None)
    if primary is None:
        primary = next((v for v in ti.values() if isinstance(v, str)), None)
    if primary is None:
        return False
    if arg.endswith(":*"):
        pre = arg[:-2]
        return primary == pre or primary.startswith(pre + " ")
    if "*" in arg:
        return re.fullmatch(".*".join(re.escape(p) for p in arg.split("*")), primary, re.S) is not None
    return arg == primary


def hook_dedup_key(cfg: dict) -> str:
    # deduplicateHooks + gm() ~141368323: the same command from two files runs once.
    cond = cfg.get("if") or ""
    if cfg.get("type") == "command":
        if "args" in cfg:
            return f"\0command\0exec\0{cfg['command']}\0{json.dumps(cfg['args'])}\0{cond}"
        return f"\0command\0{cfg.get('shell') or 'bash'}\0{cfg['command']}\0{cond}"
    if cfg.get("type") == "runtime":
        return f"\0runtime\0{cfg.get('name')}"
    return f"\0{cfg.get('type')}\0{cfg.get('url') or cfg.get('prompt', '')[:64]}\0{cond}"


def hook_name(cfg: dict) -> str:
    # Vr(): statusMessage, else the command (url / prompt / name for the other types).
    return cfg.get("statusMessage") or cfg.get("command") or cfg.get("url") or cfg.get("prompt") or cfg.get("name") or ""


class HookResult:
    """One hook's outcome, reduced to what the fake acts on."""
    __slots__ = ("entry", "output", "exit_code", "stdout", "stderr", "blocked", "reason", "text")

    def __init__(self, entry: HookEntry):
        self.entry = entry
        self.output: Optional[dict] = None  # a JSON object the hook answered (SDK or stdout)
        self.exit_code: Optional[int] = None
        self.stdout = self.stderr = ""
        self.blocked = False  # decision "deny": exit 2, or a JSON deny/block
        self.reason = ""
        self.text: Optional[str] = None  # plain stdout of a successful command hook


def run_command_hook(entry: HookEntry, event: str, hook_input: dict, index: int, session_id: str) -> HookResult:
    """executeCommandHook ~142591703: `bash -c <command>` (bash on PATH, else /bin/sh; the
    exec form `args` runs the command itself), in the input's cwd, detached (its own process
    group), the input as compact JSON on stdin (then closed), the CLI's env plus
    QODER_PROJECT_DIR/CLAUDE_PROJECT_DIR (the project root: the session cwd),
    QODER_HOOK_SOURCE=cli, QODER_HOOK_VERSION, QODER_SITE=GLOBAL, the hook's own `env`, minus
    QODER_SDK_ACCESS_TOKEN; QODER_ENV_FILE for Setup/SessionStart/CwdChanged/FileChanged. No
    variable names the CLI's pid: a hook finds it as its parent (bash execs a single command).
    Waits for the exit (timeout s, default 600: SIGKILL to the group). Exit 0: stdout that
    starts with `{` or `"` is JSON (a PreToolUse hook whose JSON does not parse is a deny),
    else text; exit 2: deny, the reason is stderr; anything else: a non-blocking error."""
    cfg = entry.config
    r = HookResult(entry)
    cwd = hook_input.get("cwd") or os.getcwd()
    project = cwd
    env = dict(os.environ)
    env.update({"QODER_PROJECT_DIR": project, "CLAUDE_PROJECT_DIR": project, "QODER_HOOK_SOURCE": "cli",
                "QODER_HOOK_VERSION": os.environ.get("QODER_CLIENT_VERSION") or VERSION, "QODER_SITE": "GLOBAL"})
    if isinstance(cfg.get("env"), dict):
        env.update({str(k): str(v) for k, v in cfg["env"].items()})
    for k in [k for k in env if k.upper() == "QODER_SDK_ACCESS_TOKEN"]:
        del env[k]
    exec_form = "args" in cfg
    if not exec_form and event in ENV_FILE_EVENTS:
        # M8e ~141927332: <config>/session-env/<session>/<event>-hook-<n>.sh, created empty.
        p = os.path.join(default_config_dir(), "session-env", session_id, f"{event.lower()}-hook-{index}.sh")
        try:
            os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
            with open(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w"):
                pass
            env["QODER_ENV_FILE"] = p
        except OSError:
            pass
    if exec_form:
        def expand(t: str) -> str:  # replacePlaceholders (exec form only; bash expands the rest)
            return re.sub(r"\$\{(?:QODER|CLAUDE)_PROJECT_DIR\}", lambda _: project, t)
        argv = [expand(cfg["command"]), *(expand(a) for a in cfg.get("args") or [])]
    else:
        argv = [shutil.which("bash") or "/bin/sh", "-c", cfg["command"]]
    timeout = cfg.get("timeout") if isinstance(cfg.get("timeout"), (int, float)) else COMMAND_HOOK_TIMEOUT
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        r.exit_code, r.stderr = 1, str(e)
        debug(f"hook {hook_name(cfg)!r} ({event}) failed to start: {e}")
        return r
    bufs: dict[str, list[bytes]] = {"out": [], "err": []}

    def pump(stream, key: str) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            bufs[key].append(chunk)

    readers = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
    for t in readers:
        t.start()
    try:
        proc.stdin.write(json.dumps(hook_input, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        r.exit_code, r.stderr = -1, f"Hook timed out after {timeout}s"
        debug(f"hook {hook_name(cfg)!r} ({event}): {r.stderr}")
        return r
    for t in readers:  # the binary settles at the exit event: output still in flight is lost
        t.join(0.2)
    r.exit_code = code
    r.stdout = b"".join(bufs["out"]).decode("utf-8", "replace")
    r.stderr = b"".join(bufs["err"]).decode("utf-8", "replace")
    if code == 0:
        out = r.stdout.strip()
        if out.startswith("{") or out.startswith('"'):
            try:
                v = json.loads(out)
                if isinstance(v, str) and v.strip().startswith("{"):
                    v = json.loads(v.strip())
                if isinstance(v, dict):
                    r.output = v
                else:
                    r.text = out
            except ValueError as e:
                if event == "PreToolUse":
                    r.blocked, r.reason = True, f"PreToolUse hook returned malformed JSON output: JSON Parse error: {e}"
                else:
                    r.text = out
        elif out:
            r.text = out
    elif code == EXIT_BLOCK:
        r.blocked, r.reason = True, r.stderr.strip() or "Hook blocked with exit code 2"
    else:
        debug(f'[HookRunner] Hook "{hook_name(cfg)}" (event: {event}) exited with code {code}. stderr: {r.stderr.strip()[:2000]}')
    return r


# --------------------------------------------------------------------------------------
# The session transcript, as the binary's SessionTranscriptWriter (_we ~143735348) writes it:
# <config>/projects/<cwd, non-alnum -> '-'>/<session>.jsonl, one JSON object per line.
# --------------------------------------------------------------------------------------


def js_hash36(s: str) -> str:
    # Fe() ~133986073: n=5381; n = n*33 ^ code unit (int32), then Math.abs(n).toString(36).
    n = 5381
    units = s.encode("utf-16-le")
    for i in range(0, len(units), 2):
        c = units[i] | (units[i + 1] << 8)
        x = (n * 33) & 0xFFFFFFFF
        x = x - (1 << 32) if x >= (1 << 31) else x
        n = x ^ c
    n = abs(n)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = digits[d] + out
        if n == 0:
            return out


def project_dir_name(cwd: str) -> str:
    # rn() ~133986158: every UTF-16 code unit not [a-zA-Z0-9] becomes '-'; past 200 the name
    # is cut and the hash of the path appended.
    units = cwd.encode("utf-16-le")
    chars = []
    for i in range(0, len(units), 2):
        c = units[i] | (units[i + 1] << 8)
        ch = chr(c) if c < 128 else ""
        chars.append(ch if ch and (ch.isascii() and ch.isalnum()) else "-")
    name = "".join(chars)
    if len(name) <= 200:
        return name
    return f"{name[:200]}-{js_hash36(cwd)}"


def git_branch(cwd: str) -> str:
    # cI ~148519749: the branch of the repository holding cwd, else "HEAD".
    d = os.path.abspath(cwd)
    while True:
        g = os.path.join(d, ".git")
        try:
            if os.path.isfile(g):
                with open(g, encoding="utf-8") as f:
                    line = f.read().strip()
                if line.startswith("gitdir:"):
                    gd = line[7:].strip()
                    g = gd if os.path.isabs(gd) else os.path.join(d, gd)
            if os.path.isdir(g):
                with open(os.path.join(g, "HEAD"), encoding="utf-8") as f:
                    head = f.read().strip()
                return head[len("ref: refs/heads/"):] if head.startswith("ref: refs/heads/") else "HEAD"
        except OSError:
            return "HEAD"
        parent = os.path.dirname(d)
        if parent == d:
            return "HEAD"
        d = parent


class Transcript:
    """What the transcript shows and when (checked against the real 1.1.76, run offline):

    - nothing is written before the first user/assistant entry: metadata and
      file-history-snapshot entries wait (pendingEntriesBeforeMaterialization), then go first:
      workspace-directories, runtime-config, worktree-state, ...;
    - a chain of messages (recordMessages ~143740011) is written as entries with parentUuid,
      isSidechain, cwd, sessionId, userType, entrypoint "cli", version, gitBranch and a fresh
      timestamp (Eat ~143749702), then an `active-leaf`; after an assistant entry that ends the
      turn, the metadata tail: last-prompt, workspace-directories, runtime-config, active-leaf;
    - the binary's channel (hwe ~143718638) batches appends for up to 100 ms but every record is
      awaited, so the moments below are when the lines are on disk. The fake writes at once.
    """

    def __init__(self, path: str, session_id: str, cwd: str, model: str, enabled: bool):
        self.path, self.session_id, self.cwd, self.model, self.enabled = path, session_id, cwd, model, enabled
        self.branch = git_branch(cwd) if enabled else "HEAD"
        self.runtime_ts = int(time.time() * 1000)
        self.materialized = False
        self.pending: list[dict] = [{"type": "worktree-state", "sessionId": session_id, "worktreeSession": None}]
        self.parent: Optional[str] = None
        self.last_prompt: Optional[str] = None
        self.lock = threading.Lock()
        if enabled and os.path.exists(path):  # --resume: the existing file is adopted
            self.materialized, self.pending = True, []
            try:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        try:
                            o = json.loads(line)
                        except ValueError:
                            continue
                        if o.get("type") in ("user", "assistant", "attachment", "system") and o.get("uuid"):
                            self.parent = o["uuid"]
            except OSError:
                pass

    def write(self, entries: list[dict]) -> None:
        if not entries:
            return
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        data = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data.encode("utf-8"))
        finally:
            os.close(fd)

    def metadata(self, leaf: Optional[dict]) -> list[dict]:
        # buildCachedMetadataEntries ~143748056.
        out: list[dict] = []
        if self.last_prompt:
            out.append({"type": "last-prompt", "sessionId": self.session_id, "lastPrompt": self.last_prompt})
        out.append({"type": "workspace-directories", "sessionId": self.session_id, "directories": [self.cwd]})
        out.append({"type": "runtime-config", "sessionId": self.session_id, "model": self.model,
                    "reasoningEffort": None, "contextWindow": None, "generation": None, "timestamp": self.runtime_ts})
        if leaf:
            out.append(leaf)
        return out

    def record_entry(self, entry: dict) -> None:
        """appendNonCachedEntry (file-history-snapshot): written, or held until the first message."""
        if not self.enabled:
            return
        with self.lock:
            if self.materialized:
                self.write([entry])
            else:
                self.pending.append(entry)

    def record_chain(self, messages: list[dict], prompt_text: Optional[str] = None) -> None:
        """insertMessageChain ~143745968. Each message is a dict in the entry's own key order
        with a "timestamp" key (refreshed here) and, for tool results, sourceToolAssistantUUID
        (which is then its parentUuid)."""
        if not self.enabled or not messages:
            return
        with self.lock:
            entries = []
            for m in messages:
                parent = m.get("sourceToolAssistantUUID") or self.parent
                e = dict(m)
                e["timestamp"] = now_iso()
                e.update({"parentUuid": parent, "isSidechain": False, "cwd": self.cwd, "sessionId": self.session_id,
                          "userType": "external", "entrypoint": "cli", "version": VERSION, "gitBranch": self.branch})
                entries.append(e)
                self.parent = m["uuid"]
            out: list[dict] = []
            if not self.materialized:
                out += self.metadata(None) + self.pending
                self.materialized, self.pending = True, []
            if prompt_text is not None:
                self.last_prompt = prompt_text
            leaf = {"type": "active-leaf", "sessionId": self.session_id, "leafUuid": self.parent, "explicit": False,
                    "timestamp": int(time.time() * 1000)}
            out += entries + [leaf]
            ends_turn = any(m["type"] == "assistant" and m["message"].get("stop_reason") not in (None, "tool_use")
                            for m in messages)
            if ends_turn:  # appendCachedMetadataEntriesToTail (ogr)
                out += self.metadata(leaf)
            self.write(out)


# --------------------------------------------------------------------------------------
# The session: stdin reader thread + one worker that runs turns and queued control
# requests in order (the binary's queue Me, async function* qt ~155695806).
# --------------------------------------------------------------------------------------


class Session:
    def __init__(self, argv: list[str]):
        self.args = self.parse_args(argv)
        self.cwd = os.path.abspath(os.getcwd())
        self.session_id = self.args.get("session-id") or self.args.get("resume") or new_uuid()
        self.model = self.args.get("model") or "auto"
        self.permission_mode = self.args.get("permission-mode") or ("yolo" if "yolo" in self.args else "default")
        self.replay = "replay-user-messages" in self.args
        self.settings = Settings(self.cwd, self.args, argv)
        self.persistence = "no-session-persistence" not in self.args
        self.history = FileHistory(self.cwd, self.session_id, self.checkpointing_enabled())
        # The transcript (sessionPersistence; not with --no-session-persistence) and the
        # history's snapshots in it (recordSnapshot ~155644838).
        self.transcript = Transcript(self.transcript_path(), self.session_id, self.cwd,
                                     self.args.get("model") or "", self.persistence)
        self.history.recorder = self.transcript.record_entry if self.persistence else None
        # enableHooks (~144944477): no hook at all (the SDK's included) with disableAllHooks or
        # hooksConfig.enabled false; headless fast mode (--headless-fast-hooks,
        # QODER_HEADLESS_FAST_HOOKS, hooksConfig.headlessFastMode, ~154416834) skips every
        # hook but the CLI's internal ones.
        s = self.settings
        self.hooks_enabled = s.merged("disableAllHooks") is not True and s.merged("hooksConfig", "enabled") is not False
        self.hooks_disabled_fast = ("headless-fast-hooks" in self.args
                                    or os.environ.get("QODER_HEADLESS_FAST_HOOKS", "").strip().lower() in ("1", "true", "yes", "on")
                                    or s.merged("hooksConfig", "headlessFastMode") is True)
        self.settings_hooks = load_settings_hooks(s) if self.hooks_enabled else []
        self.background_hooks: list[threading.Thread] = []
        self.scenario = load_scenario()
        self.used_turns: set[int] = set()
        self.out_lock = threading.Lock()
        self.wire_log = os.environ.get("FAKE_QODER_WIRE_LOG")
        self.work: "queue.Queue[Optional[dict]]" = queue.Queue()
        self.pending: dict[str, dict] = {}  # our outbound control requests -> {"event", "response"}
        self.pending_lock = threading.Lock()
        self.hooks: dict[str, list[dict]] = {}
        self.initialized = False
        self.turn_active = False
        self.abort = threading.Event()
        self.seen_uuids: set[str] = set()
        self.queued_user_uuids: list[str] = []
        self.queued_users = 0  # user messages waiting behind the current turn (Le())
        self.eof = False
        self.cancelled_requests: set[str] = set()
        self.cancelled_user_uuids: set[str] = set()
        self.conversation: list[dict] = []  # {"uuid", "kind": "prompt"|"assistant"|"tool_result"}
        self.exit_requested = False

    # ---- argv / settings ----
    @staticmethod
    def parse_args(argv: list[str]) -> dict:
        flags_without_value = {"print", "verbose", "replay-user-messages", "include-partial-messages",
                               "disable-builtin-skills", "continue", "fork-session", "strict-mcp-config",
                               "dangerously-skip-permissions", "yolo", "no-session-persistence",
                               "session-mirror", "debug-to-stderr"}
        out: dict[str, Any] = {}
        i = 0
        while i < len(argv):
            a = argv[i]
            if a.startswith("--"):
                key, eq, val = a[2:].partition("=")
                if eq:
                    out[key] = val
                elif key in flags_without_value or i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    out[key] = True
                else:
                    out[key] = argv[i + 1]
                    i += 1
            i += 1
        return out

    def checkpointing_enabled(self) -> bool:
        # new Ip({enabled: getSessionPersistence() && getFileCheckpointingEnabled()})
        # ~155644921; fileCheckpointing defaults to true (~143818930). The SDK's initialize
        # field enableFileCheckpointing is not read by 1.1.76 (absent from the binary).
        if not self.persistence:
            return False
        v = self.settings.merged("general", "fileCheckpointing", "enabled")
        return v if isinstance(v, bool) else True

    # ---- output ----
    def emit(self, msg: dict) -> None:
        line = json.dumps(msg, ensure_ascii=False, separators=(",", ":"))
        with self.out_lock:
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):
                self.exit_requested = True  # the host is gone: finish quietly
            self.log_wire("out", msg)

    def log_wire(self, direction: str, msg: Any) -> None:
        if self.wire_log:
            with open(self.wire_log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"dir": direction, "t": time.time(), "msg": msg}, ensure_ascii=False) + "\n")

    def respond(self, request_id: str, subtype: str, payload: Optional[dict] = None) -> None:
        # j() ~154746613: {subtype, request_id[, response]} for success (no key when the
        # payload is empty), {subtype, request_id, error[, code]} for errors.
        inner: dict[str, Any] = {"subtype": subtype, "request_id": request_id}
        if subtype == "success":
            if payload:
                inner["response"] = payload
        else:
            inner["error"] = (payload or {}).get("error") or "Unknown error"
            if (payload or {}).get("code"):
                inner["code"] = payload["code"]
        self.emit({"type": "control_response", "response": inner})

    # ---- input ----
    def reader(self) -> None:
        for raw in sys.stdin:
            raw = raw.strip()
            if not raw:
                continue
            try:
                msg = json.loads(raw)
            except ValueError:
                debug("bad input line", raw[:200])
                continue
            self.log_wire("in", msg)
            try:
                self.on_input(msg)
            except Exception as e:  # noqa: BLE001 - never let the reader die
                debug("reader error", repr(e))
        debug("stdin EOF")
        # Nobody can answer a hook callback any more: release the waiters at once.
        self.eof = True
        with self.pending_lock:
            for slot in self.pending.values():
                slot["event"].set()
        self.work.put(None)

    def on_input(self, msg: dict) -> None:
        t = msg.get("type")
        if t == "control_response":
            resp = msg.get("response") or {}
            with self.pending_lock:
                slot = self.pending.get(resp.get("request_id"))
            if slot:
                slot["response"] = resp
                slot["event"].set()
            return
        if t in ("control_cancel_request", "control_cancel"):
            self.cancelled_requests.add(msg.get("request_id"))
            return
        if t == "control_request":
            req = msg.get("request") or {}
            sub = req.get("subtype") or req.get("type")
            # Answered at once, even mid-turn (kr() ~155692996); everything else queues.
            if sub == "interrupt":
                self.abort.set()
                payload: dict[str, Any] = {"still_queued": list(self.queued_user_uuids)}
                if req.get("cancel_queued") is True:
                    payload = {"still_queued": [], "cancelled": list(self.queued_user_uuids)}
                self.respond(msg["request_id"], "success", payload)
                return
            if sub == "cancel_async_message":  # Ie(): drop a queued user message by uuid
                u = req.get("message_uuid")
                if not isinstance(u, str) or not u:
                    self.respond(msg["request_id"], "error", {"error": "missing message_uuid"})
                    return
                queued = u in self.queued_user_uuids
                if queued:
                    self.queued_user_uuids.remove(u)
                    self.cancelled_user_uuids.add(u)
                self.respond(msg["request_id"], "success", {"cancelled": queued})
                return
            if sub == "rewind" and (self.turn_active or self.queued_users):
                self.rewind_rejected_busy(msg["request_id"], req)
                return
            self.work.put(msg)
            return
        if t == "user":
            u = msg.get("uuid")
            if isinstance(u, str) and u:
                if u in self.seen_uuids:
                    # ze() ~155689092: a uuid seen before is only echoed, never re-run.
                    if self.replay:
                        self.emit({"type": "user", "message": msg.get("message"), "session_id": self.session_id,
                                   "parent_tool_use_id": None, "uuid": u, "isReplay": True})
                    return
                self.seen_uuids.add(u)
                self.queued_user_uuids.append(u)
            if msg.get("priority") == "now" and self.turn_active:
                self.abort.set()
            self.queued_users += 1
            self.work.put(msg)
            return
        # keep_alive, feedback, ...: nothing to do

    def rewind_rejected_busy(self, request_id: str, req: dict) -> None:
        target = req.get("user_message_id")
        if not isinstance(target, str):
            return self.respond(request_id, "error", {"error": "missing user_message_id"})
        scope = self.rewind_scope(req.get("scope"))
        if not scope:
            return self.respond(request_id, "error", {"error": "invalid rewind scope"})
        self.respond(request_id, "success", {"status": "rejected", "targetUserMessageId": target, "scope": scope,
                                             "error": "Conversation rewind requires an idle session with no queued input."})

    # ---- outbound control requests (hook callbacks) ----
    def call_host(self, request: dict, timeout: float) -> Optional[dict]:
        rid = new_uuid()  # createRequest() ~144287014: a random UUID
        slot = {"event": threading.Event(), "response": None}
        with self.pending_lock:
            self.pending[rid] = slot
        self.emit({"type": "control_request", "request_id": rid, "request": request})
        ok = self.eof or slot["event"].wait(timeout)
        with self.pending_lock:
            self.pending.pop(rid, None)
        if not ok:
            self.emit({"type": "control_cancel_request", "request_id": rid})
            return None
        resp = slot["response"] or {}
        if resp.get("subtype") != "success":
            debug("hook callback failed:", resp.get("error"))
            return None
        return resp.get("response") or {}

    def base_hook_input(self, event: str) -> dict:
        # createCoreBaseInput/createBaseInput ~143525741.
        return {"session_id": self.session_id, "transcript_path": self.transcript_path(), "cwd": self.cwd,
                "hook_event_name": event, "permission_mode": self.permission_mode}

    def transcript_path(self) -> str:
        # tr() ~142774501 with rn() ~133986158 (the session's project root: its cwd).
        return os.path.join(default_config_dir(), "projects", project_dir_name(self.cwd), f"{self.session_id}.jsonl")

    def hook_plan(self, event: str, ctx: Optional[dict]) -> list[HookEntry]:
        """createExecutionPlan ~143507946: the registry's entries for the event by source
        priority (the SDK's runtime hooks first, then flag, project, local, user), those whose
        matcher fits the context, without duplicates (the same command twice runs once), and
        whose `if` holds."""
        if not self.hooks_enabled or self.hooks_disabled_fast:
            return []
        entries: list[HookEntry] = []
        for m in self.hooks.get(event, []):  # Ti(): one runtime hook per callback id
            for cid in m["callbackIds"]:
                cfg: dict[str, Any] = {"type": "runtime", "name": cid}
                if "timeout" in m:
                    cfg["timeout"] = m["timeout"]
                entries.append(HookEntry("runtime", event, m.get("matcher"), None, None, cfg))
        entries += [e for e in self.settings_hooks if e.event == event]
        entries.sort(key=lambda e: SOURCE_PRIORITY.get(e.source, 999))
        seen: set[str] = set()
        plan = []
        for e in entries:
            if not matches_context(e.matcher, ctx):
                continue
            key = hook_dedup_key(e.config)
            if key in seen:
                continue
            seen.add(key)
            if matches_if(e.config, ctx):
                plan.append(e)
        return plan

    def run_hook(self, e: HookEntry, event: str, hook_input: dict, index: int) -> HookResult:
        t = e.config.get("type")
        if t == "runtime":
            r = HookResult(e)
            if self.eof:
                return r  # nobody to answer a hook_callback
            req: dict[str, Any] = {"subtype": "hook_callback", "callback_id": e.config["name"], "input": hook_input}
            if isinstance(hook_input.get("tool_use_id"), str) and hook_input["tool_use_id"]:
                req["tool_use_id"] = hook_input["tool_use_id"]
            out = self.call_host(req, float(e.config.get("timeout") or COMMAND_HOOK_TIMEOUT))
            if isinstance(out, dict):
                r.output = out
            return r
        if t == "command":
            return run_command_hook(e, event, hook_input, index, self.session_id)
        debug(f"{t} hook for {event} not run by the fake")  # http, prompt, agent
        return HookResult(e)

    def fire_hooks(self, event: str, hook_input: dict, ctx: Optional[dict] = None) -> list[HookResult]:
        """executeHooks: every planned hook of the event at once (executeHooksParallel
        ~142580575; in order when one entry says `sequential`), waiting for all; `async`
        command hooks are started and not waited for."""
        plan = self.hook_plan(event, ctx)
        sync = [e for e in plan if not (e.is_async and e.config.get("type") == "command")]
        for i, e in enumerate(plan):
            if e not in sync:
                t = threading.Thread(target=self.run_hook, args=(e, event, hook_input, i), daemon=True)
                t.start()
                self.background_hooks.append(t)
        results: list[Optional[HookResult]] = [None] * len(sync)

        def one(i: int) -> None:
            try:
                results[i] = self.run_hook(sync[i], event, hook_input, i)
            except Exception as ex:  # noqa: BLE001 - a failing hook is a non-blocking error
                debug(f"hook {event} failed: {ex!r}")
                results[i] = HookResult(sync[i])

        if len(sync) == 1 or any(e.sequential for e in sync):
            for i in range(len(sync)):
                one(i)
        else:
            threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(sync))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return [r for r in results if r is not None]

    @staticmethod
    def hook_decision(r: HookResult) -> tuple[bool, str]:
        """A deny: exit 2 or unparsable PreToolUse JSON (r.blocked), or a JSON answer (the SDK's
        or a command's stdout) with decision block/deny or permissionDecision deny."""
        if r.blocked:
            return True, r.reason
        o = r.output or {}
        hso = o.get("hookSpecificOutput") if isinstance(o.get("hookSpecificOutput"), dict) else {}
        if hso.get("permissionDecision") == "deny" or o.get("decision") in ("block", "deny"):
            return True, hso.get("permissionDecisionReason") or o.get("reason") or "Blocked by hook"
        return False, ""

    # ---- worker ----
    def worker(self) -> None:
        while True:
            item = self.work.get()
            if item is None or self.exit_requested:
                return
            if item.get("type") == "user":
                self.queued_users -= 1
                u = item.get("uuid")
                if u in self.queued_user_uuids:
                    self.queued_user_uuids.remove(u)
                if u in self.cancelled_user_uuids:
                    self.cancelled_user_uuids.discard(u)
                    self.lifecycle(u, "cancelled")
                    continue
                try:
                    self.run_turn(item)
                except Exception as e:  # noqa: BLE001
                    debug("turn crashed", repr(e))
                    self.emit(self.result_error(["Unknown error: " + str(e)], 0, None))
            elif item.get("type") == "control_request":
                if item.get("request_id") in self.cancelled_requests:
                    continue
                try:
                    self.handle_control(item)
                except Exception as e:  # noqa: BLE001
                    self.respond(item["request_id"], "error", {"error": str(e) or "control request failed"})
                if self.exit_requested:
                    return

    # ---- control requests ----
    def handle_control(self, msg: dict) -> None:
        rid = msg["request_id"]
        req = msg.get("request") or {}
        sub = req.get("subtype") or req.get("type")
        if sub == "initialize":
            return self.on_initialize(rid, req)
        if sub == "rewind_files":
            return self.on_rewind_files(rid, req)
        if sub == "rewind":
            return self.on_rewind(rid, req)
        if sub == "end_session":
            self.respond(rid, "success")
            self.exit_requested = True
            return
        if sub in ("set_permission_mode", "set_model", "set_max_thinking_tokens", "apply_flag_settings"):
            if sub == "set_permission_mode" and isinstance(req.get("mode"), str):
                self.permission_mode = req["mode"]
            return self.respond(rid, "success")
        if sub == "mcp_status":
            return self.respond(rid, "success", {"mcpServers": []})
        self.respond(rid, "error", {"error": f'Unsupported control request type: "{sub}"'})

    def on_initialize(self, rid: str, req: dict) -> None:
        if self.initialized:
            return self.respond(rid, "error", {"error": "Already initialized"})
        # Ti() ~141577839: {eventName, callbackIds[, matcher][, timeout]} per matcher.
        for event, matchers in (req.get("hooks") or {}).items():
            for m in matchers or []:
                ids = [c for c in (m or {}).get("hookCallbackIds") or [] if isinstance(c, str) and c]
                if not ids:
                    continue
                entry: dict[str, Any] = {"callbackIds": ids}
                if isinstance(m.get("matcher"), str):
                    entry["matcher"] = m["matcher"]
                if isinstance(m.get("timeout"), (int, float)) and m["timeout"] >= 0:
                    entry["timeout"] = m["timeout"]
                self.hooks.setdefault(event, []).append(entry)
        self.initialized = True
        # zi() ~155639054.
        self.respond(rid, "success", {
            "commands": [], "agents": [], "skills": [], "output_style": "default",
            "available_output_styles": ["default"], "models": [], "account": {},
            "capabilities": list(CAPABILITIES), "pid": os.getpid(),
        })
        # shouldFireSessionStart: SessionStart hooks run once initialize has answered; the
        # matcher applies to the source.
        source = "resume" if self.args.get("resume") else "startup"
        self.fire_hooks("SessionStart", {**self.base_hook_input("SessionStart"), "source": source}, {"trigger": source})

    def end_session_hooks(self, reason: str = "other") -> None:
        # fireSessionEndEvent ~143514894: at the end of the session (stdin closed or
        # end_session; the real 1.1.76 sent reason "other"), after the last turn; the
        # matcher applies to the reason. Async hooks still running are waited for a moment.
        self.fire_hooks("SessionEnd", {**self.base_hook_input("SessionEnd"), "reason": reason}, {"trigger": reason})
        for t in self.background_hooks:
            t.join(4)

    def on_rewind_files(self, rid: str, req: dict) -> None:
        # case"rewind_files" ~155730097. The manager always exists in a headless session
        # (setFileHistoryManager(he) ~155645170), so "checkpointing off" answers "no
        # snapshot found" (nothing was ever snapshotted), not "not enabled".
        target = req.get("user_message_id")
        dry = req.get("dry_run") is True
        if not isinstance(target, str):
            return self.respond(rid, "error", {"error": "missing user_message_id"})
        try:
            h = self.history
            if not h.can_rewind(target):
                return self.respond(rid, "success", {"canRewind": False, "error": f"no snapshot found for message {target}"})
            if dry:
                d = h.diff_stats(target) or {}
                failed = d.get("failedFiles") or []
                payload: dict[str, Any] = {"canRewind": not failed}
                if failed:
                    payload["error"] = "Some files have no usable checkpoint backup: " + ", ".join(f["path"] for f in failed)
                payload.update({"filesChanged": d.get("filesChanged", []), "insertions": d.get("insertions", 0),
                                "deletions": d.get("deletions", 0)})
                return self.respond(rid, "success", payload)
            d = h.rewind_detailed(target)
            payload = {"canRewind": not d["failedFiles"]}
            if d["failedFiles"]:
                payload["error"] = incomplete_text(d)  # gp() ~144107151
            payload.update({"filesChanged": d["filesChanged"], "insertions": 0, "deletions": 0})
            self.respond(rid, "success", payload)
        except Exception as e:  # noqa: BLE001
            self.respond(rid, "error", {"error": str(e) or "rewind_files failed"})

    @staticmethod
    def rewind_scope(scope: Any) -> Optional[str]:
        s = "both" if scope is None else scope  # Ao() ~134259931
        return s if s in ("conversation", "files", "both") else None

    def on_rewind(self, rid: str, req: dict) -> None:
        # case"rewind" ~155727605.
        target = req.get("user_message_id")
        if not isinstance(target, str):
            return self.respond(rid, "error", {"error": "missing user_message_id"})
        scope = self.rewind_scope(req.get("scope"))
        if not scope:
            return self.respond(rid, "error", {"error": "invalid rewind scope"})
        dry = req.get("dry_run") is True
        conv = scope in ("conversation", "both")
        files = scope in ("files", "both")

        def reject(text: str) -> None:
            self.respond(rid, "success", {"status": "rejected", "targetUserMessageId": target, "scope": scope, "error": text})

        if self.turn_active or self.queued_users:
            return reject("Conversation rewind requires an idle session with no queued input.")
        plan = None
        if conv:
            plan = self.conversation_plan(target)
            if plan is None:
                return reject(f"Rewind target is not an eligible human input: {target}")
        stats = None
        if files:
            if not self.history.can_rewind(target):
                return reject(f"No file checkpoint found for user message {target}.")
            try:
                stats = self.history.diff_stats(target) or {"filesChanged": [], "insertions": 0, "deletions": 0}
            except Exception as e:  # noqa: BLE001
                return reject(str(e) or "Failed to inspect the file checkpoint.")
        g: dict[str, Any] = {"targetUserMessageId": target, "scope": scope}
        if plan is not None:
            g.update({"retainedLeafId": plan["retainedLeafId"], "removedMessageIds": plan["removedMessageIds"]})
        if stats is not None:
            g.update({"filesChanged": stats["filesChanged"], "insertions": stats["insertions"], "deletions": stats["deletions"]})
            if stats.get("failedFiles"):
                g["failedFiles"] = stats["failedFiles"]
        if dry:
            return self.respond(rid, "success", {"status": "ready", **g})
        if conv:
            self.conversation = self.conversation[: plan["index"]]
        changed = (stats or {}).get("filesChanged", [])
        failed: list[dict] = []
        if files:
            try:
                d = self.history.rewind_detailed(target)
                changed, failed = d["filesChanged"], d["failedFiles"]
            except Exception as e:  # noqa: BLE001
                text = str(e) or "Failed to rewind the file checkpoint."
                if not conv:
                    return reject(text)
                return self.respond(rid, "success", {"status": "partial", **g, "filesChanged": [], "failedFiles": [],
                                                     "error": f"Conversation was rewound, but file restoration failed: {text}"})
        payload: dict[str, Any] = {"status": "partial" if failed else "success", **g}
        if files:
            payload["filesChanged"] = changed
            payload["failedFiles"] = failed
        if failed:
            payload["error"] = f"{len(failed)} file(s) could not be restored."
        self.respond(rid, "success", payload)

    def conversation_plan(self, target: str) -> Optional[dict]:
        # yx()/zL() ~144195321: the target must be a human prompt; the retained leaf is the
        # last message before it; everything from it on is removed.
        for i, m in enumerate(self.conversation):
            if m["uuid"] == target and m["kind"] == "prompt":
                leaf = self.conversation[i - 1]["uuid"] if i > 0 else None
                return {"index": i, "retainedLeafId": leaf,
                        "removedMessageIds": [x["uuid"] for x in self.conversation[i:]]}
        return None

    # ---- turns ----
    def pick_turn(self, prompt: str) -> Optional[dict]:
        turns = self.scenario["turns"]
        for i, t in enumerate(turns):
            if i not in self.used_turns and t.get("match") and t["match"] in prompt:
                self.used_turns.add(i)
                return t
        for i, t in enumerate(turns):
            if i not in self.used_turns and not t.get("match"):
                self.used_turns.add(i)
                return t
        return None

    def init_message(self) -> dict:
        # zM() ~153037159, emitted before every turn (at() ~155659843).
        return {"type": "system", "subtype": "init", "apiKeySource": "none", "qodercli_version": VERSION,
                "protocol_version": PROTOCOL_VERSION, "cwd": self.cwd, "tools": list(TOOLS), "mcp_servers": [],
                "model": self.model, "permissionMode": self.permission_mode, "slash_commands": [],
                "output_style": "default", "agents": [], "skills": [], "plugins": [],
                "capabilities": list(CAPABILITIES), "fast_mode_state": "off", "uuid": new_uuid(),
                "session_id": self.session_id}

    def assistant_messages(self, blocks: list[dict], stop_reason: str) -> tuple[str, list[dict]]:
        base = new_uuid()
        message = {"id": "msg_" + uuidlib.uuid4().hex[:24], "container": None, "model": self.model,
                   "role": "assistant", "stop_reason": stop_reason, "stop_sequence": None, "type": "message",
                   "usage": zero_usage(), "content": blocks, "context_management": None}
        multiple = len(blocks) > 1
        out = []
        for i, b in enumerate(blocks):  # Wu() ~143733296: one stream message per block
            out.append({"type": "assistant", "message": {**message, "content": [b]}, "parent_tool_use_id": None,
                        "uuid": block_uuid(base, i, multiple), "session_id": self.session_id})
        return base, out

    def result_error(self, errors: list[str], num_turns: int, terminal: Optional[str]) -> dict:
        r: dict[str, Any] = {"type": "result", "subtype": "error_during_execution", "duration_ms": 0,
                             "duration_api_ms": 0, "is_error": True, "num_turns": num_turns, "stop_reason": None,
                             "total_cost_usd": 0, "total_credits": 0, "usage": zero_usage(), "modelUsage": {},
                             "permission_denials": [], "errors": errors}
        if terminal:
            r["terminal_reason"] = terminal
        r.update({"fast_mode_state": "off", "uuid": new_uuid(), "session_id": self.session_id})
        return r

    def lifecycle(self, command_uuid: Optional[str], state: str) -> None:
        if command_uuid:  # v() ~155685986 (the SDK skips this message type)
            self.emit({"type": "command_lifecycle", "command_uuid": command_uuid, "state": state,
                       "uuid": new_uuid(), "session_id": self.session_id})

    def run_turn(self, msg: dict) -> None:
        started = time.time()
        self.abort.clear()
        self.turn_active = True
        host_uuid = msg.get("uuid") if isinstance(msg.get("uuid"), str) and msg.get("uuid") else None
        try:
            content = (msg.get("message") or {}).get("content")
            prompt = content if isinstance(content, str) else "".join(
                b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")
            self.emit(self.init_message())
            turn_uuid = host_uuid or new_uuid()  # F=r.uuid??Se() ~155702601
            # ~155704500: the host's request_set_id (1-128 chars) or a new one; the prompt id
            # is new. Both go into the prompt's transcript entry; only request_set_id reaches
            # the hooks (UserPromptSubmit, Stop's parent_request_set_id, QueryEnd).
            rsid = msg.get("request_set_id")
            request_set_id = rsid if isinstance(rsid, str) and 0 < len(rsid) <= 128 else new_uuid()
            prompt_id = new_uuid()
            begin_at = int(time.time() * 1000)
            if self.replay:  # ht() ~155687483
                self.emit({"type": "user", "message": msg.get("message"), "parent_tool_use_id": None,
                           "uuid": turn_uuid, "session_id": self.session_id, "isReplay": True})
            self.lifecycle(host_uuid, "started")
            # submitMessageImpl ~144243798: makeSnapshot(uuid) before the prompt's hooks (a
            # snapshot that tracks files goes into the transcript now, under the new uuid).
            self.history.make_snapshot(turn_uuid)
            # qI -> Rv -> fireBefore ~144219000: the UserPromptSubmit hooks, before the prompt
            # is recorded: a hook does not find it in the transcript.
            ups = self.fire_hooks("UserPromptSubmit", {**self.base_hook_input("UserPromptSubmit"), "prompt": prompt,
                                                        "request_set_id": request_set_id})
            if any(self.hook_decision(r)[0] for r in ups):
                # Blocked: the prompt is dropped (no transcript entry, no Stop), the turn ends
                # with this result (seen from the real 1.1.76).
                err = self.result_error([USER_PROMPT_BLOCKED], 0, None)
                err = {k: v for k, v in err.items() if k not in ("fast_mode_state", "uuid", "session_id")}
                err.update({"error_code": USER_PROMPT_BLOCKED_CODE, "fast_mode_state": "off", "uuid": new_uuid(),
                            "session_id": self.session_id})
                self.emit(err)
                self.lifecycle(host_uuid, "cancelled")
                return
            self.conversation.append({"uuid": turn_uuid, "kind": "prompt"})
            # recordTranscriptMessages ~144246161, awaited before the model is asked: the typed
            # prompt (YM makes a string content a text block).
            blocks_in = content if isinstance(content, list) else [{"type": "text", "text": prompt}]
            chain = [{"type": "user", "uuid": turn_uuid, "timestamp": "", "message": {"role": "user", "content": blocks_in},
                                  "permissionMode": self.permission_mode, "origin": {"kind": "human"}, "promptId": prompt_id,
                                  "humanInput": {"text": prompt, "mode": "prompt"}, "requestSetId": request_set_id}]
            self.transcript.record_chain(chain, prompt_text=prompt)
            # Then, when the model is asked, a hook's plain stdout as a hook_success attachment.
            hook_out = [{"type": "attachment", "attachment": {"content": r.text, "hookName": "", "toolUseID": "",
                                                              "hookEvent": "UserPromptSubmit", "type": "hook_success"},
                         "uuid": new_uuid(), "timestamp": ""}
                        for r in ups if r.text and r.entry.config.get("type") == "command"]
            self.transcript.record_chain(hook_out)
            turn = self.pick_turn(prompt)
            responses = [list(r) for r in (turn or {}).get("responses", [])]
            final_text = (turn or {}).get("text") or self.scenario.get("default_text") or "Done."
            if not responses or any(b["type"] == "tool_use" for b in responses[-1]):
                responses.append([{"type": "text", "text": final_text}])
            num_turns = 0
            last_text = ""
            for blocks in responses:
                if self.abort.is_set():
                    raise TurnAborted()
                num_turns += 1
                blocks = [subst_ws(dict(b), self.cwd) for b in blocks]
                tool_blocks = []
                for b in blocks:
                    if b["type"] == "tool_use":
                        b.setdefault("id", "toolu_" + uuidlib.uuid4().hex[:24])
                        tool_blocks.append(b)
                    elif b["type"] == "text":
                        last_text = b.get("text", "")
                stop = "tool_use" if tool_blocks else "end_turn"
                wire_blocks = [{"type": "tool_use", "id": b["id"], "name": b["name"], "input": b["input"]}
                               if b["type"] == "tool_use" else b for b in blocks]
                a_uuid, a_msgs = self.assistant_messages(wire_blocks, stop)
                for m in a_msgs:
                    self.emit(m)
                self.conversation.append({"uuid": a_uuid, "kind": "assistant"})
                recorded = [False]

                def record_assistant(a_msgs=a_msgs, recorded=recorded) -> None:
                    # The binary runs a response's tools while the loop still records it: the
                    # entry landed after the first PreToolUse hooks ran and before the tool's
                    # trackEdit; with no tool, before Stop.
                    if not recorded[0]:
                        recorded[0] = True
                        self.transcript.record_chain(self.assistant_entries(a_msgs))

                if not tool_blocks:
                    record_assistant()
                    continue
                results = []
                for b in tool_blocks:
                    if self.abort.is_set():
                        raise TurnAborted()
                    results.append(self.run_tool(b, turn_uuid, record_assistant))
                record_assistant()
                r_uuid = new_uuid()
                multiple = len(results) > 1
                for i, (block, tool_use_result) in enumerate(results):  # ic() ~143733662
                    um: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": [block]},
                                          "parent_tool_use_id": None, "session_id": self.session_id,
                                          "uuid": block_uuid(r_uuid, i, multiple), "timestamp": now_iso(),
                                          "isSynthetic": False}
                    if tool_use_result is not None:
                        um["tool_use_result"] = tool_use_result
                    self.emit(um)
                self.conversation.append({"uuid": r_uuid, "kind": "tool_result"})
                # The results' entries, once every tool of the response ran: one per result, a
                # uuid of their own (not the wire's), parented on the assistant entry of its
                # tool_use, each followed by an active-leaf.
                tool_of = {m["message"]["content"][0].get("id"): m["uuid"] for m in a_msgs
                           if m["message"]["content"][0].get("type") == "tool_use"}
                for block, tool_use_result in results:
                    e: dict[str, Any] = {"type": "user", "uuid": new_uuid(), "timestamp": "",
                                         "message": {"role": "user", "content": [block]},
                                         "sourceToolAssistantUUID": tool_of.get(block["tool_use_id"]) or a_uuid,
                                         "promptId": prompt_id}
                    if tool_use_result is not None:
                        e["toolUseResult"] = tool_use_result
                    self.transcript.record_chain([e])
            # fireAfter -> fireStopEventWithContext ~143515996, then QueryEnd (notifyQueryEnd)
            # before the result.
            self.fire_hooks("Stop", {**self.base_hook_input("Stop"), "stop_hook_active": False,
                                     "last_assistant_message": last_text, "parent_request_set_id": request_set_id,
                                     "parent_business_info": {"product": "cli", "version": VERSION, "type": "agent",
                                                              "id": request_set_id, "name": prompt[:10],
                                                              "begin_at": begin_at, "stage": "processing"}})
            self.fire_hooks("QueryEnd", {**self.base_hook_input("QueryEnd"), "request_set_id": request_set_id,
                                         "business_id": request_set_id, "model": self.args.get("model") or "",
                                         "reason": "end_turn"}, {"trigger": "end_turn"})
            # buildResultSuccess ~144276562.
            self.emit({"type": "result", "subtype": "success", "duration_ms": int((time.time() - started) * 1000),
                       "duration_api_ms": 0, "is_error": False, "num_turns": num_turns, "result": last_text,
                       "stop_reason": "end_turn", "total_cost_usd": 0, "total_credits": 0, "usage": zero_usage(),
                       "modelUsage": {}, "permission_denials": [], "fast_mode_state": "off", "uuid": new_uuid(),
                       "session_id": self.session_id})
            self.lifecycle(host_uuid, "completed")
        except TurnAborted:
            self.emit(self.result_error(["Operation aborted"], 0, "aborted_tools"))
            self.lifecycle(host_uuid, "cancelled")
        finally:
            self.turn_active = False
            self.abort.clear()

    def assistant_entries(self, a_msgs: list[dict]) -> list[dict]:
        """The transcript's assistant entries: the wire's uuid per block, the message without
        usage/container/context_management (egr ~143751507), stop_reason only on the last
        block, text blocks with citations null. (The binary also writes requestTokenAnchor,
        hashes of the model request and response, which the fake has no model call for.)"""
        out = []
        for i, m in enumerate(a_msgs):
            wm = m["message"]
            block = dict(wm["content"][0])
            if block.get("type") == "text":
                block.setdefault("citations", None)
            out.append({"type": "assistant", "uuid": m["uuid"], "timestamp": "",
                        "message": {"id": wm["id"], "type": "message", "role": "assistant", "model": wm.get("model"),
                                    "stop_reason": wm["stop_reason"] if i == len(a_msgs) - 1 else None,
                                    "stop_sequence": None, "content": [block]}})
        return out

    def run_tool(self, block: dict, turn_uuid: str, after_pre=None) -> tuple[dict, Any]:
        name, tool_input, tid = block["name"], block["input"], block["id"]
        # validateInput runs before the hooks: a tool refused there gets no hook at all (the
        # real Edit of a missing file: no PreToolUse, no PostToolUseFailure).
        problem = self.validate(name, tool_input)
        if problem is not None:  # as the real 1.1.76 answers a refused Edit
            return {"type": "tool_result", "tool_use_id": tid, "content": f"Error: {problem}", "is_error": True}, \
                {"isHardFailure": False}
        ctx = {"tool_name": name, "tool_input": tool_input}
        pre = {**self.base_hook_input("PreToolUse"), "tool_use_id": tid, "tool_name": name, "tool_input": tool_input}
        results = self.fire_hooks("PreToolUse", pre, ctx)  # firePreToolUseEvent ~143513205
        if after_pre:
            after_pre()
        for r in results:
            denied, reason = self.hook_decision(r)
            if denied:
                # A denied tool gets neither PostToolUse nor PostToolUseFailure. A command
                # hook's refusal reads as the real 1.1.76 wrote it (QN ~141369867).
                if r.entry.config.get("type") == "command":
                    cmd = r.entry.config.get("command", "")
                    text = f'Error: {hook_name(r.entry.config)} hook blocking error from command: "{cmd}": {reason}'
                    return {"type": "tool_result", "tool_use_id": tid, "content": text, "is_error": True}, {"isHardFailure": True}
                return {"type": "tool_result", "tool_use_id": tid, "content": reason, "is_error": True}, None
        for r in results:
            hso = (r.output or {}).get("hookSpecificOutput")
            if isinstance(hso, dict) and isinstance(hso.get("updatedInput"), dict):
                tool_input = hso["updatedInput"]
        ctx = {"tool_name": name, "tool_input": tool_input}
        try:
            text, tool_use_result = self.execute(name, tool_input, turn_uuid)
            block_out = {"type": "tool_result", "tool_use_id": tid, "content": text}
            post = {**self.base_hook_input("PostToolUse"), "tool_use_id": tid, "tool_name": name,
                    "tool_input": tool_input, "tool_response": tool_use_result}
            self.fire_hooks("PostToolUse", post, ctx)
            return block_out, tool_use_result
        except TurnAborted:
            raise
        except Exception as e:  # noqa: BLE001 - a failing tool is an is_error tool_result
            err = str(e)
            fail = {**self.base_hook_input("PostToolUseFailure"), "tool_use_id": tid, "tool_name": name,
                    "tool_input": tool_input, "error": err}  # firePostToolUseFailureEvent ~143515270
            self.fire_hooks("PostToolUseFailure", fail, ctx)
            # As the real 1.1.76 answers: a failed Bash is its output, with its result; any
            # other failure "Error: <error>", {"isHardFailure": true}.
            if isinstance(e, BashFailed):
                return {"type": "tool_result", "tool_use_id": tid, "content": err, "is_error": True}, e.result
            return {"type": "tool_result", "tool_use_id": tid, "content": f"Error: {err}", "is_error": True}, \
                {"isHardFailure": True}

    def validate(self, name: str, inp: dict) -> Optional[str]:
        """The checks the fake's tools make before touching anything, taken ahead of the hooks
        as the binary's validateInput does (the texts are the fake's own)."""
        try:
            if name == "Write":
                if os.path.isdir(self.resolve(inp["file_path"])):
                    return f"Path is a directory, not a file: {self.resolve(inp['file_path'])}"
            elif name == "Edit":
                self.edit_plan(inp)
            elif name == "NotebookEdit":
                self.notebook_plan(inp)
            elif name not in ("Bash", "Read"):
                return f"No such tool available: {name}"
        except ToolError as e:
            return str(e)
        except Exception:  # noqa: BLE001 - left to the tool itself (a failure after the hooks)
            return None
        return None

    # ---- tool bodies ----
    def resolve(self, p: str) -> str:
        return os.path.normpath(os.path.join(self.cwd, p))

    def execute(self, name: str, inp: dict, turn_uuid: str) -> tuple[str, Any]:
        if name == "Write":
            return self.tool_write(inp, turn_uuid)
        if name == "Edit":
            return self.tool_edit(inp, turn_uuid)
        if name == "NotebookEdit":
            return self.tool_notebook(inp, turn_uuid)
        if name == "Bash":
            return self.tool_bash(inp)
        if name == "Read":
            return self.tool_read(inp)
        raise ToolError(f"No such tool available: {name}")

    def tool_write(self, inp: dict, turn_uuid: str) -> tuple[str, Any]:
        path = self.resolve(inp["file_path"])
        content = inp.get("content", "")
        if os.path.isdir(path):
            raise ToolError(f"Path is a directory, not a file: {path}")
        exists = os.path.exists(path)
        original, enc, eol = (read_text_file(path) if exists else (None, "utf8", "LF"))
        target = io_path(path)
        self.history.track_edit(path, turn_uuid)  # after validation, before the write
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_text_atomic(target, content, enc, eol)
        text = (f"The file {path} has been updated successfully." if exists
                else f"File created successfully at: {path}")
        return text, {"type": "update" if exists else "create", "filePath": path, "content": content,
                      "structuredPatch": [], "originalFile": original}

    def edit_plan(self, inp: dict) -> tuple:
        # calculateEdit ~143191842 (without the read-before-edit rule and quote folding).
        path = self.resolve(inp["file_path"])
        old, new = inp.get("old_string", ""), inp.get("new_string", "")
        allow_multiple = bool(inp.get("allow_multiple", inp.get("replace_all", False)))
        if not os.path.exists(path):
            if old != "":
                raise ToolError("File not found. Cannot apply edit. Use an empty old_string to create a new file.")
            current, enc, eol, new_content, occurrences, is_new = None, "utf8", "LF", new, 1, True
        else:
            current, enc, eol = read_text_file(path)
            is_new = False
            if old == "":
                if current.strip() != "":
                    raise ToolError("Failed to edit. Attempted to create a file that already exists.")
                new_content, occurrences = new, 1
            else:
                occurrences = current.count(old)
                if occurrences == 0:
                    raise ToolError("Failed to edit, could not find the string to replace.")
                if occurrences > 1 and not allow_multiple:
                    raise ToolError(f"Failed to edit, expected 1 occurrence but found {occurrences}.")
                if old == new:
                    raise ToolError("No changes to apply. The old_string and new_string are identical.")
                new_content = nq_replace(current, old, new, allow_multiple)
        return path, old, new, allow_multiple, current, enc, eol, new_content, occurrences, is_new

    def tool_edit(self, inp: dict, turn_uuid: str) -> tuple[str, Any]:
        path, old, new, allow_multiple, current, enc, eol, new_content, occurrences, is_new = self.edit_plan(inp)
        target = io_path(path)
        self.history.track_edit(path, turn_uuid)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_text_atomic(target, new_content, enc, eol)
        text = (f"Created new file: {path} with provided content." if is_new
                else f"Successfully modified file: {path} ({occurrences} replacements).")
        return text, {"filePath": path, "oldString": old, "newString": new, "originalFile": current or "",
                      "structuredPatch": [], "userModified": False, "replaceAll": allow_multiple}

    def tool_notebook(self, inp: dict, turn_uuid: str) -> tuple[str, Any]:
        path, text, enc, eol, cell_id, source, cell_type, mode = self.notebook_plan(inp)
        self.history.track_edit(path, turn_uuid)
        write_text_atomic(io_path(path), text, enc, eol)
        return f"Updated cell {cell_id or 'beginning'} with {source}", {
            "new_source": source, "cell_id": cell_id, "cell_type": cell_type or "code", "edit_mode": mode}

    def notebook_plan(self, inp: dict) -> tuple:
        path = self.resolve(inp["notebook_path"])
        current, enc, eol = read_text_file(path)
        try:
            nb = json.loads(current)
        except ValueError:
            raise ToolError("Notebook is not valid JSON.")
        cells = nb.setdefault("cells", [])
        cell_id, mode = inp.get("cell_id"), inp.get("edit_mode") or "replace"
        source, cell_type = inp.get("new_source", ""), inp.get("cell_type")
        idx = 0
        if cell_id:
            idx = next((i for i, c in enumerate(cells) if c.get("id") == cell_id), -1)
            if idx == -1 and str(cell_id).isdigit():
                idx = int(cell_id)
            if idx == -1:
                raise ToolError(f"Cell with ID \"{cell_id}\" not found in notebook.")
            if mode == "insert":
                idx += 1
        if mode == "replace" and idx == len(cells):
            mode, cell_type = "insert", cell_type or "code"
        new_id = None
        if nb.get("nbformat", 0) > 4 or (nb.get("nbformat") == 4 and nb.get("nbformat_minor", 0) >= 5):
            new_id = uuidlib.uuid4().hex[:13] if mode == "insert" else cell_id
        if mode == "delete":
            cells.pop(idx)
        elif mode == "insert":
            cell: dict[str, Any] = {"cell_type": "markdown" if cell_type == "markdown" else "code"}
            if new_id is not None:  # JSON.stringify drops an undefined id
                cell["id"] = new_id
            cell.update({"source": source, "metadata": {}})
            if cell["cell_type"] == "code":
                cell.update({"execution_count": None, "outputs": []})
            cells.insert(idx, cell)
        else:
            c = cells[idx]
            c["source"] = source
            if c.get("cell_type") == "code":
                c["execution_count"], c["outputs"] = None, []
            if cell_type and cell_type != c.get("cell_type"):
                c["cell_type"] = cell_type
        text = json.dumps(nb, ensure_ascii=False, indent=1)  # JSON.stringify(w,null,1)
        return path, text, enc, eol, cell_id, source, cell_type, mode

    def tool_bash(self, inp: dict) -> tuple[str, Any]:
        # Bash never tracks a file: shell work is outside the CLI's file history.
        timeout = (inp.get("timeout") or 120000) / 1000.0
        proc = subprocess.Popen(["sh", "-c", inp["command"]], cwd=self.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.time() + timeout
        while proc.poll() is None:
            if self.abort.is_set() or time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if self.abort.is_set():
                    raise TurnAborted()
                break
            time.sleep(0.01)
        stdout, stderr = (s.decode("utf-8", "replace") for s in proc.communicate())
        text = stdout + (("\n" if stdout and stderr else "") + stderr if stderr else "")
        if proc.returncode not in (0, None):
            # A non-zero exit fails the tool: is_error "Exit code N\n<output>" and a
            # PostToolUseFailure with that error (as the real 1.1.76 answered `exit 3`).
            out = text.strip()
            raise BashFailed(f"Exit code {proc.returncode}" + (f"\n{out}" if out else ""),
                             {"stdout": stdout, "stderr": stderr, "interrupted": False, "exitCode": proc.returncode,
                              "isError": True})
        return text or "(no output)", {"stdout": stdout, "stderr": stderr, "interrupted": False,
                                       "exitCode": proc.returncode}

    def tool_read(self, inp: dict) -> tuple[str, Any]:
        path = self.resolve(inp["file_path"])
        content, _, _ = read_text_file(path)
        lines = content.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return "\n".join(f"{i + 1:6}\t{line}" for i, line in enumerate(lines)), {
            "type": "text", "file": {"filePath": path, "content": content, "numLines": len(lines)}}


def incomplete_text(d: dict) -> str:
    return (f"File rewind incomplete: {len(d['filesChanged'])} file(s) restored; {len(d['failedFiles'])} "
            f"file(s) could not be restored: {', '.join(f['path'] for f in d['failedFiles'])}.")


def main(argv: list[str]) -> int:
    if argv[:1] in (["-v"], ["--version"]):
        print(VERSION)  # the SDK's version probe reads this (the real CLI prints just "1.1.76")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    session = Session(argv)
    debug("argv", argv, "cwd", session.cwd, "session", session.session_id,
          "checkpointing", session.history.enabled, "root", session.history.root)
    threading.Thread(target=session.reader, name="stdin", daemon=True).start()
    session.worker()
    session.end_session_hooks()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Drive the REAL Qoder Agent SDK (qoder-agent-sdk 1.0.16, unmodified) against
fake_qodercli.py and check the wire and the CLI's file checkpointing end to end.

No pytest, no FUSE, no venv: the SDK and its dependencies are installed with pip into a
target directory (default /tmp/qoder/site, ``QODER_SDK_SITE`` elsewhere) from the wheel at
``QODER_SDK_WHEEL`` (default /tmp/qoder/qoder_agent_sdk-1.0.16-...whl; if the wheel is
missing, pip fetches ``qoder-agent-sdk==1.0.16`` from PyPI).

    python3 smoke.py            # exit 0 when every check passes

What it does: three turns with host-chosen message UUIDs (Write/Edit/NotebookEdit/Bash,
real files in a temp workspace), hooks registered for PreToolUse/PostToolUse/
UserPromptSubmit/Stop/SessionStart, replayed user messages on; then rewind_files dry runs
and real rewinds, rewind(scope=files|conversation|both), and the refusals. Alongside the
SDK's hooks, settings command hooks (a user ~/.qoder/settings.json under a private HOME and
the project's .qoder/settings.json) log what they are given and what the session transcript
shows at that moment.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_qodercli.py")
SITE = os.environ.get("QODER_SDK_SITE", "/tmp/qoder/site")
WHEEL = os.environ.get("QODER_SDK_WHEEL", "/tmp/qoder/qoder_agent_sdk-1.0.16-py3-none-manylinux_2_17_x86_64.whl")


def ensure_sdk() -> None:
    if not os.path.isdir(os.path.join(SITE, "qoder_agent_sdk")):
        spec = WHEEL if os.path.exists(WHEEL) else "qoder-agent-sdk==1.0.16"
        print(f"installing {spec} into {SITE}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", SITE, spec], check=True)
    sys.path.insert(0, SITE)


ensure_sdk()
sys.path.insert(0, HERE)

from qoder_agent_sdk import (  # noqa: E402
    AssistantMessage,
    HookMatcher,
    QoderAgentOptions,
    QoderSDKClient,
    ResultMessage,
    SystemMessage,
    UserMessage,
    qodercli_auth,
)
from qoder_agent_sdk import __version__ as sdk_version  # noqa: E402

import fake_qodercli as fq  # noqa: E402  (only for diff_lines_counts in expectations)

CHECKS: list[str] = []

# A settings command hook: logs its input, env, parent and the transcript as it is now.
HOOK_PY = r"""
import json, os, sys
inp = json.load(sys.stdin)
try:
    seen = [json.loads(line) for line in open(inp["transcript_path"], encoding="utf-8")]
except OSError:
    seen = None
rec = {"tag": sys.argv[1], "input": inp, "ppid": os.getppid(), "cwd": os.getcwd(),
       "env": {k: os.environ.get(k) for k in ("QODER_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "QODER_HOOK_SOURCE",
                                              "QODER_HOOK_VERSION", "QODER_SITE")},
       "transcript": None if seen is None else [{k: e.get(k) for k in ("type", "uuid", "requestSetId", "messageId")}
                                                for e in seen]}
fd = os.open(os.environ["HOOK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (json.dumps(rec) + "\n").encode())
os.close(fd)
"""


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)
    CHECKS.append(what)


def tree(ws: str) -> dict[str, tuple[str, bytes]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(ws):
        dirnames.sort()
        for n in sorted(filenames):
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, ws)] = (oct(stat.S_IMODE(os.lstat(p).st_mode)), open(p, "rb").read())
    return out


def expected_counts(before: dict, now: dict, files: list[str]) -> tuple[int, int]:
    ins = dels = 0
    for f in files:
        cur = now.get(f, (None, b""))[1].decode("utf-8", "replace")
        old = before.get(f, (None, b""))[1].decode("utf-8", "replace")
        a, r = fq.diff_lines_counts(cur, old)
        ins, dels = ins + a, dels + r
    return ins, dels


def proc_parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def check_settings_hooks(sdk_log: list[dict], cmd: list[dict], ws: str, uuids: list[str], cli_pid, home: str) -> None:
    """The command hooks ran where the SDK's did, with the same input, the binary's env, the
    CLI as their parent, and saw the transcript as the binary leaves it at each moment."""
    user = [c for c in cmd if c["tag"] == "user"]
    by_event: dict[str, list[dict]] = {}
    for c in user:
        by_event.setdefault(c["input"]["hook_event_name"], []).append(c)
    check(len(by_event.get("SessionStart", [])) == 1 and len(by_event.get("UserPromptSubmit", [])) == 3
          and len(by_event.get("Stop", [])) == 3 and len(by_event.get("QueryEnd", [])) == 3
          and len(by_event.get("PreToolUse", [])) == 11, "settings command hooks ran once per event, as the SDK's")
    edit = [c["input"]["tool_name"] for c in cmd if c["tag"] == "project-edit"]
    check(sorted(edit) == ["Edit", "Edit", "Edit", "NotebookEdit"],
          f"project hook, matcher 'Edit': an unanchored RegExp (Edit and NotebookEdit): {edit}")
    sdk_ups = [h["input"] for h in sdk_log if h["event"] == "UserPromptSubmit"]
    cmd_ups = [c["input"] for c in by_event["UserPromptSubmit"]]
    check(cmd_ups == sdk_ups, "a command hook's stdin is the SDK callback's input")
    check(all(isinstance(u.get("request_set_id"), str) and u["request_set_id"] for u in cmd_ups)
          and len({u["request_set_id"] for u in cmd_ups}) == 3, "UserPromptSubmit carries a request_set_id per prompt")
    for c in user:
        check(c["cwd"] == ws and c["env"]["QODER_PROJECT_DIR"] == ws and c["env"]["CLAUDE_PROJECT_DIR"] == ws
              and c["env"]["QODER_HOOK_SOURCE"] == "cli" and c["env"]["QODER_HOOK_VERSION"] == "1.1.76"
              and c["env"]["QODER_SITE"] == "GLOBAL", "hook env: project dir, source, version, site; cwd the session's")
        check(cli_pid is not None and cli_pid in (c["ppid"], proc_parent(c["ppid"])),
              "a hook's parent is the CLI (bash -c execs it)")
    tpath = cmd_ups[0]["transcript_path"]
    check(tpath.startswith(os.path.join(home, ".qoder", "projects", "")) and tpath.endswith(f"/{cmd_ups[0]['session_id']}.jsonl"),
          "transcript_path is ~/.qoder/projects/<cwd>/<session>.jsonl")
    stops = by_event["Stop"]
    for i, (u, up, st) in enumerate(zip(uuids, by_event["UserPromptSubmit"], stops)):
        rsid = up["input"]["request_set_id"]
        seen_at_ups = up["transcript"] or []
        check(all(e["uuid"] != u for e in seen_at_ups), f"t{i + 1}: at UserPromptSubmit the transcript has no entry for the prompt yet")
        mine = [e for e in st["transcript"] if e["type"] == "user" and e["uuid"] == u]
        check(len(mine) == 1 and mine[0]["requestSetId"] == rsid,
              f"t{i + 1}: by Stop the prompt's entry is there: uuid = message uuid, requestSetId = the hooks' request_set_id")
        check(st["input"]["parent_request_set_id"] == rsid, f"t{i + 1}: Stop's parent_request_set_id = request_set_id")
    pre_first = [c for c in by_event["PreToolUse"]]
    check(any(e["uuid"] == uuids[0] for e in pre_first[0]["transcript"]), "by the first PreToolUse the prompt's entry is written")
    final = [json.loads(line) for line in open(tpath)]
    snaps = {e["messageId"] for e in final if e["type"] == "file-history-snapshot"}
    check(snaps and snaps <= set(uuids), "file-history-snapshot entries carry the prompts' message uuids")
    check([e["uuid"] for e in final if e["type"] == "user" and e.get("requestSetId")] == uuids,
          "the transcript's typed prompts, in order, are the host's message uuids")


async def main() -> int:
    base = tempfile.mkdtemp(prefix="qoder-smoke-")
    ws = os.path.join(base, "ws")
    os.makedirs(ws)
    ckpt_root = os.path.join(base, "file-history")
    wire_log = os.path.join(base, "wire.jsonl")
    with open(os.path.join(ws, "a.txt"), "w") as f:
        f.write("base\n")
    os.chmod(os.path.join(ws, "a.txt"), 0o640)
    with open(os.path.join(ws, "keep.txt"), "w") as f:
        f.write("untouched\n")

    nb = {"cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "source": "print(1)",
                     "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    scenario = {"turns": [
        {"tools": [  # t1: overwrite an existing file, create two, shell edits a tracked file
            {"name": "Write", "input": {"file_path": "a.txt", "content": "one\ntwo\n"}},
            {"name": "Write", "input": {"file_path": "{ws}/new.txt", "content": "new\n"}},
            {"name": "Write", "input": {"file_path": "nb.ipynb", "content": json.dumps(nb) + "\n"}},
            {"name": "Bash", "input": {"command": "echo shell >> a.txt"}},
        ], "text": "t1 done"},
        {"tools": [  # t2: Edit, a file in a new directory, shell-only file, NotebookEdit
            {"name": "Edit", "input": {"file_path": "a.txt", "old_string": "two", "new_string": "TWO"}},
            {"name": "Write", "input": {"file_path": "sub/dir/c.txt", "content": "c1\nc2\nc3\n"}},
            {"name": "Bash", "input": {"command": "echo untracked > shell.txt; chmod 755 new.txt"}},
            {"name": "NotebookEdit", "input": {"notebook_path": "nb.ipynb", "cell_id": "c1", "new_source": "print(2)"}},
        ]},
        {"tools": [  # t3: edits to files tracked earlier, one with replace-all
            {"name": "Edit", "input": {"file_path": "new.txt", "old_string": "new", "new_string": "newer\nline"}},
            {"name": "Edit", "input": {"file_path": "a.txt", "old_string": "e", "new_string": "E", "allow_multiple": True}},
            {"name": "Write", "input": {"file_path": "sub/dir/c.txt", "content": "c1\n"}},
        ]},
    ]}
    scen_path = os.path.join(base, "scenario.json")
    json.dump(scenario, open(scen_path, "w"))

    # Settings command hooks: the user's (HOME is private to this run) on every event rewindfs
    # cares about, the project's on PreToolUse with matcher "Edit" (the binary's matcher is an
    # unanchored RegExp: NotebookEdit matches too).
    home = os.path.join(base, "home")
    hook_py, cmd_log = os.path.join(base, "hook.py"), os.path.join(base, "hooks.jsonl")
    open(hook_py, "w").write(HOOK_PY)
    os.makedirs(os.path.join(home, ".qoder"))
    user_events = ["SessionStart", "UserPromptSubmit", "PreToolUse", "Stop", "QueryEnd", "SessionEnd"]
    json.dump({"hooks": {e: [{"hooks": [{"type": "command", "command": f"{sys.executable} {hook_py} user"}]}]
                         for e in user_events}}, open(os.path.join(home, ".qoder", "settings.json"), "w"))
    os.makedirs(os.path.join(ws, ".qoder"))
    json.dump({"hooks": {"PreToolUse": [{"matcher": "Edit", "hooks": [
        {"type": "command", "command": f"{sys.executable} {hook_py} project-edit"}]}]}},
        open(os.path.join(ws, ".qoder", "settings.json"), "w"))

    hook_log: list[dict] = []

    def recorder(event: str):
        async def cb(inp, tool_use_id, ctx):
            entry = {"event": event, "input": inp, "tool_use_id": tool_use_id}
            if event == "PreToolUse" and inp.get("tool_name") == "Write":
                p = os.path.join(ws, inp["tool_input"]["file_path"].replace("{ws}/", ""))
                entry["file_at_pre"] = open(p, "rb").read() if os.path.exists(p) else None
            hook_log.append(entry)
            return {}
        return cb

    stderr_lines: list[str] = []
    options = QoderAgentOptions(
        cli_path=FAKE,
        auth=qodercli_auth(),
        cwd=ws,
        enable_file_checkpointing=True,
        extra_args={"replay-user-messages": None},
        env={"FAKE_QODER_SCENARIO": scen_path, "FAKE_QODER_WIRE_LOG": wire_log,
             "QODER_INTERNAL_DAEMON_FILE_CHECKPOINT_ROOT": ckpt_root, "HOME": home, "HOOK_LOG": cmd_log},
        stderr=stderr_lines.append,
        hooks={
            "PreToolUse": [HookMatcher(matcher=None, hooks=[recorder("PreToolUse")])],
            "PostToolUse": [HookMatcher(matcher="Write|Edit|NotebookEdit|Bash", hooks=[recorder("PostToolUse")])],
            "UserPromptSubmit": [HookMatcher(hooks=[recorder("UserPromptSubmit")])],
            "Stop": [HookMatcher(hooks=[recorder("Stop")])],
            "SessionStart": [HookMatcher(hooks=[recorder("SessionStart")])],
        },
    )
    print(f"qoder-agent-sdk {sdk_version}; workspace {ws}")
    uuids = [str(uuid.uuid4()) for _ in range(3)]
    before: list[dict] = []
    client = QoderSDKClient(options)
    await client.connect()
    try:
        info = await client.get_server_info()
        check("session_rewind_v1" in (info or {}).get("capabilities", []), "initialize answer advertises session_rewind_v1")
        for i, mid in enumerate(uuids):
            before.append(tree(ws))
            await client.query(f"turn t{i + 1}", message_uuid=mid)
            seen = []
            async for msg in client.receive_response():
                seen.append(msg)
            kinds = [type(m).__name__ for m in seen]
            print(f"t{i + 1} {mid}: {kinds}")
            check(isinstance(seen[0], SystemMessage) and seen[0].subtype == "init", f"t{i + 1}: system/init comes first")
            check(any(isinstance(m, UserMessage) and m.uuid == mid for m in seen), f"t{i + 1}: the prompt is replayed with the host's uuid")
            results = [m for m in seen if isinstance(m, ResultMessage)]
            check(len(results) == 1 and seen[-1] is results[0] and not results[0].is_error, f"t{i + 1}: receive_response ends at one success result")
            tool_uses = [b for m in seen if isinstance(m, AssistantMessage) for b in m.content if type(b).__name__ == "ToolUseBlock"]
            tool_results = [b for m in seen if isinstance(m, UserMessage) and isinstance(m.content, list)
                            for b in m.content if type(b).__name__ == "ToolResultBlock"]
            check(len(tool_uses) == len(scenario["turns"][i]["tools"]) == len(tool_results), f"t{i + 1}: one tool_result per tool_use")
            check(all(not r.is_error for r in tool_results), f"t{i + 1}: every tool succeeded: {[r.content for r in tool_results if r.is_error]}")
        after = tree(ws)
        print("tree after t3:", {k: v[1].decode() for k, v in after.items() if not k.endswith(".ipynb")})

        # Hooks: the inputs the CLI builds (createBaseInput + per-event fields).
        events = [h["event"] for h in hook_log]
        check(events.count("SessionStart") == 1 and events.count("UserPromptSubmit") == 3 and events.count("Stop") == 3,
              "SessionStart once, UserPromptSubmit and Stop once per turn")
        pre = [h for h in hook_log if h["event"] == "PreToolUse"]
        post = [h for h in hook_log if h["event"] == "PostToolUse"]
        check(len(pre) == len(post) == 11, "PreToolUse and PostToolUse around each of the 11 tools")
        for h in pre + post:
            inp = h["input"]
            check(all(k in inp for k in ("session_id", "transcript_path", "cwd", "hook_event_name", "permission_mode",
                                         "tool_use_id", "tool_name", "tool_input")), "hook input fields present")
            check(inp["cwd"] == ws and h["tool_use_id"] == inp["tool_use_id"], "hook cwd and tool_use_id")
        check(all("tool_response" in h["input"] for h in post), "PostToolUse carries tool_response")
        first_write = next(h for h in pre if h["input"]["tool_name"] == "Write")
        check(first_write["file_at_pre"] == b"base\n", "PreToolUse runs before the Write touches the file")
        ups = [h["input"] for h in hook_log if h["event"] == "UserPromptSubmit"]
        check([u["prompt"] for u in ups] == ["turn t1", "turn t2", "turn t3"], "UserPromptSubmit carries the prompt")
        check_settings_hooks(hook_log, [json.loads(line) for line in open(cmd_log)], ws, uuids,
                             (info or {}).get("pid"), home)

        # rewind_files to t3: dry run, then real.
        dry = await client.rewind_files(uuids[2], dry_run=True)
        print("dry run t3:", json.dumps(dry))
        changed_t3 = sorted(os.path.join(ws, f) for f in ("a.txt", "new.txt", "sub/dir/c.txt"))
        check(list(dry) == ["canRewind", "filesChanged", "insertions", "deletions"], "dry-run key order")
        check(dry["canRewind"] is True and sorted(dry["filesChanged"]) == changed_t3, "dry run t3 lists the files t3 changed (absolute)")
        exp = expected_counts(before[2], after, ["a.txt", "new.txt", "sub/dir/c.txt", "nb.ipynb"])
        check((dry["insertions"], dry["deletions"]) == exp, f"dry run t3 counts = diffLines counts {exp}")
        real = await client.rewind_files(uuids[2])
        print("rewind t3:", json.dumps(real))
        check(list(real) == ["canRewind", "filesChanged", "insertions", "deletions"], "real-rewind key order")
        check(real["insertions"] == 0 and real["deletions"] == 0 and sorted(real["filesChanged"]) == changed_t3,
              "real rewind: filesChanged absolute, insertions/deletions 0")
        now = tree(ws)
        tracked = ["a.txt", "new.txt", "nb.ipynb", "sub/dir/c.txt"]
        check({f: now.get(f) for f in tracked} == {f: before[2].get(f) for f in tracked},
              "after rewind to t3 the tracked files are as before t3 (content and mode)")
        check(now["shell.txt"] == after["shell.txt"], "a Bash-only file is not rewound")

        again = await client.rewind_files(uuids[2], dry_run=True)
        check(again == {"canRewind": True, "filesChanged": [], "insertions": 0, "deletions": 0}, "a second dry run finds nothing to do")

        # rewind() (session_rewind_v1): scope files / conversation / both.
        r_files = await client.rewind(uuids[1], scope="files", dry_run=True)
        print("rewind(files, dry) t2:", json.dumps(r_files))
        check(r_files["status"] == "ready" and r_files["scope"] == "files" and "removedMessageIds" not in r_files, "rewind files dry run is ready")
        r_conv = await client.rewind(uuids[1], scope="conversation", dry_run=True)
        print("rewind(conversation, dry) t2:", json.dumps(r_conv))
        check(r_conv["status"] == "ready" and r_conv["removedMessageIds"][0] == uuids[1], "conversation plan starts at the target prompt")
        r_bad = await client.rewind(str(uuid.uuid4()), scope="both")
        print("rewind(both) unknown:", json.dumps(r_bad))
        check(r_bad["status"] == "rejected" and r_bad["error"].startswith("Rewind target is not an eligible human input"), "rewind rejects an unknown target")

        # rewind_files to t2 for real, via rewind(scope=both): files back to before t2.
        r_both = await client.rewind(uuids[1], scope="both")
        print("rewind(both) t2:", json.dumps(r_both))
        check(r_both["status"] == "success", "rewind both succeeds")
        now = tree(ws)
        check({f: now.get(f) for f in tracked} == {f: before[1].get(f) for f in tracked},
              "after rewind to t2 the tracked files are as before t2 (sub/dir/c.txt deleted, mode of new.txt back)")

        # Refusals.
        missing = str(uuid.uuid4())
        d = await client.rewind_files(missing, dry_run=True)
        check(d == {"canRewind": False, "error": f"no snapshot found for message {missing}"}, "unknown id: dry run answers canRewind false")
        try:
            await client.rewind_files(missing)
            check(False, "non-dry unknown id must raise")
        except Exception as e:  # noqa: BLE001 - the SDK raises a bare Exception here
            check(str(e) == f"no snapshot found for message {missing}", "unknown id: the SDK raises the CLI's text")

        # A failing file: the backup of a tracked file vanishes -> partial rewind, the SDK raises.
        sess_dir = os.path.join(ckpt_root, os.listdir(ckpt_root)[0])
        for n in os.listdir(sess_dir):
            os.unlink(os.path.join(sess_dir, n))
        with open(os.path.join(ws, "a.txt"), "w") as f:
            f.write("changed by the user\n")
        dry = await client.rewind_files(uuids[0], dry_run=True)
        print("dry run t1 without backups:", json.dumps(dry))
        check(dry["canRewind"] is False and dry["error"].startswith("Some files have no usable checkpoint backup: "), "lost backups: dry run says which")
        try:
            await client.rewind_files(uuids[0])
            check(False, "a partial rewind must raise")
        except Exception as e:  # noqa: BLE001
            print("rewind t1 without backups raised:", e)
            check(str(e).startswith("File rewind incomplete: "), "partial rewind: the SDK raises the CLI's text")
    finally:
        await client.disconnect()

    # SessionEnd, once stdin closed (the real 1.1.76: reason "other").
    cmd = [json.loads(line) for line in open(cmd_log)]
    ends = [c for c in cmd if c["input"]["hook_event_name"] == "SessionEnd"]
    check(len(ends) == 1 and ends[0]["input"]["reason"] == "other", "a SessionEnd command hook runs when the session ends")

    wire = [json.loads(line) for line in open(wire_log)]
    first_in = next(w["msg"] for w in wire if w["dir"] == "in")
    check(first_in["request"]["subtype"] == "initialize" and "hooks" in first_in["request"], "the SDK opens with initialize, hooks registered")
    user_in = [w["msg"] for w in wire if w["dir"] == "in" and w["msg"].get("type") == "user"]
    check([u.get("uuid") for u in user_in] == uuids and all(u.get("priority") == "next" for u in user_in),
          "user messages carry uuid (message_uuid) and priority")
    print(f"\n{len(CHECKS)} checks passed")
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

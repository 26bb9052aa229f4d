#!/usr/bin/env python3
"""Check fake_qodercli's settings command hooks and session transcript against the REAL
qodercli 1.1.76, run offline.

How the real binary runs without a Qoder login or a network (found in the binary, WIRE.md
"Running the real binary offline"): user settings with ``security.auth.useExternal: true``
skip the headless auth gate (vU(authType, useExternalAuth) ~154401923), and the hidden
``--fake-responses <jsonl>`` flag answers every model request from a file (K9 ~141551775:
one ``{"method": "generateContentStream", "response": [<Gemini-style chunk>]}`` per request),
so ``--print --input-format stream-json`` sessions run for real: settings hooks, tools, file
history, transcript. The TUI still insists on a login (yB ~155373301), so only SDK mode can
be compared. The real binary runs under ``unshare -n`` (no network) when that works.

Each scenario runs twice, with the same settings hooks (a logger that records its stdin, env,
parent, and the transcript at that moment), once on the real binary and once on the fake,
and the two are compared: the hooks that ran and their order (hooks of one event start
together, so their order within the event is not compared), each hook's input keys and
``QODER_``/``CLAUDE_`` env names, the transcript's entry types as each hook saw them, the key
order of every kind of transcript entry, and the results and tool_results (blocking).

    python3 crosscheck_hooks.py          # exit 0 when the fake agrees with the binary
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_qodercli.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
BINARY = os.environ.get("QODERCLI_BIN") or os.path.join(
    REPO, "target/clients/venv/lib/python3.11/site-packages/qoder_agent_sdk/_bundled/qodercli")

# Env the real binary puts into its own process env at start (so its hooks and tools see
# them) and the fake does not model.
BINARY_ONLY_ENV = {"QODER_SECURITY_SCAN_SETTINGS_JSON", "QODER_SITES_ROOT"}

LOGGER = r"""#!/bin/sh
d="$HOOKLOG/$(date +%s%N)-$1"
mkdir -p "$d"
cat > "$d/stdin.json"
env > "$d/env"
echo "$PPID" > "$d/ppid"
tp=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1])).get("transcript_path",""))' "$d/stdin.json")
[ -f "$tp" ] && cp "$tp" "$d/transcript.jsonl"
case "$1" in *EXIT2*) echo "blocked by test hook" >&2; exit 2;; *STDOUT*) echo "hello from a hook";; *BADJSON*) echo "{bad";; esac
exit 0
"""


def can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


UNSHARE = can_unshare()


def run(root: str, real: bool, prompts: list[str], responses, user_hooks=None, project_hooks=None,
        local_hooks=None, flag_hooks=None, extra_args=(), cwd_sub="proj", user_extra=None) -> dict:
    """One session; responses: a list of model responses, each a list of parts
    ({"text": ...} or {"functionCall": {"name", "args"}}), for the whole session."""
    shutil.rmtree(root, ignore_errors=True)
    home, proj, logs = f"{root}/home", f"{root}/proj", f"{root}/logs"
    for d in (f"{home}/.qoder", f"{proj}/.qoder", logs, f"{root}/{cwd_sub}"):
        os.makedirs(d, exist_ok=True)
    logger = f"{root}/hook.sh"
    open(logger, "w").write(LOGGER)
    os.chmod(logger, 0o755)

    def hooks(spec):  # {event: [(matcher|None, tag)]}
        return {e: [{**({"matcher": m} if m else {}), "hooks": [{"type": "command", "command": f"{logger} {t}"}]}
                    for m, t in lst] for e, lst in spec.items()}

    user = {"security": {"auth": {"useExternal": True}}, **(user_extra or {})}
    if user_hooks:
        user["hooks"] = hooks(user_hooks)
    json.dump(user, open(f"{home}/.qoder/settings.json", "w"))
    if project_hooks:
        json.dump({"hooks": hooks(project_hooks)}, open(f"{proj}/.qoder/settings.json", "w"))
    if local_hooks:
        json.dump({"hooks": hooks(local_hooks)}, open(f"{proj}/.qoder/settings.local.json", "w"))
    resp = [[{**p, "functionCall": {**p["functionCall"], "args": json.loads(json.dumps(p["functionCall"]["args"]).replace("{ws}", proj))}}
             if "functionCall" in p else p for p in r] for r in responses]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QODER", "FAKE_QODER"))}
    env.update({"HOME": home, "HOOKLOG": logs, "QODER_ENTRYPOINT": "sdk-py"})
    open(f"{root}/auth.json", "w").write('{"type": "qodercli"}')
    env["QODER_SDK_AUTH_PAYLOAD_FILE"] = f"{root}/auth.json"
    flags = ["--print", "--output-format", "stream-json", "--input-format", "stream-json", "--system-prompt", "",
             "--disable-builtin-skills", "--yolo", *extra_args]
    if flag_hooks:
        flags += ["--settings", json.dumps({"hooks": hooks(flag_hooks)})]
    if real:
        with open(f"{root}/fake.jsonl", "w") as f:
            for parts in resp:
                f.write(json.dumps({"method": "generateContentStream", "response": [
                    {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}]}) + "\n")
        argv = (["unshare", "-n"] if UNSHARE else []) + [BINARY, *flags, "--fake-responses", f"{root}/fake.jsonl"]
    else:
        turns, cur = [], []
        for parts in resp:  # a text-only response ends a turn
            cur.append([p["text"] if "text" in p else {"tool": p["functionCall"]["name"], "input": p["functionCall"]["args"]}
                        for p in parts])
            if all("text" in p for p in parts):
                turns.append({"responses": cur})
                cur = []
        json.dump({"turns": turns}, open(f"{root}/scenario.json", "w"))
        env["FAKE_QODER_SCENARIO"] = f"{root}/scenario.json"
        argv = [sys.executable, FAKE, *flags]
    p = subprocess.Popen(argv, cwd=f"{root}/{cwd_sub}", env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=open(f"{root}/stderr.txt", "w"), text=True)
    lines: list[str] = []

    def reader() -> None:
        for line in p.stdout:
            lines.append(line)

    threading.Thread(target=reader, daemon=True).start()

    def send(o: dict) -> None:
        p.stdin.write(json.dumps(o) + "\n")
        p.stdin.flush()

    def wait_for(pred, timeout: float) -> None:
        end = time.time() + timeout
        while time.time() < end and not pred():
            time.sleep(0.05)

    send({"type": "control_request", "request_id": "req_1_a", "request": {"subtype": "initialize", "hooks": {}}})
    wait_for(lambda: any('"control_response"' in x for x in lines), 60)
    mids = []
    for pr in prompts:
        n0 = sum('"type":"result"' in x for x in lines)
        mids.append(str(uuid.uuid4()))
        send({"type": "user", "message": {"role": "user", "content": pr}, "parent_tool_use_id": None,
              "session_id": "default", "priority": "next", "uuid": mids[-1]})
        wait_for(lambda: sum('"type":"result"' in x for x in lines) > n0, 90)
    p.stdin.close()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
    return summarize(root, lines, mids)


def summarize(root: str, lines: list[str], mids: list[str]) -> dict:
    hooks = []
    for d in sorted(glob.glob(f"{root}/logs/*")):
        tag = os.path.basename(d).split("-", 1)[1]
        inp = json.load(open(f"{d}/stdin.json"))
        env = {ln.split("=", 1)[0] for ln in open(f"{d}/env") if "=" in ln}
        seen = None
        if os.path.exists(f"{d}/transcript.jsonl"):
            seen = []
            for ln in open(f"{d}/transcript.jsonl"):
                o = json.loads(ln)
                if o["type"] == "attachment" and o["attachment"].get("type") != "hook_success":
                    continue  # skill/agent listings: the binary's own, not modelled
                seen.append(o["type"] + ("/update" if o.get("isSnapshotUpdate") else ""))
        hooks.append({"tag": tag, "keys": list(inp), "event": inp.get("hook_event_name"),
                      "env": sorted(k for k in env if re.match(r"(QODER|CLAUDE)_", k) and k not in BINARY_ONLY_ENV),
                      "transcript": seen, "input": inp})
    shapes: dict[str, list[str]] = {}
    files = glob.glob(f"{root}/home/.qoder/projects/*/*.jsonl")
    entries = [json.loads(ln) for ln in open(files[0])] if files else []
    for o in entries:
        if o["type"] == "attachment" and o["attachment"].get("type") != "hook_success":
            continue
        kind = o["type"]
        if kind == "user":
            kind += "/result" if o["message"]["content"][0].get("type") == "tool_result" else "/prompt"
        if kind == "assistant":
            kind += "/" + o["message"]["content"][0]["type"]
        keys = [k for k in o if k != "requestTokenAnchor"]  # hashes of the model exchange
        if kind in ("user/prompt", "assistant/text", "assistant/tool_use"):
            keys += [f"message.{k}" for k in o["message"]]
        shapes.setdefault(kind, keys)
    outs = []
    for ln in lines:
        o = json.loads(ln)
        if o.get("type") == "result":
            outs.append(("result", o.get("subtype"), o.get("errors"), o.get("error_code")))
        if o.get("type") == "user" and isinstance(o["message"].get("content"), list):
            c = o["message"]["content"][0]
            if c.get("type") == "tool_result" and "hook blocking error" in str(c.get("content", "")):
                # Bun's JSON.parse messages are not Python's: compared up to the parse error.
                text = re.sub(r"JSON Parse error: .*", "JSON Parse error: ...", c["content"].replace(root, "<root>"))
                outs.append(("tool_result", text, c.get("is_error"), o.get("tool_use_result")))
    return {"hooks": hooks, "shapes": shapes, "outs": outs, "mids": mids, "entries": entries}


def events_in_order(hooks: list[dict]) -> list[list[str]]:
    """Tags grouped by consecutive event (hooks of one event start together)."""
    groups: list[list[str]] = []
    last = None
    for h in hooks:
        if h["event"] != last:
            groups.append([])
            last = h["event"]
        groups[-1].append(h["tag"])
    return [sorted(g) for g in groups]


def compare(a: dict, b: dict, racy_pre: bool = True) -> list[str]:
    probs = []
    ga, gb = events_in_order(a["hooks"]), events_in_order(b["hooks"])
    if ga != gb:
        probs.append(f"hooks run: binary {ga} | fake {gb}")
        return probs

    def keyed(hs: list[dict]) -> dict:  # pair hooks by (event group, tag)
        out, gi, last = {}, -1, None
        for h in hs:
            if h["event"] != last:
                gi, last = gi + 1, h["event"]
            out[(gi, h["tag"])] = h
        return out
    ka, kb = keyed(a["hooks"]), keyed(b["hooks"])
    for k in ka:
        x, y = ka[k], kb[k]
        if x["keys"] != y["keys"]:
            probs.append(f"{k}: input keys binary {x['keys']} | fake {y['keys']}")
        if x["env"] != y["env"]:
            probs.append(f"{k}: env binary {x['env']} | fake {y['env']}")
        tx, ty = x["transcript"], y["transcript"]
        if tx != ty:
            # The binary records a response's assistant entries while its tools already run
            # (a 100 ms write batch): a PreToolUse hook may or may not see them.
            if racy_pre and x["event"] == "PreToolUse" and tx and ty and [t for t in tx if t not in ("assistant", "active-leaf")] \
                    == [t for t in ty if t not in ("assistant", "active-leaf")]:
                continue
            probs.append(f"{k}: transcript binary {tx} | fake {ty}")
    for kind in sorted(set(a["shapes"]) | set(b["shapes"])):
        if a["shapes"].get(kind) != b["shapes"].get(kind):
            probs.append(f"entry {kind}: binary {a['shapes'].get(kind)} | fake {b['shapes'].get(kind)}")
    if a["outs"] != b["outs"]:
        probs.append(f"results: binary {a['outs']} | fake {b['outs']}")
    return probs


def main() -> int:
    if not os.path.exists(BINARY):
        print(f"no qodercli at {BINARY} (QODERCLI_BIN)")
        return 2
    print(f"binary {BINARY}; " + ("no network (unshare -n)" if UNSHARE else "unshare -n unavailable: the binary runs with the network"))
    base = tempfile.mkdtemp(prefix="qoder-hooks-xcheck-")
    every = ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop",
             "QueryEnd", "SessionEnd"]
    W = lambda path, text: {"functionCall": {"name": "Write", "args": {"file_path": "{ws}/" + path, "content": text}}}
    scenarios = {
        # prompts, tools (Write, Bash, Edit after a Write), a text+tool response, a turn without tools;
        # user hooks on every event and a project UserPromptSubmit hook.
        "turns": dict(prompts=["first prompt", "second", "third"], responses=[
            [W("a.txt", "one\n")],
            [{"functionCall": {"name": "Bash", "args": {"command": "echo hi > b.txt", "description": "d"}}}],
            [{"text": "done 1"}],
            [{"text": "editing"}, {"functionCall": {"name": "Edit", "args": {"file_path": "{ws}/a.txt", "old_string": "one", "new_string": "two"}}}],
            [W("c.txt", "c\n")],
            [{"text": "done 2"}],
            [{"text": "done 3"}]],
            user_hooks={e: [(None, f"u-{e}")] for e in every}, project_hooks={"UserPromptSubmit": [(None, "p-UserPromptSubmit")]}),
        # exit 2 on UserPromptSubmit: the prompt is dropped, the turn ends in an error result.
        "block-prompt": dict(prompts=["blocked"], responses=[[{"text": "never"}]],
                             user_hooks={"UserPromptSubmit": [(None, "EXIT2-ups")], "Stop": [(None, "u-Stop")],
                                         "SessionEnd": [(None, "u-SessionEnd")]}),
        # matchers are unanchored RegExps; exit 2 on PreToolUse denies the tool (no Post hook).
        "matchers": dict(prompts=["write"], responses=[[W("a.txt", "1\n")], [{"text": "ok"}]],
                         project_hooks={"PreToolUse": [("rite", "m-rite"), ("Edit", "m-Edit"), ("^Write$", "m-EXIT2")],
                                        "PostToolUse": [("Write", "m-post")], "PostToolUseFailure": [(None, "m-fail")]}),
        # a PreToolUse hook printing broken JSON denies; UserPromptSubmit stdout is an attachment.
        "outputs": dict(prompts=["write"], responses=[[W("a.txt", "1\n")], [{"text": "ok"}]],
                        user_hooks={"UserPromptSubmit": [(None, "STDOUT-ups")], "PreToolUse": [(None, "BADJSON-pre")],
                                    "Stop": [(None, "u-Stop")]}),
        # sources: user, project, local, --settings; --setting-sources user leaves only the
        # user's (not even --settings); the same command in two files runs once.
        "sources": dict(prompts=["hi"], responses=[[{"text": "ok"}]], flag_hooks={"UserPromptSubmit": [(None, "flag")]},
                        user_hooks={"UserPromptSubmit": [(None, "user")]}, project_hooks={"UserPromptSubmit": [(None, "project")]},
                        local_hooks={"UserPromptSubmit": [(None, "local")]}),
        "only-user": dict(prompts=["hi"], responses=[[{"text": "ok"}]], extra_args=["--setting-sources", "user"],
                          flag_hooks={"UserPromptSubmit": [(None, "flag")]},
                          user_hooks={"UserPromptSubmit": [(None, "user")]}, project_hooks={"UserPromptSubmit": [(None, "project")]},
                          local_hooks={"UserPromptSubmit": [(None, "local")]}),
        "dedup": dict(prompts=["hi"], responses=[[{"text": "ok"}]],
                      user_hooks={"UserPromptSubmit": [(None, "same")]}, project_hooks={"UserPromptSubmit": [(None, "same")]}),
        # started in a subdirectory: the project's .qoder is not looked for above the cwd.
        "subdir": dict(prompts=["hi"], responses=[[{"text": "ok"}]], cwd_sub="proj/sub",
                       user_hooks={"UserPromptSubmit": [(None, "user")]}, project_hooks={"UserPromptSubmit": [(None, "project")]}),
        # a failing Bash (PostToolUseFailure) and an Edit its own checks refuse (no hook).
        "failures": dict(prompts=["go"], responses=[
            [{"functionCall": {"name": "Bash", "args": {"command": "echo bad; exit 3", "description": "d"}}}],
            [{"functionCall": {"name": "Edit", "args": {"file_path": "{ws}/nope.txt", "old_string": "x", "new_string": "y"}}}],
            [{"text": "ok"}]], user_hooks={e: [(None, f"u-{e}")] for e in ("PreToolUse", "PostToolUse", "PostToolUseFailure")}),
        # the hook switches.
        "disabled": dict(prompts=["hi"], responses=[[{"text": "ok"}]], user_extra={"disableAllHooks": True},
                         user_hooks={"UserPromptSubmit": [(None, "user")]}),
    }
    failed = 0
    for name, spec in scenarios.items():
        spec = dict(spec)
        a = run(f"{base}/real-{name}", True, **spec)
        b = run(f"{base}/fake-{name}", False, **spec)
        probs = compare(a, b)
        # The typed prompts' entries: the message uuid and the hooks' request_set_id.
        for s, who in ((a, "binary"), (b, "fake")):
            ups = [h["input"] for h in s["hooks"] if h["event"] == "UserPromptSubmit"]
            if not ups:
                continue
            rs = {u["request_set_id"] for u in ups}
            typed = [(e["uuid"], e.get("requestSetId")) for e in s["entries"] if e["type"] == "user" and e.get("requestSetId")]
            if any(r not in rs for _, r in typed) or any(u not in s["mids"] for u, _ in typed):
                probs.append(f"{who}: typed prompts {typed} do not pair with request_set_ids {rs} / uuids {s['mids']}")
        print(f"{'ok  ' if not probs else 'DIFF'} {name}: {len(a['hooks'])} hooks")
        for p in probs:
            print("     ", p)
        failed += bool(probs)
    if not failed:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"(runs kept in {base})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
